"""The small JSON record a lock's holder writes into its lock file: who holds it (pid), since when.

Ours (a profile's `.hermes-admin/lock`, a root's run lock) and Hermes' own maintenance lock files
carry one, so a run that finds a lock held can say by whom. What the kernel says is truer: the
one reader of /proc/locks is here too, and the one reader of a process's command line.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass


def write(fd: int, **extra) -> None:
    """Say on the lock file that this process holds it (no fsync: it only names the holder).

    Written over the last holder's record, then cut to length only if that one was longer: records
    are nearly always the same length, and a truncate costs more than the rest of taking a lock. A
    reader between the two sees no valid record, which `holder` already treats as "unknown".
    Best effort: a record that cannot be written (a full or failing disk) leaves the lock held
    and its holder unknown, never the lock taken with nobody left to release it."""
    record = json.dumps({"pid": os.getpid(), "acquired_at": time.time(), **extra}).encode()
    try:
        os.pwrite(fd, record, 0)
        if os.fstat(fd).st_size > len(record):
            os.ftruncate(fd, len(record))
    except OSError:
        pass


def holder(fd: int) -> int | None:
    """The pid the lock file's holder wrote, if it wrote a plausible one."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


@dataclass(frozen=True)
class Lock:
    """One line of /proc/locks: "1: POSIX  ADVISORY  READ 14478 fe:00:2638045 128 128"."""

    kind: str  # POSIX (SQLite's), OFDLCK, FLOCK (ours), LEASE
    mode: str  # READ or WRITE
    pid: int  # -1 for an open file description's lock
    device: str  # the filesystem, as the kernel names it ("fe:00")
    inode: int
    start: int
    waiting: bool  # a waiter's line ("1: -> POSIX ..."): it wants the lock, it does not hold it


def lock_table() -> list[Lock] | None:
    """/proc/locks, parsed: the one reader of it (holders, write-lock holders, lock files' holders).
    None when it cannot be read, or holds a line of a shape this code does not know."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    locks = []
    for line in lines:
        fields = line.split()
        waiting = "->" in fields
        if waiting:
            fields.remove("->")
        try:
            device, inode = fields[5].rsplit(":", 1)
            locks.append(Lock(fields[1], fields[3], int(fields[4]), device, int(inode), int(fields[6]), waiting))
        except (IndexError, ValueError):
            return None
    return locks


def kernel_holders(st: os.stat_result, kinds: tuple[str, ...] = ("FLOCK",)) -> list[int]:
    """The pids the kernel says hold a lock of these kinds (FLOCK; POSIX for SQLite's) on the file
    `st` is of: the real holder, whatever a record in the file says. Waiters are not holders.
    Empty where /proc/locks cannot say (no procfs, another pid namespace)."""
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    pids: list[int] = []
    for lock in lock_table() or []:
        if (not lock.waiting and lock.kind in kinds and lock.device == device and lock.inode == st.st_ino
                and lock.pid > 0 and lock.pid not in pids):
            pids.append(lock.pid)
    return pids


def command_of(pid: int, limit: int = 120) -> str | None:
    """`hermes-admin --all-users run`: what a process runs, printable and bounded (it may be another
    user's text), or None once it is gone (or hidden)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            words = source.read(4096).rstrip(b"\0").split(b"\0")
    except OSError:
        return None
    text = " ".join(os.path.basename(w.decode(errors="replace")) if n == 0 else w.decode(errors="replace")
                    for n, w in enumerate(words) if w)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:limit] + ("…" if len(text) > limit else "") if text else None


def describe(fd: int, recorded: int | None = None, kinds: tuple[str, ...] = ("FLOCK",)) -> str:
    """` (held by pid 123: hermes-admin run)`: the holder as the kernel knows it, and whether the
    pid recorded in the file is stale; the record alone where the kernel cannot say."""
    try:
        held = kernel_holders(os.fstat(fd), kinds)
    except OSError:
        held = []
    if held:
        said = ", ".join(f"pid {pid}" + (f": {command_of(pid)}" if command_of(pid) else "") for pid in held[:3])
        stale = f"; the pid {recorded} recorded in it is stale" if recorded and recorded not in held else ""
        return f" (held by {said}{stale})"
    if recorded:
        alive = command_of(recorded)
        return f" (pid {recorded}: {alive})" if alive else \
            f" (the record names pid {recorded}, which is not running: the record is stale)"
    return ""

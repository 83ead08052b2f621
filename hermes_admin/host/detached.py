"""Processes whose hold on a store is broken: files no longer at their path, or locks gone.

A Hermes process holds `state.db`, `-wal` and `-shm` open all day. When another program deletes
the WAL under it (SQLite's close of what it took for the last connection, upstream #109966) or
replaces the store, the process goes on writing into files nobody will ever read: every write
"succeeds", none survives it, and its own status stays healthy. Found from
`/proc/<pid>/fd` (each link's target, and `stat` through it: nothing is opened) and
`/proc/locks`, in one pass for all the stores of a run. The process is only named, never touched:
the fix is to restart it, after copying the deleted file out of `/proc/PID/fd/N` if its writes
matter.

Two kinds:
- `deleted` / `replaced`: the process writes into files that are no longer the store. Its next
  checkpoint copies pages into the database file ours would share: no write of ours goes there
  until it is restarted (an error).
- `unlocked`: a read-write WAL connection without its lock on `state.db` or `-shm`, the state of
  upstream #109786. Our connections never checkpoint-and-delete on close (keep_wal.py), so we go
  on; the warning says that the next careless tool (the `sqlite3` shell) will kill its
  persistence. Seen from outside, a process that opens and closes connections fast can look the
  same between two of them, so this never refuses anything.

Root sees every process; a user sees her own (the kernel hides the fds of others).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from hermes_admin.lockrecord import command_of
from hermes_admin.profile.engine.holders import locks_by_inode

SUFFIXES = ("", "-wal", "-shm")  # the store and its sidecars: the files a process may hold broken
COMMAND_CHARS = 160  # of a process's command line, in a report line
LOOKS, LOOKS_S = 3, 0.15  # a connection being opened takes its locks within microseconds
DELETED = " (deleted)"  # what the kernel appends to an fd's link when its file is gone


@dataclass(frozen=True)
class Broken:
    file: str  # which of the store's files: state.db, state.db-wal, state.db-shm
    how: str  # "deleted", "replaced" or "unlocked"
    fd: int

    @property
    def blocks_writes(self) -> bool:
        return self.how != "unlocked"

    def __str__(self) -> str:
        return f"{self.file} without its locks" if self.how == "unlocked" else f"a {self.how} {self.file}"


@dataclass(frozen=True)
class BrokenHold:
    """One process's broken hold on one store: every file of the store it holds wrongly."""

    pid: int
    command: str
    broken: tuple[Broken, ...]

    @property
    def blocks_writes(self) -> bool:
        return any(b.blocks_writes for b in self.broken)

    def line(self, label: str, store: Path) -> str:
        """One line for the report: who, what, and what fixes it."""
        who = f"pid {self.pid} ({self.command})"
        if not self.blocks_writes:
            files = " and ".join(b.file for b in self.broken)
            return (f"profile '{label}': {store}: {who} holds {files} without its SQLite locks (something in "
                    f"that process closed the file); another tool's close can delete its WAL under it: restart it")
        gone = [b for b in self.broken if b.blocks_writes]
        line = (f"profile '{label}': {store}: {who} writes into {', '.join(map(str, gone))}: its writes are "
                f"lost, and the store is not maintained until that process is restarted")
        wal = [b for b in gone if b.file.endswith("-wal")]
        if wal:
            line += f" (copy /proc/{self.pid}/fd/{wal[0].fd} first to keep what it wrote)"
        return line

    def as_dict(self) -> dict:
        return {"pid": self.pid, "command": self.command, "blocks_writes": self.blocks_writes,
                "files": [{"file": b.file, "problem": b.how} for b in self.broken]}


def scan(stores: list[Path]) -> dict[Path, list[BrokenHold]]:
    """For each store, the processes (not ours) whose hold on it is broken. One pass over /proc;
    an unreadable /proc gives no findings (this is a report, not a gate)."""
    wanted: dict[str, tuple[Path, str]] = {}
    for store in stores:
        real = os.path.realpath(store)
        for suffix in SUFFIXES:
            wanted[real + suffix] = (store, Path(real + suffix).name)
    broken: dict[tuple[Path, int], list[Broken]] = {}
    if not wanted:
        return {}
    holding: list[tuple[int, int, str, Path, os.stat_result]] = []  # held at their paths, for the lock check
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    writers: set[tuple[Path, int]] = set()  # holding -shm read-write: a WAL connection that can write
    for pid in pids:
        if pid == me:
            continue
        for fd, target in _links(pid):
            deleted = target.endswith(DELETED)
            name = target[: -len(DELETED)] if deleted else target
            if name not in wanted:
                continue
            store, file = wanted[name]
            try:
                held = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if file.endswith("-shm") and _read_write(pid, fd):
                writers.add((store, pid))
            how = "deleted" if deleted else _compare(held, name)
            if how:
                broken.setdefault((store, pid), []).append(Broken(file, how, fd))
            else:
                holding.append((pid, fd, file, store, held))
    # In WAL mode a connection that may write keeps a lock on state.db and on -shm for as long as it
    # is open (none on -wal: its locks live in -shm). A read-only one may hold -shm without a lock (no
    # other connection was there to share the index with: SQLite reads it as a copy, by design), and
    # one to a rollback-journal store holds none between transactions: neither is looked at. A
    # connection being opened or closed right now holds its files a moment without its locks: only
    # what is unlocked at every look, over LOOKS_S, counts. A warning, never a refusal: a process that
    # opens and closes connections fast can still be caught between two of them.
    candidates = [h for h in holding if (h[3], h[0]) in writers and h[2] in (h[3].name, h[3].name + "-shm")]
    for look in range(LOOKS):
        if not candidates:
            break
        if look:
            time.sleep(LOOKS_S / (LOOKS - 1))
        locks = locks_by_inode({held.st_ino for *_, held in candidates})
        if locks is None:
            candidates = []
            break
        candidates = [h for h in candidates if h[0] not in locks[h[4].st_ino]]
    for pid, fd, file, store, held in candidates:
        broken.setdefault((store, pid), []).append(Broken(file, "unlocked", fd))
    found: dict[Path, list[BrokenHold]] = {}
    for (store, pid), files in sorted(broken.items(), key=lambda item: item[0][1]):
        found.setdefault(store, []).append(BrokenHold(pid, command_of(pid, COMMAND_CHARS) or "?", tuple(files)))
    return found


def _links(pid: int):
    """(fd, target) of each descriptor of `pid` we may look at; none for a process we may not."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        try:
            yield int(fd), os.readlink(f"/proc/{pid}/fd/{fd}")
        except (OSError, ValueError):
            continue


def _read_write(pid: int, fd: int) -> bool:
    """Was the descriptor opened for writing (its `flags` in /proc/PID/fdinfo)?"""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE != os.O_RDONLY
    except (OSError, ValueError, IndexError):
        pass
    return False


def _compare(held: os.stat_result, path: str) -> str | None:
    """"replaced" when the file at `path` is no longer the one held, else None."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return "deleted"
    except OSError:
        return None
    return None if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) else "replaced"

"""The small JSON record a lock's holder writes into its lock file: who holds it (pid), since when.

Ours (a profile's `.hermes-admin/lock`, a root's run lock) and Hermes' own maintenance lock files
carry one, so a run that finds a lock held can say by whom. What the kernel says is truer: the
one reader of /proc/locks is here too, and the one reader of a process's command line.

/proc/locks is everyone's: any user can fill it (100 000 small locks make one read of it take
seconds, since the kernel walks the table from its start for every page it hands out). So it is
read up to LOCK_LINES lines and LOCK_SECONDS; past either the table is "unknown" (None), as an
unreadable one is, and the caller's `why` gets one line saying so. Its entries name a file by the filesystem's
device and the inode: both are compared (`device_names`), never the inode alone.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

LOCK_LINES = 20_000  # of /proc/locks read at most; a busy host holds a few hundred
LOCK_SECONDS = 2.0  # spent reading it at most


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


def lock_table(why: list[str] | None = None) -> list[Lock] | None:
    """/proc/locks, parsed: the one reader of it (holders, write-lock holders, lock files' holders).
    None when it cannot be read, or holds a line of a shape this code does not know; when it was
    too long to read, `why` gets one line saying so (once: a line already there is not repeated)."""
    lines = []
    deadline = time.monotonic() + LOCK_SECONDS
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            for line in table:
                if len(lines) >= LOCK_LINES or time.monotonic() > deadline:
                    said = (f"/proc/locks holds more than {len(lines)} lines (read for at most {LOCK_LINES} "
                            f"lines and {LOCK_SECONDS:g} s): who holds which lock is unknown")
                    if why is not None and said not in why:
                        why.append(said)
                    return None
                lines.append(line)
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
    devices = device_names(st)
    pids: list[int] = []
    for lock in lock_table() or []:
        if (not lock.waiting and lock.kind in kinds and lock.device in devices and lock.inode == st.st_ino
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


def _name(device: int) -> str:
    """A device number as /proc/locks (and /proc/PID/mountinfo, in decimal) writes it: "fe:00"."""
    return f"{os.major(device):02x}:{os.minor(device):02x}"


def device_names(st: os.stat_result, mount_id: int | None = None, mountinfo: str = "/proc/self/mountinfo",
                 ) -> set[str]:
    """How /proc/locks may name the filesystem of the file `st` is of: its `st_dev`, and the
    device of the mount it is on (`mount_id`, from an fdinfo's `mnt_id`) where that differs (a btrfs
    subvolume's `st_dev` is not its filesystem's). Empty when `mount_id` is given and not found:
    the caller cannot tell which entries are this file's."""
    names = {_name(st.st_dev)}
    if mount_id is None:
        return names
    device = mount_device(mount_id, mountinfo)
    return names | {device} if device else set()


def mount_device(mount_id: int, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The device ("fe:00") of mount `mount_id` by a mountinfo table, or None."""
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as table:
            for n, line in enumerate(table):
                if n > 100_000:
                    return None
                fields = line.split(maxsplit=3)
                if len(fields) > 2 and fields[0] == str(mount_id):
                    major, minor = (int(x) for x in fields[2].split(":"))
                    return _name(os.makedev(major, minor))
    except (OSError, ValueError):
        return None
    return None


def mount_id(fdinfo: str) -> int | None:
    """The `mnt_id` an fdinfo file (/proc/PID/fdinfo/N) gives its descriptor, or None."""
    try:
        with open(fdinfo, encoding="ascii", errors="replace") as info:
            for n, line in enumerate(info):
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
                if n > 64:
                    break
    except (OSError, ValueError, IndexError):
        return None
    return None


def path_identity(path, follow: bool = True) -> tuple[os.stat_result, set[str]] | None:
    """A file's `stat` (through a link as SQLite opens it, unless not `follow`) and how /proc/locks
    names its filesystem, from an O_PATH descriptor: such a descriptor does no I/O and its close
    drops none of this process's POSIX locks (SQLite's), unlike a plain open and close. None when
    the file is not there; an empty set of names when its mount cannot be found."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    except FileNotFoundError:
        return None
    except OSError:
        try:
            return os.stat(path, follow_symlinks=follow), set()
        except OSError:
            return None
    try:
        st = os.fstat(fd)
        mount = mount_id(f"/proc/self/fdinfo/{fd}")
        return st, device_names(st, mount) if mount is not None else set()
    except OSError:
        return None
    finally:
        os.close(fd)


# -- the bounds of a scan of /proc ----------------------------------------------------------

SCAN_FDS = 100_000  # descriptors looked at in one scan of every process (a host has a few thousand)
SCAN_SECONDS = 3.0  # spent on one scan at most


class Budget:
    """What one scan of /proc may spend: any user can open 20 000 descriptors in each of 100
    processes. Once spent, `gave_up` says so in one line and the scan's answer is "unknown"."""

    def __init__(self, what: str):
        self.what, self.left, self.gave_up = what, SCAN_FDS, None
        self.deadline = time.monotonic() + SCAN_SECONDS

    def take(self, count: int = 1) -> bool:
        """Spend `count` descriptors; False (and `gave_up` set) once the work or the time is spent."""
        if self.gave_up is None:
            self.left -= count
            if self.left < 0 or time.monotonic() > self.deadline:
                self.gave_up = (f"{self.what} gave up (at most {SCAN_FDS} descriptors and {SCAN_SECONDS:g} s "
                                "for every process): what it did not look at is unknown")
        return self.gave_up is None


def process_uids(pid: int) -> tuple[int, ...] | None:
    """A process's real, effective, saved and file-system uids (/proc/PID/status), or None when it
    is gone or hidden."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Uid:"):
                    return tuple(int(x) for x in line.split()[1:5])
    except (OSError, ValueError):
        pass
    return None


def opened_for_writing(pid: int, fd: int) -> bool | None:
    """Was the descriptor opened for writing (O_WRONLY or O_RDWR in its /proc/PID/fdinfo `flags`)?
    None when that cannot be read (the process is gone, or hidden)."""
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags:"):
                    return int(line.split()[1], 8) & os.O_ACCMODE != os.O_RDONLY
    except (OSError, ValueError, IndexError):
        pass
    return None


def runs_for(uids: tuple[int, ...] | None, owner: int) -> bool:
    """Is a process with these uids the owner's, root's, or one the owner runs (a set-user-id
    program she started keeps her as its real uid)? Unknown uids count as yes: only a process
    proven to be another user's is let off."""
    return uids is None or owner in uids or 0 in uids


def mount_namespace(pid: int | str = "self") -> tuple[int, int] | None:
    """The identity of a process's mount namespace (of /proc/PID/ns/mnt), or None when hidden."""
    try:
        st = os.stat(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None
    return st.st_dev, st.st_ino

"""Which other processes hold a store or its sidecars open (Linux `/proc` scan).

Structural work (VACUUM, an index rebuild) runs only when nobody else holds
the files. Targets are matched by device and inode through `stat` of
`/proc/<pid>/fd/<n>` (never by the text of its link): nothing is opened. A
process in another mount namespace holding this very file is a holder; one
holding another file at the same path in its own namespace is not. A home's owner (how the root timer
works on a home) may not list the fds of other users' processes, root's
included, and `hidepid` may hide those processes altogether. For them,
`/proc/locks` answers, which anyone may read: every SQLite connection to a WAL
store holds a shared lock on its `-shm` file (and its database file) for as
long as it is open, whoever runs it.

So the answer is None ("unknown", which callers treat as "held": no VACUUM, no index rebuild):
- on a rollback-journal store, if any process could not be looked into (an
  idle connection there holds no lock);
- from inside a pid namespace of our own (a container): a Hermes outside it
  shows in neither table;
- if either table cannot be read, or the scan passed its bounds (lockrecord.Budget: any user can
  open 20 000 descriptors in each of 100 processes, or fill /proc/locks); it says so in one line.
Left unseen: another user's process holding the files open without a lock
(a copy being read, an `immutable=1` reader).

A holder is a process that could change the store. Where none of the store's files lets anyone
but its owner write (no group or other write bit), another user's process (none of its uids the
owner's or root's: lockrecord.runs_for) that holds them through descriptors opened read-only, or
with read locks only, cannot: it is no holder, so a world-readable store that anyone may open
never waits for its VACUUM on her say.

The engine also paces its transactions for a Hermes that may write at any
moment while one of the owner's processes holds the store (turns.py); that
scan skips the processes the owner cannot inspect. In a WAL store it also asks,
before each transaction, whether any other process holds a lock on the shared
memory (`WalPeers`): one system call, which sees every connection holding its
locks, in whatever pid namespace, whoever runs it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from hermes_admin import lockrecord


COMMAND_CHARS = 48  # of a process's command line, where it is named


def _identities(paths: list[Path]) -> tuple[dict[tuple[int, int], set[str]], bool]:
    """(device, inode) of each of `paths` that exists -> how /proc/locks names its filesystem
    (empty: not known, see lockrecord.path_identity); and whether only their owner may write them
    (no group or other write bit on any: then another user can only read them)."""
    found: dict[tuple[int, int], set[str]] = {}
    private = True
    for path in paths:
        got = lockrecord.path_identity(path)
        if got is not None:
            found[(got[0].st_dev, got[0].st_ino)] = got[1]
            private = private and not got[0].st_mode & 0o022
    return found, private


class _Readers:
    """Which processes are another user's, reading only (the module's doc): asked of each pid once."""

    def __init__(self, private: bool):
        self.private = private  # only the owner may write the store's files
        self.owner = os.geteuid()  # the home's owner: the worker runs as her, or the invoker on her own homes
        self.foreign: dict[int, bool] = {}

    def of_another_user(self, pid: int) -> bool:
        if pid not in self.foreign:
            self.foreign[pid] = self.private and pid > 0 and not lockrecord.runs_for(lockrecord.process_uids(pid),
                                                                                    self.owner)
        return self.foreign[pid]


@dataclass(frozen=True)
class Unseen:
    """A process the scan could not look into: its pid (None: `hidepid` hides every other user's
    process, pids unknown), why, and what it runs where /proc says."""

    pid: int | None
    why: str
    command: str | None = None

    def said(self) -> str:
        """`pid 1 (init): EACCES on /proc/1/fd/0`; its command read only now, when it is said (a
        home's owner meets every other user's process in each scan, and pacing scans often)."""
        if self.pid is None:
            return f"other users' processes ({self.why})"
        command = self.command or lockrecord.command_of(self.pid, COMMAND_CHARS)
        return f"pid {self.pid}" + (f" ({command})" if command else "") + f": {self.why}"


@dataclass
class Look:
    """One holder scan of a store's files, whole: `holders` is the answer structural work goes by
    (see `other_holders`; None: unknown), the rest is what it was made of, for saying why.
    `seen`: pids seen holding a descriptor of the files; `unseen`: the processes that could not
    be looked into; `locking`: pids holding a lock on the files by /proc/locks (None: not read);
    `why`: a bound passed or a table that could not be read, one line each."""

    holders: list[int] | None
    seen: list[int] = field(default_factory=list)
    unseen: list[Unseen] = field(default_factory=list)
    locking: set[int] | None = None
    own_namespace: bool = False  # in a pid namespace of our own: a Hermes outside it is seen by no scan
    why: list[str] = field(default_factory=list)

    def holding(self) -> list[int]:
        """The pids seen holding the store, by their descriptors or their locks."""
        return self.seen + sorted(p for p in (self.locking or ()) if p not in self.seen)


def other_holders(paths: list[Path], others_count: bool = True, wal: bool = False,
                  why: list[str] | None = None) -> list[int] | None:
    """The pids, other than ours, holding any of `paths` open (-1: a lock of no process, an open
    file description's); None when that cannot be known. `others_count=False` skips the processes
    this account may not inspect (another user's: as a home's owner, every process but its own);
    otherwise their locks on the files count (see above), and on a store not in WAL mode (`wal`)
    a process that could not be inspected makes the answer None. A descriptor is matched by the
    device and inode `stat` gives through it, a lock by its filesystem's device and the inode:
    a file of the same number elsewhere (her tmpfs) is never this one. The scan is bounded
    (lockrecord.Budget, LOCK_LINES); past a bound the answer is None, and `why` gets one line."""
    seen = look(paths, others_count, wal)
    if why is not None:
        why.extend(seen.why)
    return seen.holders


def look(paths: list[Path], others_count: bool = True, wal: bool = False) -> Look:
    """`other_holders`, with what its answer was made of (Look)."""
    targets, private = _identities(paths)
    if not targets:
        return Look([])
    me, why = os.getpid(), []
    readers = _Readers(private)
    scanned = _descriptor_holders(targets, me, readers, why)
    if scanned is None:
        return Look(None, why=why)
    holders, unseen = scanned
    if not others_count:
        return Look(holders, holders, unseen)
    if not in_the_host_pid_namespace():  # a Hermes outside this container would be seen by no scan here
        return Look(None, holders, unseen, own_namespace=True)
    if not all(targets.values()):
        return Look(None, holders, unseen, why=["which file system /proc/locks names for the store is not known"])
    locking = _lockers(targets, me, readers, why)
    found = Look(None, holders, unseen, locking, why=why)
    if locking is None or (unseen and not wal):
        return found
    found.holders = found.holding()
    return found


def _lockers(targets, me: int, readers: _Readers, why: list[str]) -> set[int] | None:
    """The pids, other than ours, holding a lock on one of `targets` by /proc/locks that could
    change the store (not another user's read locks only: _Readers); None if it cannot be read."""
    table = lockrecord.lock_table(why)
    if table is None:
        return None
    files = {(name, inode) for (_, inode), names in targets.items() for name in names}
    locks = [lock for lock in table if (lock.device, lock.inode) in files and lock.pid != me]
    writing = {lock.pid for lock in locks if lock.mode != "READ"}  # a write lock takes a descriptor opened to write
    return {lock.pid for lock in locks if lock.pid in writing or not readers.of_another_user(lock.pid)}


def _descriptor_holders(targets, me: int, readers: _Readers,
                        why: list[str]) -> tuple[list[int], list[Unseen]] | None:
    """The pids with a descriptor of one of `targets` ((device, inode)) that could change it (not
    another user's, read-only: _Readers), and the processes that could not be looked into; None
    when /proc cannot be listed or the scan passed its bounds."""
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    holders: list[int] = []
    unseen: list[Unseen] = []
    if 1 not in pids:  # `hidepid`: other users' processes are not even listed
        unseen.append(Unseen(None, "/proc lists no pid 1: mounted with hidepid"))
    budget = lockrecord.Budget("the scan of /proc for the processes holding a store")
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError as exc:
            unseen.append(Unseen(pid, f"{_errno(exc)} on /proc/{pid}/fd"))
            continue
        for fd in fds:
            if not budget.take():
                why.append(budget.gave_up)
                return None
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except PermissionError as exc:  # a process of ours with rights we lack: not looked into
                if not unseen or unseen[-1].pid != pid:
                    unseen.append(Unseen(pid, f"{_errno(exc)} on /proc/{pid}/fd/{fd}"))
                continue
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in targets:
                if readers.of_another_user(pid) and lockrecord.opened_for_writing(pid, int(fd)) is False:
                    continue  # she may read it, and cannot change it
                holders.append(pid)
                break
    return holders, unseen


def _errno(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "denied")


def in_the_host_pid_namespace() -> bool:
    """Our pid in each pid namespace we are in: one entry only in the host's own."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return len(line.split()) == 2
    except OSError:
        pass
    return False


def lock_holders(files: set[tuple[str, int]], why: list[str] | None = None) -> set[int] | None:
    """The pids holding a lock on any of `files` ((device as /proc/locks names it, inode)) by
    `/proc/locks`; None if it cannot be read (`why`: see lockrecord.lock_table)."""
    table = locks_by_file(files, why)
    return None if table is None else set().union(*table.values())


def locks_by_file(files: set[tuple[str, int]], why: list[str] | None = None) -> dict[tuple[str, int], set[int]] | None:
    """Each of `files` ((device, inode), lockrecord.device_names) -> the pids holding (or waiting
    for: they hold the file open) a lock on it, by `/proc/locks`; None if it cannot be read (or
    was too long to read, lockrecord.LOCK_LINES). Matched by device and inode: an inode number is
    unique on one filesystem only, and anyone may lock a file on her own tmpfs. `why` gets the line
    saying the table was too long to read, once."""
    table = lockrecord.lock_table(why)
    if table is None:
        return None
    pids: dict[tuple[str, int], set[int]] = {file: set() for file in files}
    for lock in table:
        if (lock.device, lock.inode) in pids:
            pids[(lock.device, lock.inode)].add(lock.pid)
    return pids


def store_files(store: Path) -> list[Path]:
    """A store, its WAL and its shared-memory file: what a holder holds."""
    return [store, Path(f"{store}-wal"), Path(f"{store}-shm")]


def store_holders(store: Path, others_count: bool = True, wal: bool = False,
                  why: list[str] | None = None) -> list[int] | None:
    """`other_holders` of a store, its WAL and its shared-memory file."""
    return other_holders(store_files(store), others_count, wal, why)


def held_by_its_owner(store: Path) -> bool:
    """For pacing: does one of the processes this account can see hold the store open (a Hermes of
    the home's owner)? Processes of other users are not looked into; a `/proc` that cannot be read
    says yes (and turns.py takes an error raised here as a yes too)."""
    return store_holders(store, others_count=False) != []


def held_by_nobody_else(store: Path, wal: bool) -> bool:
    """For pacing alone (turns.py): is the store known to be held open by no other process? By the
    rule structural work goes by (`look`): descriptors and the kernel's lock table, a process that
    cannot be looked into counting as a holder of a store not in WAL (where an idle connection holds
    no lock), and nobody known in a pid namespace of our own. `wal`: the store's journal is a WAL."""
    return look(store_files(store), wal=wal).holders == []


# struct flock on Linux: l_type, l_whence (shorts), l_start, l_len (off_t), l_pid, padding.
_FLOCK = "hhqqi4x"


class WalPeers:
    """Does any other process hold a lock on a WAL store's shared-memory file? Every SQLite
    connection to a WAL store holds one (a shared lock on a byte of it) from its first read to its
    close, whatever pid namespace or container it runs in, so this sees every other connection
    that could write, as one `fcntl(F_GETLK)`: cheap enough to ask before each transaction.

    Asked through the descriptor SQLite opened for the file in this process (found once in
    /proc/self/fd, checked by device and inode at every question): never a descriptor of our
    own, since closing one would drop every lock this process holds on the file, SQLite's
    included. Our own connections (this process's locks, whatever copy of SQLite took them) never
    count. Nor does a connection that holds no lock: one whose SQLite lost its locks (another
    descriptor of the file closed in its process), or one opened `nolock`, `immutable` or on a VFS
    without shared memory. Raises OSError when the descriptor is not found or no longer the file's:
    unknown (turns.py then paces as where nobody can be asked this way)."""

    def __init__(self, shm: Path):
        self.shm = shm
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None

    def taken(self) -> bool:
        fd = self._descriptor()
        asked = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)  # the whole file, any byte
        return struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, asked))[0] != fcntl.F_UNLCK

    def _descriptor(self) -> int:
        if self._fd is not None:
            st = os.fstat(self._fd)
            if (st.st_dev, st.st_ino) == self._identity:
                return self._fd
            raise OSError(errno.ESTALE, "the descriptor no longer names the shared-memory file", str(self.shm))
        st = os.lstat(self.shm)  # as SQLite opens it (O_NOFOLLOW): a link there is none of its files
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "the shared-memory file is not a regular file", str(self.shm))
        self._identity = (st.st_dev, st.st_ino)
        for name in os.listdir("/proc/self/fd"):
            try:
                here = os.stat(f"/proc/self/fd/{name}")
            except OSError:
                continue  # the listing's own descriptor, or one closed meanwhile
            if (here.st_dev, here.st_ino) == self._identity:
                self._fd = int(name)
                return self._fd
        raise OSError(errno.ENOENT, "no descriptor of ours names the shared-memory file", str(self.shm))


# Where SQLite takes a connection's write lock, by the unix VFS's layout: a WAL store's writer holds
# byte 120 of its -shm file (the first of the WAL's locks); a rollback-journal store's writer the
# RESERVED byte of the database file, one past its PENDING byte (1 GiB).
WAL_WRITE_LOCK = 120
RESERVED_BYTE = 0x40000001


def write_lock_holder(store: Path) -> int | None:
    """The pid holding the store's write lock by `/proc/locks`, or None (nobody, or unknown)."""
    wanted = {}
    for path, byte in ((Path(f"{store}-shm"), WAL_WRITE_LOCK), (store, RESERVED_BYTE)):
        got = lockrecord.path_identity(path)
        for name in (got[1] if got else ()):
            wanted[(name, got[0].st_ino)] = byte
    for lock in lockrecord.lock_table() or []:
        if (not lock.waiting and lock.mode == "WRITE" and wanted.get((lock.device, lock.inode)) == lock.start
                and lock.pid != os.getpid()):
            return lock.pid
    return None

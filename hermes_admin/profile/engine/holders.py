"""Which other processes hold a store or its sidecars open (Linux `/proc` scan).

Structural work (VACUUM, an index rebuild) runs only when nobody else holds
the files. Targets are matched by device and inode through `stat` of
`/proc/<pid>/fd/<n>`: nothing is opened. A home's owner (how the root timer
works on a home) may not list the fds of other users' processes, root's
included, and `hidepid` may hide those processes altogether. For them,
`/proc/locks` answers, which anyone may read: every SQLite connection to a WAL
store holds a shared lock on its `-shm` file (and its database file) for as
long as it is open, whoever runs it.

So the answer is None ("unknown", which callers treat as "held"):
- on a rollback-journal store, if any process could not be looked into (an
  idle connection there holds no lock);
- from inside a pid namespace of our own (a container): a Hermes outside it
  shows in neither table;
- if either table cannot be read.
Left unseen: another user's process holding the files open without a lock
(a copy being read, an `immutable=1` reader).

The engine also paces its transactions for a Hermes that may write at any
moment while one of the owner's processes holds the store (turns.py); that
scan skips the processes the owner cannot inspect.
"""

from __future__ import annotations

import os
from pathlib import Path

from hermes_admin import lockrecord


def _identities(paths: list[Path]) -> set[tuple[int, int]]:
    """(device, inode) of each of `paths` that exists."""
    found = set()
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def other_holders(paths: list[Path], others_count: bool = True, wal: bool = False) -> list[int] | None:
    """The pids, other than ours, holding any of `paths` open (-1: a lock of no process, an open
    file description's); None when that cannot be known. `others_count=False` skips the processes
    this account may not inspect (another user's: as a home's owner, every process but its own);
    otherwise their locks on the files count (see above), and on a store not in WAL mode (`wal`)
    a process that could not be inspected makes the answer None."""
    targets = _identities(paths)
    if not targets:
        return []
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    holders = []
    unseen = 1 not in pids  # `hidepid`: other users' processes are not even listed
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            unseen = True
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except PermissionError:  # a process of ours with rights we lack: not looked into
                unseen = True
                continue
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in targets:
                holders.append(pid)
                break
    if not others_count:
        return holders
    if not in_the_host_pid_namespace():
        return None  # a Hermes outside this container would be seen by no scan here
    locking = lock_holders({inode for _, inode in targets})
    if locking is None or (unseen and not wal):
        return None
    return holders + sorted(pid for pid in locking if pid != me and pid not in holders)


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


def lock_holders(inodes: set[int]) -> set[int] | None:
    """The pids holding a lock on any of `inodes` by `/proc/locks`; None if it cannot be read."""
    table = locks_by_inode(inodes)
    return None if table is None else set().union(*table.values())


def locks_by_inode(inodes: set[int]) -> dict[int, set[int]] | None:
    """Each of `inodes` -> the pids holding (or waiting for: they hold the file open) a lock on it, by
    `/proc/locks`; None if it cannot be read. Matched by inode alone: the device there is the
    filesystem's own, which `stat` may not show (btrfs subvolumes), and a match on another
    filesystem only makes the answer more careful."""
    table = lockrecord.lock_table()
    if table is None:
        return None
    pids: dict[int, set[int]] = {inode: set() for inode in inodes}
    for lock in table:
        if lock.inode in pids:
            pids[lock.inode].add(lock.pid)
    return pids


def store_holders(store: Path, others_count: bool = True, wal: bool = False) -> list[int] | None:
    """`other_holders` of a store, its WAL and its shared-memory file."""
    return other_holders([store, Path(f"{store}-wal"), Path(f"{store}-shm")], others_count, wal)


def held_by_its_owner(store: Path) -> bool:
    """For pacing: does one of the processes this account can see hold the store open (a Hermes of
    the home's owner)? Processes of other users are not looked into; a `/proc` that cannot be read
    says yes (and turns.py takes an error raised here as a yes too)."""
    return store_holders(store, others_count=False) != []


# Where SQLite takes a connection's write lock, by the unix VFS's layout: a WAL store's writer holds
# byte 120 of its -shm file (the first of the WAL's locks); a rollback-journal store's writer the
# RESERVED byte of the database file, one past its PENDING byte (1 GiB).
WAL_WRITE_LOCK = 120
RESERVED_BYTE = 0x40000001


def write_lock_holder(store: Path) -> int | None:
    """The pid holding the store's write lock by `/proc/locks`, or None (nobody, or unknown)."""
    wanted = {}
    for path, byte in ((Path(f"{store}-shm"), WAL_WRITE_LOCK), (store, RESERVED_BYTE)):
        try:
            wanted[os.stat(path).st_ino] = byte
        except OSError:
            continue
    for lock in lockrecord.lock_table() or []:
        if (not lock.waiting and lock.mode == "WRITE" and wanted.get(lock.inode) == lock.start
                and lock.pid != os.getpid()):
            return lock.pid
    return None

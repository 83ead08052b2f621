"""Which other processes hold a store or its sidecars open (Linux `/proc` scan).

Structural work (VACUUM, an index rebuild) runs only when nobody else holds
the files; that scan fails closed: if any process cannot be inspected, the
answer is None ("unknown"), which callers treat as "held". The engine also
paces its transactions for a Hermes that may write at any moment while one of
the owner's processes holds the store (turns.py); that scan skips the
processes of other users, which a home's owner cannot inspect. Targets are
matched by device and inode through `stat` of `/proc/<pid>/fd/<n>`: nothing is
opened.
"""

from __future__ import annotations

import os
from pathlib import Path


def other_holders(paths: list[Path], others_count: bool = True) -> list[int] | None:
    """The pids, other than ours, holding any of `paths` open; None when a process could not be
    inspected. `others_count=False` skips the processes this account may not inspect (another
    user's: as a home's owner, every process but its own) instead."""
    targets = set()
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        targets.add((st.st_dev, st.st_ino))
    if not targets:
        return []
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    holders = []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:
            continue  # exited meanwhile
        except PermissionError:
            if others_count:
                return None
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in targets:
                holders.append(pid)
                break
    return holders


def store_holders(store: Path, others_count: bool = True) -> list[int] | None:
    """`other_holders` of a store, its WAL and its shared-memory file."""
    return other_holders([store, Path(f"{store}-wal"), Path(f"{store}-shm")], others_count)


def held_by_its_owner(store: Path) -> bool:
    """For pacing: does one of the processes this account can see hold the store open (a Hermes of
    the home's owner)? Processes of other users are not looked into; a `/proc` that cannot be read
    says yes (and turns.py takes an error raised here as a yes too)."""
    return store_holders(store, others_count=False) != []

"""Which other processes hold a store or its sidecars open (Linux `/proc` scan).

Structural work (VACUUM) runs only when nobody else holds the files. The
scan fails closed: if any process cannot be inspected, the answer is None
("unknown"), which callers treat as "held". Targets are matched by device
and inode through `stat` of `/proc/<pid>/fd/<n>`: nothing is opened.
"""

from __future__ import annotations

import os
from pathlib import Path


def other_holders(paths: list[Path]) -> list[int] | None:
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
            return None
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in targets:
                holders.append(pid)
                break
    return holders

"""The small JSON record a lock's holder writes into its lock file: who holds it (pid), since when.

Ours (a profile's `.hermes-admin/lock`, a root's run lock) and Hermes' own maintenance lock files
carry one, so a run that finds a lock held can say by whom.
"""

from __future__ import annotations

import json
import os
import time


def write(fd: int, **extra) -> None:
    """Say on the lock file that this process holds it (no fsync: it only names the holder).

    Written over the last holder's record, then cut to length only if that one was longer: records
    are nearly always the same length, and a truncate costs more than the rest of taking a lock. A
    reader between the two sees no valid record, which `holder` already treats as "unknown"."""
    record = json.dumps({"pid": os.getpid(), "acquired_at": time.time(), **extra}).encode()
    os.pwrite(fd, record, 0)
    if os.fstat(fd).st_size > len(record):
        os.ftruncate(fd, len(record))


def holder(fd: int) -> int | None:
    """The pid the lock file's holder wrote, if it wrote a plausible one."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None
    pid = record.get("pid") if isinstance(record, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None

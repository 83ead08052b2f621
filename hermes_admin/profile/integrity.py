"""When `run` reads a whole store through `PRAGMA quick_check`.

quick_check reads every page: 10.5 s for a 957 MB store, once per profile and run,
and an open read transaction all that time (a WAL store cannot checkpoint past it).
So the timer's run checks a store when its last passing check is older than the
policy's `quick_check_hours` (24; 0: every run), or when the store file is not the
one that passed (another inode: replaced, restored from a backup; a copy made into
the inode the old file just freed, `rm` then `cp`, can look like the same file and
waits for its day); `repair` always checks. What passed is kept in `<home>/.hermes-admin/quick-check` as the owner's
file; it buys no durability, so it is written without fsync: lost or garbled, it
only means one check more.
"""

from __future__ import annotations

import os
from hermes_admin.model import Profile
from hermes_admin.profile.state_folder import read_record, write_record

RECORD = "quick-check"  # in <home>/.hermes-admin/
MAX_RECORD = 4096  # the record is a store's identity and a time; a larger one is not ours


def identity(profile: Profile) -> list[int] | None:
    """Which file the store is, taken before a check (a store replaced meanwhile is another file)."""
    try:
        st = os.stat(profile.store_path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino]


def due(profile: Profile, hours: float, now: float, store: list[int] | None) -> bool:
    """Whether the profile's store (`store`: its identity) is to be checked in this run."""
    if hours <= 0 or store is None:
        return True
    passed = _read(profile)
    if passed is None or passed.get("store") != store or "damaged" in passed:
        return True
    at = passed.get("at")
    return not isinstance(at, (int, float)) or not (now - hours * 3600 < at <= now)


def passed(profile: Profile, now: float, store: list[int] | None) -> None:
    """Record that the store `store` passed now (never raises: the worst is one check more next time)."""
    if store is not None:
        write_record(profile, RECORD, "the quick-check record", {"store": store, "at": now})


def damaged(profile: Profile, now: float, store: list[int] | None, line: str) -> None:
    """Record that the store `store` was found damaged (`line`: what is damaged): every view of
    the profile says it, until the store file is another one or a check passes."""
    if store is not None:
        write_record(profile, RECORD, "the quick-check record", {"store": store, "at": now, "damaged": line[:2000]})


def damage_known(profile: Profile) -> str | None:
    """What the last check found damaged in this very store file, if it found damage."""
    passed = _read(profile)
    if not passed or not isinstance(passed.get("damaged"), str) or passed.get("store") != identity(profile):
        return None
    return passed["damaged"]


def _read(profile: Profile) -> dict | None:
    return read_record(profile, RECORD, MAX_RECORD)[0]  # unreadable: one check more, said by none

"""Hand back to a home's owner what an older, root-run hermes-admin left there as root's.

Before privilege separation, a root run made `.hermes-admin/` (its lock and
outbox), Hermes' lock files and `state-snapshots/` as root inside users' homes,
where their owner could neither use nor remove them. This is the one thing the
host does inside a home, so it is done the way systemd-tmpfiles works on
untrusted trees: only names hermes-admin itself makes, reached through
descriptors opened with O_NOFOLLOW relative to the home's own descriptor; only
entries root owns, that are folders or plain files with a single link, checked
again on the opened descriptor; `fchown` on that descriptor, never a path.
Nothing is created, removed, chmodded or followed.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

from hermes_admin.protocol import Owner

# The names hermes-admin itself ever made at the top of a home (and their set-aside copies).
NAMES = (".hermes-admin", ".hermes-admin.set-aside-*", "state-snapshots", "state-snapshots.set-aside-*",
         "state.db.*.lock", "state.db.*.lock.set-aside-*")
_DEPTH = 3  # .hermes-admin/exports/<file> is as deep as we ever went
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def hand_back(home: Path, owner: Owner) -> list[str]:
    """Give `owner` what root owns among our names in `home`; returns one line per entry handed back."""
    if owner.uid == 0:
        return []
    try:
        home_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []  # the worker will say what is wrong with the home
    handed: list[str] = []
    try:
        if os.fstat(home_fd).st_uid != owner.uid:
            return []
        for name in os.listdir(home_fd):
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in NAMES):
                _entry(home_fd, name, home / name, owner, _DEPTH, handed)
    finally:
        os.close(home_fd)
    return handed


def _entry(dir_fd: int, name: str, path: Path, owner: Owner, depth: int, handed: list[str]) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    is_dir = stat.S_ISDIR(st.st_mode)
    if st.st_uid != 0 or not (is_dir or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
        return  # not root's, a link, a device, a fifo, or a file linked from elsewhere: left alone
    try:
        fd = os.open(name, _READ | (os.O_DIRECTORY if is_dir else 0), dir_fd=dir_fd)
    except OSError:
        return
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_uid != 0 or (
                not is_dir and now.st_nlink != 1):
            return  # swapped between the look and the open
        os.fchown(fd, owner.uid, owner.gid)
        handed.append(str(path))
        if is_dir and depth > 1:
            for child in os.listdir(fd):
                _entry(fd, child, path / child, owner, depth - 1, handed)
    finally:
        os.close(fd)

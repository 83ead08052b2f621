"""Hand back to a home's owner what an older, root-run hermes-admin left there as root's.

Before privilege separation, a root run made `.hermes-admin/` (its lock and
outbox), Hermes' lock files and `state-snapshots/` as root inside users' homes,
where their owner could neither use nor remove them. This is the one thing the
host does inside a home, so it is done the way systemd-tmpfiles works on
untrusted trees: only names hermes-admin itself makes, reached through
descriptors opened with O_NOFOLLOW (O_PATH: nothing is read) relative to the
home's own descriptor; only entries root owns, that are folders or plain files
with a single link (and plain files only where fs.protected_hardlinks is on),
checked again on the opened descriptor; chowned through that descriptor, never
a path.
Nothing is created, removed, chmodded or followed.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path

from hermes_admin.model import Owner

# The names hermes-admin itself ever made at the top of a home (and their set-aside copies).
NAMES = (".hermes-admin", ".hermes-admin.set-aside-*", "state-snapshots", "state-snapshots.set-aside-*",
         "state.db.*.lock", "state.db.*.lock.set-aside-*")
_DEPTH = 3  # .hermes-admin/exports/<file> is as deep as we ever went


def _hardlinks_protected() -> bool:
    """Without fs.protected_hardlinks a user can link root's files into her home, and one of them may
    later have a single link (its original name replaced): then no plain file is handed back."""
    try:
        with open("/proc/sys/fs/protected_hardlinks") as setting:
            return setting.read().strip() == "1"
    except OSError:
        return False


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
                _entry(home_fd, name, home / name, owner, _DEPTH, handed, _hardlinks_protected())
    finally:
        os.close(home_fd)
    return handed


def _entry(dir_fd: int, name: str, path: Path, owner: Owner, depth: int, handed: list[str], files: bool) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    is_dir = stat.S_ISDIR(st.st_mode)
    plain = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and files
    if st.st_uid != 0 or not (is_dir or plain):
        return  # not root's, a link, a device, a fifo, or a file linked from elsewhere: left alone
    # O_PATH: root never opens what it hands back (a swapped-in fifo or device does nothing)
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if is_dir else 0),
                     dir_fd=dir_fd)
    except OSError:
        return
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or now.st_uid != 0 or (
                not is_dir and now.st_nlink != 1):
            return  # swapped between the look and the open
        os.chown(f"/proc/self/fd/{fd}", owner.uid, owner.gid)  # the inode held, never a path in the home
        handed.append(str(path))
        if is_dir and depth > 1:
            listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            try:
                for child in os.listdir(listing):
                    _entry(listing, child, path / child, owner, depth - 1, handed, files)
            finally:
                os.close(listing)
    finally:
        os.close(fd)

"""One changing run per root at a time, decided before any work starts (host side).

A second `run` that finds a root busy exits 3 at once, naming the root and the
holder's pid, rather than doing the profiles the first one has not reached yet
(two half-runs). The locks are kernel `flock`s on files of the invoking account,
outside every home: `/run/hermes-admin/` for root (systemd's RuntimeDirectory),
else `$XDG_RUNTIME_DIR/hermes-admin/` or `/tmp/hermes-admin-<uid>/`. The folder
is checked by `lstat`: ours, not a link, not writable by others.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from pathlib import Path

from hermes_admin import lockrecord


class RootBusy(Exception):
    """Another changing hermes-admin run holds one of the roots."""


def lock_folder() -> Path:
    if os.geteuid() == 0:
        return Path("/run/hermes-admin")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "hermes-admin" if runtime else Path(f"/tmp/hermes-admin-{os.geteuid()}")


def _folder() -> Path:
    folder = lock_folder()
    try:
        os.mkdir(folder, 0o755 if os.geteuid() == 0 else 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise OSError(f"{folder}: not a folder of this account only, or writable by others")
    return folder


class RunLocks:
    """The run locks of a set of roots, all or none."""

    def __init__(self):
        self.held: dict[Path, int] = {}

    def take(self, roots: list[Path]) -> None:
        wanted = [r for r in dict.fromkeys(roots) if r not in self.held]
        if not wanted:
            return
        folder = _folder()
        taken: dict[Path, int] = {}
        try:
            for root in wanted:
                name = hashlib.sha256(os.fsencode(root)).hexdigest()[:24] + ".lock"
                fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = lockrecord.describe(fd, lockrecord.holder(fd))
                    os.close(fd)
                    raise RootBusy(f"root {root}: another hermes-admin run{holder} is working on it; "
                                   "nothing was done here") from None
                lockrecord.write(fd, root=str(root))
                taken[root] = fd
        except BaseException:
            for fd in taken.values():
                os.close(fd)
            raise
        self.held.update(taken)

    def release(self) -> None:
        for fd in self.held.values():
            os.close(fd)  # closing the descriptor drops the flock
        self.held.clear()

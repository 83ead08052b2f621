"""Per-profile locks: ours against a second hermes-admin, and Hermes' own maintenance lock.

Both are kernel `flock`s, released by the kernel when the process dies, so a
crash never leaves a stale lock behind. Lock files are separate files: the
store and its sidecars are never opened outside SQLite.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hermes_admin.protocol import Profile

STATE_DIR = ".hermes-admin"  # hermes-admin's own files inside a profile home


class LockHeld(Exception):
    pass


def state_dir(profile: Profile) -> Path:
    path = profile.home / STATE_DIR
    path.mkdir(mode=0o700, exist_ok=True)
    return path


class Flock:
    """A non-blocking exclusive flock on a lock file (created if missing)."""

    def __init__(self, path: Path, what: str):
        self.path = path
        self.what = what
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(f"{self.path}: {self.what}") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


class ProfileLocks:
    """Held while maintaining one profile: ours first, then Hermes' maintenance lock."""

    def __init__(self, profile: Profile):
        self.ours = Flock(state_dir(profile) / "lock", "another hermes-admin run holds this profile")
        self.hermes = Flock(
            Path(f"{profile.store_path}.auto-maintenance.lock"), "Hermes is running its own maintenance"
        )

    def __enter__(self) -> "ProfileLocks":
        self.ours.acquire()
        try:
            self.hermes.acquire()
        except BaseException:
            self.ours.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.hermes.release()
        self.ours.release()

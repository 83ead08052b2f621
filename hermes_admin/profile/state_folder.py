"""hermes-admin's state folder in a profile (`.hermes-admin/`): its files, records and locks.

The files there are regular files made without following links (regular_file, set_aside,
read_record, write_record), and the per-profile locks: ours against a second hermes-admin, and
Hermes' own maintenance lock (`state.db.auto-maintenance.lock`, taken without waiting, as Hermes
0.22.2 takes it: while either holds it, the other leaves the store's maintenance alone). Beside
them, RecordedFlock takes Hermes' index-rebuild lock the way Hermes does.

Both are kernel `flock`s, released by the kernel when the process dies, so a
crash never leaves a stale lock behind. Lock files are separate files: the
store and its sidecars are never opened outside SQLite.

Files made here never follow a symlink in their last component (O_NOFOLLOW):
a lock path that is a link is refused. What an older, root-run hermes-admin left
behind (a root-owned `.hermes-admin/` or lock file, which this owner can neither
open nor remove) is moved aside under a name that says so, and reported: it never
stops the owner's own runs.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import Callable

from hermes_admin import lockrecord
from hermes_admin.model import Profile
from hermes_admin.plain_files import UnsafePath, read_plain
from hermes_admin.profile.store import guards

STATE_DIR = ".hermes-admin"  # hermes-admin's own files inside a profile home


class LockHeld(Exception):
    pass


def set_aside(path: Path, why: str) -> str:
    """Move a leftover out of the way (in the same folder), returning the line that reports it."""
    target = path.with_name(f"{path.name}.set-aside-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    os.rename(path, target)
    return f"{path}: {why}; moved aside to {target.name} (remove it as its owner)"


def state_dir(profile: Profile) -> tuple[Path, list[str]]:
    """`<home>/.hermes-admin/`, made if missing: a real folder of this process's user, or refused;
    with what was moved aside to make it (state_folder)."""
    return state_folder(profile.home / STATE_DIR)


def state_folder(path: Path) -> tuple[Path, list[str]]:
    """A folder of ours in a home (`.hermes-admin/`, `state-snapshots/`): made 0700 if missing; a link
    or a file there is refused; one another user left behind is moved aside and a new one made.
    Returns the folder and the lines that report what was moved aside (none, mostly)."""
    notes: list[str] = []
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(errno.ELOOP, "is a symlink: hermes-admin keeps its files only in a real folder", str(path))
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(errno.ENOTDIR, "is not a folder (hermes-admin keeps its lock and outbox there)", str(path))
    if st.st_uid != os.geteuid():
        notes.append(set_aside(path, f"owned by uid {st.st_uid} (left by an older root-run hermes-admin)"))
        os.mkdir(path, 0o700)
    return path, notes


def regular_file(path: Path, what: str, damage_set_aside: bool = False) -> list[str]:
    """Refuse a path of ours that exists as anything but a plain file. With `damage_set_aside` (a file
    only we make, in our own folder), a folder or other odd thing there is damage, not an attack: it
    is moved aside, and the line that says so returned; the name is free again. A link is refused
    either way."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(errno.ELOOP, f"is a symlink; refusing to use it as {what}", str(path))
    if not stat.S_ISREG(st.st_mode):
        if not damage_set_aside:
            raise UnsafePath(errno.EISDIR, f"is not a plain file; cannot use it as {what}", str(path))
        return [set_aside(path, f"damaged (not a plain file, where {what} goes); kept for inspection")]
    return []


def write_record(profile: Profile, name: str, what: str, record: dict) -> None:
    """A small JSON record of ours in `.hermes-admin/` (the quick-check record, the last run's),
    replaced whole through a temporary file, never through a link. It buys no durability (no fsync),
    and never raises: lost or garbled, a record only means a little more work or a less informed
    `status`."""
    try:
        folder, _ = state_dir(profile)  # best effort: what making the folder moved aside goes unsaid here
        path = folder / name
        regular_file(path, what)
        temp = path.with_name(f".{name}.{os.getpid()}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
        os.replace(temp, path)
    except OSError:
        pass


def read_record(profile: Profile, name: str, limit: int) -> tuple[dict | None, str | None]:
    """Such a record, read where it is (never made here, never through a link, never waited on), or
    None; and why it could not be used, naming the file (None too when it is missing: no problem)."""
    path = profile.home / STATE_DIR / name
    try:
        data = read_plain(path, limit)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{exc.filename or path}: {exc.strerror or exc}"
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        return None, f"{path}: not a JSON object; ignored"
    return record, None


class Flock:
    """A non-blocking exclusive flock on a lock file (created if missing, never through a link).
    `notes`: what taking it moved aside (a leftover no one could lock), its own to report."""

    def __init__(self, path: Path, what: str, record: bool = False):
        self.path = path
        self.what = what
        self.notes: list[str] = []
        self.record = record  # ours: we write our pid into it (Hermes' lock records are Hermes')
        self.fd: int | None = None

    def acquire(self) -> None:
        self.notes += regular_file(self.path, "a lock file", damage_set_aside=self.record)  # ours may be set aside
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.path, flags, 0o600)
        except PermissionError:
            st = os.lstat(self.path)
            if st.st_uid == os.geteuid() or os.geteuid() == 0:
                raise
            # Nobody but its owner (root, for an older hermes-admin's leftover) could ever hold it.
            self.notes.append(set_aside(self.path, f"owned by uid {st.st_uid}, unusable as a lock"))
            fd = os.open(self.path, flags | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lockrecord.describe(fd, lockrecord.holder(fd))
            os.close(fd)
            raise LockHeld(f"{self.path}: {self.what}{holder}") from None
        self.fd = fd
        if self.record:
            lockrecord.write(fd)  # who holds it, for the next run that finds it held

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None


def start_ticks(pid: int) -> int | None:
    """When the kernel started `pid` (field 22 of /proc/<pid>/stat): with the pid, one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return int(stat_file.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class RecordedFlock:
    """A lock file of Hermes' whose holder says who it is in it: `state.db.fts_rebuild.lock`,
    taken as Hermes 0.22.2 takes it (docs/design.md §8).

    An exclusive flock, waited for up to `wait_s` (polling), then refused (LockHeld): nothing is
    done without it. A lock taken on a file that is no longer the one at the path (a Hermes
    process broke a dead holder's lock and made a new file meanwhile) excludes nobody, so it is
    dropped and taken again on the new file. Held, the file carries Hermes' holder record
    (`{"acquired_at", "pid", "pidns", "start_ticks"}`), by which Hermes tells a live holder from
    a dead one; it is emptied before the lock is let go (a record left behind means the holder
    died). Hermes' own error numbers for a lock held (EAGAIN, EACCES, EDEADLK) are waited on;
    any other failure is raised at once. `clock` and `sleep` measure and spend the wait (a test's own
    make it the same on any machine)."""

    CONTENTION = {errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK}

    def __init__(self, path: Path, what: str, wait_s: float, poll_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self.path, self.what, self.wait_s, self.poll_s = path, what, wait_s, poll_s
        self.clock, self.sleep = clock, sleep
        self.fd: int | None = None

    def acquire(self) -> None:
        deadline = self.clock() + self.wait_s
        while True:
            regular_file(self.path, "a lock file")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in self.CONTENTION:
                    os.close(fd)
                    raise
                if self.clock() >= deadline:
                    holder = lockrecord.describe(fd, lockrecord.holder(fd))
                    os.close(fd)
                    raise LockHeld(f"{self.path}: {self.what}{holder}; waited {self.wait_s:g} s") from None
                os.close(fd)
                self.sleep(self.poll_s)
                continue
            if self._still_named(fd):
                self.fd = fd
                self._write(json.dumps({"pid": os.getpid(), "pidns": guards.own_pid_namespace(),
                                        "start_ticks": start_ticks(os.getpid()), "acquired_at": time.time()},
                                       sort_keys=True).encode())
                return
            os.close(fd)  # a file nobody else will ever lock: take the one at the path

    def _still_named(self, fd: int) -> bool:
        try:
            held, named = os.fstat(fd), os.lstat(self.path)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)

    def _write(self, record: bytes) -> None:
        try:  # best effort, as Hermes writes it: a record that cannot be written leaves the holder unknown
            os.ftruncate(self.fd, 0)
            if record:
                os.pwrite(self.fd, record, 0)
        except OSError:
            pass

    def release(self) -> None:
        if self.fd is not None:
            self._write(b"")  # a normal release leaves no record
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RecordedFlock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class ProfileLocks:
    """Held while maintaining one profile: ours first, then Hermes' maintenance lock."""

    def __init__(self, profile: Profile):
        folder, self._folder_notes = state_dir(profile)
        self.ours = Flock(folder / "lock", "another hermes-admin run holds this profile", record=True)
        self.hermes = Flock(Path(f"{profile.store_path}.auto-maintenance.lock"),
                            "Hermes is running its own maintenance")

    @property
    def notes(self) -> list[str]:
        """What making our folder and taking the locks moved aside, in that order (held or not)."""
        return self._folder_notes + self.ours.notes + self.hermes.notes

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

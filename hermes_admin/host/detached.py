"""Processes whose hold on a store is broken: files no longer at their path, or locks gone.

A Hermes process holds `state.db`, `-wal` and `-shm` open all day. When another program deletes
the WAL under it (SQLite's close of what it took for the last connection, upstream #109966) or
replaces the store, the process goes on writing into files nobody will ever read: every write
"succeeds", none survives it, and its own status stays healthy. Found from
`/proc/<pid>/fd` (each link's target, and `stat` through it: nothing is opened) and
`/proc/locks`, in one pass for all the stores of a run. The process is only named, never touched:
the fix is to restart it, after copying the deleted file out of `/proc/PID/fd/N` if its writes
matter.

Two kinds:
- `deleted` / `replaced`: the process writes into files that are no longer the store. Its next
  checkpoint copies pages into the database file ours would share: no write of ours goes there
  until it is restarted (an error).
- `unlocked`: a read-write WAL connection without its lock on `state.db` or `-shm`, the state of
  upstream #109786. Our connections never checkpoint-and-delete on close (keep_wal.py), so we go
  on; the warning says that the next careless tool (the `sqlite3` shell) will kill its
  persistence. Seen from outside, a process that opens and closes connections fast can look the
  same between two of them, so this never refuses anything.

A store's holders are the processes that could change it. Another user's process (none of its
uids the owner's or root's) that holds a deleted or replaced file of the store through a descriptor
opened read-only cannot write a page anywhere: its hold is a warning that names it, never a reason
to leave the store alone (anyone may open a world-readable WAL and keep it past its deletion). One
of hers opened for writing, and any of the owner's or root's, keeps its full meaning.

Root sees every process; a user sees her own (the kernel hides the fds of others).
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from hermes_admin import lockrecord
from hermes_admin.lockrecord import command_of
from hermes_admin.holders import locks_by_file
from hermes_admin.model import Profile
from hermes_admin.problems import ERROR, WARNING, Problem, about

SUFFIXES = ("", "-wal", "-shm")  # the store and its sidecars: the files a process may hold broken
COMMAND_CHARS = 160  # of a process's command line, in a report line
LOOKS, LOOKS_S = 3, 0.15  # a connection being opened takes its locks within microseconds
DELETED = " (deleted)"  # what the kernel appends to an fd's link when its file is gone


@dataclass(frozen=True)
class Broken:
    file: str  # which of the store's files: state.db, state.db-wal, state.db-shm
    how: str  # "deleted", "replaced" or "unlocked"
    fd: int
    reads_only: bool = False  # another user's descriptor, opened read-only: it cannot change the store

    @property
    def blocks_writes(self) -> bool:
        return self.how != "unlocked" and not self.reads_only

    def __str__(self) -> str:
        return f"{self.file} without its locks" if self.how == "unlocked" else f"a {self.how} {self.file}"


@dataclass(frozen=True)
class BrokenHold:
    """One process's broken hold on one store: every file of the store it holds wrongly."""

    pid: int
    command: str
    broken: tuple[Broken, ...]
    user: str | None = None  # the account of a process that is neither the owner's nor root's

    @property
    def blocks_writes(self) -> bool:
        return any(b.blocks_writes for b in self.broken)

    @property
    def unlocked(self) -> bool:
        """A WAL connection without its locks, and nothing worse (the metrics' unlocked holders)."""
        return not self.blocks_writes and any(b.how == "unlocked" for b in self.broken)

    def problem(self, profile: Profile) -> Problem:
        """The report's problem: who, what, and what fixes it; an error where it keeps us from
        writing, a warning where it does not."""
        who = f"pid {self.pid} ({self.command})"
        if not self.blocks_writes and not self.unlocked:
            held = ", ".join(map(str, self.broken))
            return about(profile, WARNING, "foreign_reader", f"{who}, a process of {self.user or 'another user'}, "
                         f"holds {held} read-only: it cannot write into the store, which is maintained all the "
                         "same", path=profile.store_path)
        if not self.blocks_writes:
            files = " and ".join(b.file for b in self.broken if b.how == "unlocked")
            return about(profile, WARNING, "unlocked_hold", f"{who} holds {files} without its SQLite locks (something "
                         "in that process closed the file); another tool's close can delete its WAL under it: "
                         "restart it", path=profile.store_path)
        gone = [b for b in self.broken if b.blocks_writes]
        line = (f"{who} writes into {', '.join(map(str, gone))}: its writes are lost, and the store is not "
                "maintained until that process is restarted")
        wal = [b for b in gone if b.file.endswith("-wal")]
        if wal:
            line += f" (copy /proc/{self.pid}/fd/{wal[0].fd} first to keep what it wrote)"
        return about(profile, ERROR, "detached_writer", line, path=profile.store_path)

    def as_dict(self) -> dict:
        return {"pid": self.pid, "command": self.command, "blocks_writes": self.blocks_writes, "user": self.user,
                "files": [{"file": b.file, "problem": b.how, "reads_only": b.reads_only} for b in self.broken]}


def scan(stores: list[Path], notes: list[str] | None = None,
         owners: dict[Path, int] | None = None) -> dict[Path, list[BrokenHold]]:
    """For each store, the processes (not ours) whose hold on it is broken. One pass over /proc;
    an unreadable /proc gives no findings (this is a report, not a gate), and so does one past its
    bounds (lockrecord.Budget), said in one line in `notes`.

    `owners` gives each store's owner (uid; ours where it says nothing): a deleted or replaced file
    held through a descriptor opened read-only by a process that is neither the owner's nor root's
    nor one she runs (lockrecord.runs_for) cannot change the store, and is found `reads_only`.

    Every finding is proven to be that store's: a descriptor's link text only says where to look.
    Its file must be on the mount the store's folder is on as we see it (the mount's device, read
    from the process's mountinfo: nothing of a mount of hers is ever touched, so a FUSE file of
    hers cannot hang us), and the process must see that folder as we do: the same mount namespace,
    or one whose mount of that filesystem puts the same folder of it at that path. A tmpfs over the
    path, or a folder of hers bound there, in a namespace of her own (`unshare -rm`) is not the
    store, whatever the process calls itself. The store's folder is resolved (discovery vetted it),
    the file never: her `state.db` linking to another's store is not that store."""
    wanted: dict[str, list[tuple[Path, str]]] = {}
    folders: dict[str, _Folder] = {}
    for store in stores:
        folder = _folder(store.parent)
        if folder is None:
            continue
        folders[folder.path] = folder
        for suffix in SUFFIXES:
            wanted.setdefault(os.path.join(folder.path, store.name + suffix), []).append((store, store.name + suffix))
    if not wanted:
        return {}
    broken: dict[tuple[Path, int], list[Broken]] = {}
    holding: list[tuple[int, int, str, Path, os.stat_result, tuple[str, int]]] = []  # held at their paths
    me = os.getpid()
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    ours = lockrecord.mount_namespace()
    budget = lockrecord.Budget("the scan of /proc for broken holds on stores")
    writers: set[tuple[Path, int]] = set()  # holding -shm read-write: a WAL connection that can write
    users: dict[int, tuple[int, ...] | None] = {}  # pid -> its uids, read once a descriptor of a store is found
    for pid in pids:
        if pid == me:
            continue
        mounts: dict[int, tuple[str, str, str]] | None = None
        for fd, target in _links(pid, budget):
            deleted = target.endswith(DELETED)
            name = target[: -len(DELETED)] if deleted else target
            places = wanted.get(name)
            if not places:
                continue
            folder = folders[os.path.dirname(name)]
            if mounts is None:
                mounts = _mounts(pid)
            if not _sees(pid, fd, folder, ours, mounts):
                continue
            try:
                held = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if held.st_dev != folder.dev:
                continue
            can_write = lockrecord.opened_for_writing(pid, fd)
            writer = name.endswith("-shm") and can_write is True
            how = "deleted" if deleted else _compare(held, name)
            if pid not in users:
                users[pid] = lockrecord.process_uids(pid)
            for store, file in places:
                if writer:
                    writers.add((store, pid))
                if how:
                    theirs = lockrecord.runs_for(users[pid], (owners or {}).get(store, os.geteuid()))
                    reads_only = not theirs and can_write is False  # another user's, and it cannot write
                    broken.setdefault((store, pid), []).append(Broken(file, how, fd, reads_only))
                else:
                    holding.append((pid, fd, file, store, held, (folder.device, held.st_ino)))
    if budget.gave_up and notes is not None:
        notes.append(budget.gave_up)
    # In WAL mode a connection that may write keeps a lock on state.db and on -shm for as long as it
    # is open (none on -wal: its locks live in -shm). A read-only one may hold -shm without a lock (no
    # other connection was there to share the index with: SQLite reads it as a copy, by design), and
    # one to a rollback-journal store holds none between transactions: neither is looked at. A
    # connection being opened or closed right now holds its files a moment without its locks: only
    # what is unlocked at every look, over LOOKS_S, counts. A warning, never a refusal: a process that
    # opens and closes connections fast can still be caught between two of them. Locks are matched
    # by the filesystem's device and the inode, never the inode alone.
    candidates = [h for h in holding if (h[3], h[0]) in writers and h[2] in (h[3].name, h[3].name + "-shm")]
    for look in range(LOOKS):
        if not candidates:
            break
        if look:
            time.sleep(LOOKS_S / (LOOKS - 1))
        locks = locks_by_file({h[5] for h in candidates}, notes)
        if locks is None:
            candidates = []
            break
        candidates = [h for h in candidates if h[0] not in locks[h[5]]]
    for pid, fd, file, store, *_ in candidates:
        broken.setdefault((store, pid), []).append(Broken(file, "unlocked", fd))
    found: dict[Path, list[BrokenHold]] = {}
    for (store, pid), files in sorted(broken.items(), key=lambda item: item[0][1]):
        user = _user(users.get(pid)) if any(b.reads_only for b in files) else None
        found.setdefault(store, []).append(BrokenHold(pid, command_of(pid, COMMAND_CHARS) or "?", tuple(files), user))
    return found


def _user(uids: tuple[int, ...] | None) -> str | None:
    """The account a process runs as (its real uid), by name where the password database has it."""
    if not uids:
        return None
    try:
        return pwd.getpwuid(uids[0]).pw_name
    except KeyError:
        return f"uid {uids[0]}"


@dataclass(frozen=True)
class _Folder:
    """A store's folder as we see it: its path with every link resolved, its identity, and its
    place in its filesystem (the mount's device as /proc/locks names it, the path within it)."""

    path: str
    dev: int
    device: str
    inside: str  # the folder's path from its filesystem's root (mountinfo's root + the rest)


def _folder(spelled: Path) -> _Folder | None:
    """The folder of a store, only if it is a real folder (not a link, now) and its mount is known."""
    try:
        here = os.lstat(spelled)
        path = os.path.realpath(spelled)
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        mount = lockrecord.mount_id(f"/proc/self/fdinfo/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)
    if not stat.S_ISDIR(here.st_mode) or (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino) or mount is None:
        return None
    place = _mounts("self").get(mount)
    inside = _inside(place, path) if place else None
    if inside is None:
        return None
    return _Folder(path, st.st_dev, place[0], inside)


def _mounts(pid: int | str) -> dict[int, tuple[str, str, str]]:
    """A process's mounts (/proc/PID/mountinfo): id -> (device as /proc/locks names it, the root of
    the mount within its filesystem, where it is mounted), read as text: no mount is touched."""
    found: dict[int, tuple[str, str, str]] = {}
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            for n, line in enumerate(table):
                if n >= MOUNTS:
                    break
                fields = line.split()
                try:
                    major, minor = (int(x) for x in fields[2].split(":"))
                    found[int(fields[0])] = (f"{major:02x}:{minor:02x}", _unescape(fields[3]), _unescape(fields[4]))
                except (IndexError, ValueError):
                    continue
    except OSError:
        pass
    return found


MOUNTS = 20_000  # lines of a mountinfo read at most


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _inside(place: tuple[str, str, str], path: str) -> str | None:
    """Where `path`, on that mount, is within the mount's filesystem; None if not below it."""
    _, root, point = place
    if path != point and not path.startswith(point.rstrip("/") + "/"):
        return None
    rest = path[len(point.rstrip("/")):].lstrip("/")
    return os.path.normpath(os.path.join(root, rest)) if rest else os.path.normpath(root)


def _sees(pid: int, fd: int, folder: _Folder, ours, mounts: dict[int, tuple[str, str, str]]) -> bool:
    """Does the process hold, at that descriptor, a file of this very folder (as its link says)?
    Its file's mount must be of the folder's filesystem; and in a mount namespace other than ours,
    that mount must put the same folder of the filesystem at the path (a private namespace of a
    service, yes; a folder of hers bound over another user's path, no)."""
    mount = lockrecord.mount_id(f"/proc/{pid}/fdinfo/{fd}")
    place = mounts.get(mount) if mount is not None else None
    if place is None or place[0] != folder.device:
        return False  # another filesystem (her tmpfs, her FUSE): never looked into
    if ours is not None and lockrecord.mount_namespace(pid) == ours:
        return True
    return _inside(place, folder.path) == folder.inside


def _links(pid: int, budget: lockrecord.Budget):
    """(fd, target) of each descriptor of `pid` we may look at; none for a process we may not, and
    none once the scan's budget is spent."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return
    for fd in fds:
        if not budget.take():
            return
        try:
            yield int(fd), os.readlink(f"/proc/{pid}/fd/{fd}")
        except (OSError, ValueError):
            continue


def _compare(held: os.stat_result, path: str) -> str | None:
    """"replaced" when the file at `path` is no longer the one held, else None."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return "deleted"
    except OSError:
        return None
    return None if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) else "replaced"

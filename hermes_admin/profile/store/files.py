"""The per-session files in a profile's `sessions/` folder.

Never a glob per session: one scan of the folder per run finds the names a
session id does not predict, and the ghost sweep scans once more for files
whose session is gone. Entries are read with lstat: a symlink is listed as a
link and never followed. `sessions.json` (the gateway's index) is never a
session file.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

GATEWAY_INDEX = "sessions.json"  # the gateway's index of sessions: never a session's own file

# Hermes names request dumps `request_dump_<id>_<YYYYmmdd_HHMMSS_ffffff>.json`;
# ids themselves contain underscores, so the timestamp is matched from the end.
_REQUEST_DUMP = re.compile(r"^request_dump_(?P<id>.+?)_(?P<ts>\d{8}_\d{6}(?:_\d+)?|\d+)\.json$")
_SNAPSHOT = re.compile(r"^session_(?P<id>.+)\.json$")
_TRANSCRIPT = re.compile(r"^(?P<id>.+)\.(?:json|jsonl)$")


def session_id_of(name: str) -> str | None:
    """The session id a file name belongs to, or None if it is not a per-session file."""
    if name == GATEWAY_INDEX:
        return None
    for pattern in (_REQUEST_DUMP, _SNAPSHOT, _TRANSCRIPT):
        match = pattern.match(name)
        if match:
            return match.group("id")
    return None


def _file_stat(path: str) -> os.stat_result | None:
    """lstat of a regular file or a symlink (itself: never followed); None for a folder or a gone file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) else None


def removable(path: str) -> bool:
    return _file_stat(path) is not None


def unsafe_id(session_id: str) -> bool:
    """An id that cannot name a file inside `sessions/` (path separators, `..`, NUL)."""
    return any(bad in session_id for bad in ("/", "\\", "..", "\0")) or session_id in ("", ".")


@dataclass(frozen=True, slots=True)
class SessionFile:
    folder: str
    name: str
    size: int
    mtime: float
    is_symlink: bool

    @property
    def path(self) -> Path:
        return Path(self.folder, self.name)


# The names nearly every session's files have: never indexed, tried by name (an absent one costs
# one failed lstat). Only the others (request dumps) are kept from the scan.
_COMMON = ("{}.jsonl", "{}.json", "session_{}.json")


def _session_files(folder: str) -> Iterator[tuple[str, str]]:
    """(session id, file name) of each per-session file in the folder, one entry at a time."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                sid = session_id_of(entry.name)
                if sid is not None:
                    yield sid, entry.name
    except (FileNotFoundError, NotADirectoryError):
        return


class FileIndex:
    """Per-session files of one `sessions/` folder, by session id.

    One scan keeps only the names a session id does not predict (request dumps,
    ~12 % of sessions); the common names are tried as they are. A big folder holds
    hundreds of thousands of files, and their names alone would take tens of MB.
    A file is `lstat`ed when it is looked at, never followed.
    """

    def __init__(self, sessions_dir: Path, other: dict[str, list[str]]):
        self.folder = str(sessions_dir)
        self._other = other

    @classmethod
    def scan(cls, sessions_dir: Path) -> "FileIndex":
        other: dict[str, list[str]] = defaultdict(list)
        for sid, name in _session_files(str(sessions_dir)):
            if not any(name == form.format(sid) for form in _COMMON):
                other[sid].append(name)
        return cls(sessions_dir, dict(other))

    def names_of(self, session_id: str) -> list[str]:
        """Names this session's files may have (the common ones may not exist)."""
        return sorted([form.format(session_id) for form in _COMMON] + self._other.get(session_id, []))

    def files_of(self, session_id: str) -> list[SessionFile]:
        if unsafe_id(session_id):
            return []  # such an id never names a file inside sessions/
        found = (self.entry(name) for name in self.names_of(session_id))
        return [entry for entry in found if entry is not None]

    def paths_of(self, session_id: str) -> list[str]:
        """Paths this session's files may have, not looked at (see `removable`)."""
        if unsafe_id(session_id):
            return []
        return [os.path.join(self.folder, name) for name in self.names_of(session_id)]

    def is_session_file(self, name: str) -> bool:
        """A name one of this folder's sessions' files has (or may have): never a path elsewhere."""
        sid = session_id_of(name)
        return sid is not None and not unsafe_id(sid) and name in self.names_of(sid)

    def path_of(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def entry(self, name: str) -> SessionFile | None:
        """The file of that name, lstat'ed now; None if it is gone or not a file."""
        st = _file_stat(os.path.join(self.folder, name))
        if st is None:
            return None
        return SessionFile(self.folder, name, st.st_size, st.st_mtime, stat.S_ISLNK(st.st_mode))

    def names(self, size: int) -> Iterator[list[tuple[str, str]]]:
        """(session id, name) of every per-session file, `size` at a time: a scan of its own, for
        the ghost sweep, which asks the store about one part at a time. Unsafe ids name no file."""
        part: list[tuple[str, str]] = []
        for sid, name in _session_files(self.folder):
            if not unsafe_id(sid):
                part.append((sid, name))
            if len(part) >= size:
                yield part
                part = []
        if part:
            yield part

"""The per-session files in a profile's `sessions/` folder.

One scan of the folder per run, indexed by session id, instead of a glob per
session. Entries are read with lstat: a symlink is listed as a link and never
followed. `sessions.json` (the gateway's index) is never a session file.
"""

from __future__ import annotations

import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

GATEWAY_INDEX = "sessions.json"

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


def removable(path: str) -> bool:
    """A regular file or a symlink (itself: never followed); not a folder, not gone."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISLNK(mode)


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


class FileIndex:
    """Per-session files of one `sessions/` folder, by session id.

    The scan keeps names only (a big folder holds hundreds of thousands of files);
    a file is `lstat`ed when it is looked at, never followed.
    """

    def __init__(self, sessions_dir: Path, by_id: dict[str, list[str]]):
        self.sessions_dir = sessions_dir
        self.folder = str(sessions_dir)
        self.by_id = by_id

    @classmethod
    def scan(cls, sessions_dir: Path) -> "FileIndex":
        by_id: dict[str, list[str]] = defaultdict(list)
        try:
            with os.scandir(sessions_dir) as entries:
                for entry in entries:  # iterated, not listed: one entry in memory at a time
                    sid = session_id_of(entry.name)
                    if sid is not None:
                        by_id[sid].append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            pass
        for names in by_id.values():
            names.sort()
        return cls(sessions_dir, dict(by_id))

    def files_of(self, session_id: str) -> list[SessionFile]:
        if unsafe_id(session_id):
            return []  # such an id never names a file inside sessions/
        found = (self._lstat(name) for name in self.by_id.get(session_id, ()))
        return [entry for entry in found if entry is not None]

    def paths_of(self, session_id: str) -> list[str]:
        """The indexed names of this session's files as paths, not looked at (see `removable`)."""
        if unsafe_id(session_id):
            return []
        return [os.path.join(self.folder, name) for name in self.by_id.get(session_id, ())]

    def indexed(self, name: str) -> bool:
        sid = session_id_of(name)
        return sid is not None and not unsafe_id(sid) and name in self.by_id.get(sid, ())

    def path_of(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def _lstat(self, name: str) -> SessionFile | None:
        try:
            st = os.lstat(os.path.join(self.folder, name))
        except OSError:
            return None  # gone meanwhile
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            return None
        return SessionFile(self.folder, name, st.st_size, st.st_mtime, stat.S_ISLNK(st.st_mode))

    def ids(self) -> set[str]:
        return set(self.by_id)

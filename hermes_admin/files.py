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
    """Per-session files of one `sessions/` folder, by session id."""

    def __init__(self, sessions_dir: Path, by_id: dict[str, list[SessionFile]]):
        self.sessions_dir = sessions_dir
        self.by_id = by_id

    @classmethod
    def scan(cls, sessions_dir: Path) -> "FileIndex":
        by_id: dict[str, list[SessionFile]] = defaultdict(list)
        folder = str(sessions_dir)
        try:
            entries = list(os.scandir(sessions_dir))
        except (FileNotFoundError, NotADirectoryError):
            entries = []
        for entry in entries:
            sid = session_id_of(entry.name)
            if sid is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                continue
            by_id[sid].append(SessionFile(folder, entry.name, st.st_size, st.st_mtime, stat.S_ISLNK(st.st_mode)))
        for files in by_id.values():
            files.sort(key=lambda f: f.name)
        return cls(sessions_dir, dict(by_id))

    def files_of(self, session_id: str) -> list[SessionFile]:
        if unsafe_id(session_id):
            return []  # such an id never names a file inside sessions/
        return self.by_id.get(session_id, [])

    def ids(self) -> set[str]:
        return set(self.by_id)

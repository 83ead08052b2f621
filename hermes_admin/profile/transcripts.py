"""A session's files in `sessions/` carried by its export, and put back by `restore`.

The delete removes a unit's files once its rows are gone (aftermath.py), so the export written
before the delete holds them too: each session's record gets `files`, a list of `{name, mtime,
text}` (`bytes`, base64, for a file that is not UTF-8), placed before `messages` (which a reader
streams, so it comes last), and written into the compressor a piece at a time. A session's files are carried up to FILES_MAX bytes in all, each read
through `plain_files` (never through a link, never a FIFO); one that is not carried is named in
the export's `files_left`, and the delete's report says so (it is removed with its session, as
Hermes' own delete does). A link is never carried: what it names is not the session's, and stays.

Put back, a file is created only where no file of that name is (`O_EXCL`, never through a link),
with its mtime, 0600, and only under a name that belongs to its session (`files.session_id_of`):
an export naming `../x` or another session's file puts nothing there. An export made before
exports carried files has no `files`: its sessions come back without them, and the restore says so.
"""

from __future__ import annotations

import base64
import codecs
import errno
import math
import os
from pathlib import Path
from typing import Callable, Iterator

from hermes_admin.plain_files import read_plain
from hermes_admin.profile import json_bytes
from hermes_admin.profile.store.files import FileIndex, session_id_of, unsafe_id

FILES_MAX = 16 << 20  # bytes of one session's files an export carries: a request dump is ~1 MB, a snapshot less


def put_carried(index: FileIndex | None, sid: str, put: Callable[[bytes], None], left: list[str]) -> None:
    """The `"files":[...],` of session `sid`'s export record, through `put` a piece at a time (a file
    is never held as text whole: memory stays flat, as for messages); what is not carried, and
    why, goes into `left` (one line a file, naming it)."""
    put(b'"files":[')
    total, first = 0, True
    for found in index.files_of(sid) if index is not None and not unsafe_id(sid) else ():
        if found.is_symlink:
            continue  # the link goes, what it names stays: nothing of the session's is lost
        if total + found.size > FILES_MAX:
            left.append(f"{found.path}: removed with its session but not in the export (a session's files "
                        f"are exported up to {FILES_MAX >> 20} MiB): restore cannot bring it back")
            continue
        try:
            data = read_plain(found.path, FILES_MAX - total)
        except OSError as exc:
            left.append(f"{found.path}: removed with its session but not in the export ({exc.strerror or exc}): "
                        "restore cannot bring it back")
            continue
        total += len(data)
        text = _utf8(data)
        put((b"" if first else b",") + b'{"name":' + json_bytes.text(found.name) + b',"mtime":'
            + json_bytes.standard(found.mtime) + (b',"text":"' if text else b',"bytes":"'))
        for piece in _pieces(data, text):
            put(piece)
        put(b'"}')
        first = False
    put(b"],")


PIECE = 3 << 14  # bytes of a file encoded at a time: a multiple of 3, so that base64 pieces join into one


def _utf8(data: bytes) -> bool:
    """Is `data` UTF-8 text (checked a piece at a time, nothing kept)?"""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for at in range(0, len(data), PIECE):
            decoder.decode(data[at:at + PIECE])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _pieces(data: bytes, text: bool) -> Iterator[bytes]:
    """The inside of one JSON string holding `data`: its text escaped, or its base64."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for at in range(0, len(data), PIECE):
        chunk = data[at:at + PIECE]
        if text:
            yield json_bytes.text(decoder.decode(chunk, final=at + PIECE >= len(data)))[1:-1]
        else:
            yield base64.b64encode(chunk)


def put_back(folder: Path, sid: str, items, dry_run: bool) -> tuple[int, list[str]]:
    """The files an export record carries for session `sid`, written into `folder` (the profile's
    `sessions/`); returns how many were put back (a dry run: would be) and a line for each left out."""
    if not isinstance(items, list):
        return 0, []
    put, left = 0, []
    for item in items:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or os.sep in name or session_id_of(name) != sid or unsafe_id(sid):
            left.append(f"{str(name)[:80]!r}: not a file name of session {sid}; not put back")
            continue
        data = _content(item)
        if data is None:
            left.append(f"{folder / name}: its content in the export is malformed; not put back")
            continue
        if os.path.lexists(folder / name):
            if not _same(folder / name, data):  # the same file (a restore cut short put it back) is no news
                left.append(f"{folder / name}: a file of that name is there; left as it is")
            continue
        if not dry_run:
            problem = _write(folder, name, data, item.get("mtime"))
            if problem:
                left.append(f"{folder / name}: {problem}; not put back")
                continue
        put += 1
    return put, left


def _same(path: Path, data: bytes) -> bool:
    try:
        return read_plain(path, len(data)) == data
    except OSError:
        return False


def _content(item: dict) -> bytes | None:
    if isinstance(item.get("text"), str):
        try:
            return item["text"].encode("utf-8")
        except UnicodeEncodeError:
            return None
    if isinstance(item.get("bytes"), str):
        try:
            return base64.b64decode(item["bytes"], validate=True)
        except ValueError:
            return None
    return None


def _write(folder: Path, name: str, data: bytes, mtime) -> str | None:
    """One file created anew (never over one, never through a link), synced, with its mtime; None, or why not."""
    try:
        if not os.path.lexists(folder):
            os.mkdir(folder, 0o700)  # Hermes makes it for every profile; one removed since comes back the owner's
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return "a file of that name is there" if exc.errno == errno.EEXIST else str(exc.strerror or exc)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        if isinstance(mtime, (int, float)) and not isinstance(mtime, bool) and math.isfinite(mtime) and mtime >= 0:
            os.utime(fd, (mtime, mtime))
    except OSError as exc:
        os.close(fd)
        try:  # never half a file where the session's was
            os.unlink(folder / name)
        except OSError:
            pass
        return str(exc.strerror or exc)
    os.close(fd)
    return None

"""Export before delete: every unit the engine deletes is on disk first, verified, restorable.

One export file per profile and run, `<stamp>-<profile>-<id>.jsonl.gz` in the
profile's export folder (the id, 8 hex digits, is what `exports list` shows and `restore` takes) (`<home>/.hermes-admin/exports/` unless the policy names another). It
holds Hermes' own `sessions export` JSONL shape: a line per session, the `sessions` row's columns
plus `messages` (every column of every message row, in id order), and, where the store has them,
`session_model_usage` and `system_prompts` rows; and `files`, the session's files in `sessions/`
(transcripts.py). A batch of units is one gzip member appended to
the file, so a file is always a valid gzip stream, however a run ended.

Before any delete of a batch commits, its member is written, fsynced, read back and checked against
the length and SHA-256 of what was written (a member that fails is cut off again, so the
file stays one valid gzip stream); then the manifest beside the file (`<file>.json`: a line
with the profile and its home, then a line for each member with its offset, length, checksum and
units) gains the member's line, fsynced. A member the manifest does not list was never relied on:
a last line cut short by a crash is one. Lines are appended, never rewritten: rewriting the
whole manifest for each member made the export of many units quadratic.

Messages are encoded by json_bytes, go into the compressor a few dozen KB at a time (PUT_BYTES,
plus one message) and are read back one at a time (`read_member`), so a unit of thousands of
50,000-character messages never sits in memory whole.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import errno
import hashlib
import json
import math
import os
import re
import secrets
import stat
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from hermes_admin.model import Profile
from hermes_admin.plain_files import NotPlain, open_plain, read_plain
from hermes_admin.profile import json_bytes, transcripts
from hermes_admin.profile.store.files import FileIndex
from hermes_admin.profile.store.sql import column_names, journal
from hermes_admin.profile.store.unit_rows import messages_of, names_prompts, prompts_of, session_rows, usage_rows

FORMAT = 2  # 1: the manifest as one JSON document, rewritten for each member (still read)
FORMATS = (1, 2)  # the formats read back: exports made by older versions stay restorable
SUFFIX = ".jsonl.gz"  # JSON lines, gzip: any tool reads them back
STAMP = "%Y%m%dT%H%M%SZ"  # an export's name begins with when it was begun, in UTC: names sort by time
_STAMPED = re.compile(r"\d{8}T\d{6}Z")
_ID_IN_NAME = re.compile(r"-([0-9a-f]{8})" + re.escape(SUFFIX) + "$")  # older names end in a pid: never 8 digits
_OLDER_ID = re.compile(r"-([0-9a-f]{8}-\d+(?:-\d+)?)" + re.escape(SUFFIX) + "$")  # <home tag>-<pid>[-n]
MANIFEST = ".json"  # beside each export: its members and units, so a restore reads only what it needs
DEFAULT_KEEP_DAYS = 7.0  # a week to notice a delete that should not have been
LEVEL = 1  # the fastest that compresses: text shrinks ~3-4x even so, at a fraction of level 6's time
try:  # Intel's ISA-L deflate (python-isal): the same gzip members, compressed in a third of zlib's time
    # at the same ratio and read back in a third; on a real store's purge the export of its files
    # was most of the CPU the purge spent beside the deletes (BENCHMARKS.md).
    from isal import isal_zlib as deflate
except ImportError:  # no wheel of it for this machine: the standard library's zlib, the same format
    deflate = zlib
DEFLATE_ERRORS = (zlib.error, getattr(deflate, "error", zlib.error))
READ_CHUNK = 1 << 20  # compressed bytes read at a time: memory stays flat whatever the member
MAX_MANIFEST = 256 << 20  # ~3 M units
MAX_VALUE = 64 << 20  # a single JSON value read back: Hermes caps a message's content far below
DAY = 86400.0  # seconds: export_keep_days is in days
MAX_MOMENT = 253402300800  # 10000-01-01: past it, a time in a manifest is not one a clock can say


class ExportError(OSError):
    """An export that cannot be written or read; the message names the file. No delete follows."""


@dataclass(frozen=True)
class Settings:
    folder: str | None = None  # None: <home>/.hermes-admin/exports
    keep_days: float = DEFAULT_KEEP_DAYS  # 0: export only the units deleted in several steps

    def folder_of(self, profile: Profile) -> Path:
        if not self.folder:
            return profile.home / ".hermes-admin" / "exports"
        folder = Path(os.path.expanduser(self.folder))
        return folder if folder.is_absolute() else profile.home / folder


@dataclass
class Exported:
    """One unit as written: where, and what the engine re-checks between the steps of a split delete."""
    path: str
    offset: int  # of its gzip member
    length: int
    sessions: int
    messages: int
    weight: int  # characters of its messages' JSON, plus a fixed cost per row (ExportAhead._weigh's measure)
    max_message_id: int  # any message id above it is new since the export
    fingerprint: str  # of its session rows as exported
    # The deleting connection's `PRAGMA data_version` before the export read the store (export_ahead.py):
    # found unchanged inside a delete's transaction, nobody else has written since.
    store_version: int | None = None
    # The unit's files in sessions/ the export does not carry, a line each (transcripts.put_carried): the
    # delete's report says them, since the delete removes them all the same.
    files_left: tuple[str, ...] = ()

    def as_record(self) -> dict:
        """What a split's record keeps (splits.py): not the data_version, which one connection alone can
        read, nor what was said of the files already."""
        return {k: v for k, v in self.__dict__.items() if k not in ("store_version", "files_left")}

    @classmethod
    def from_record(cls, record: dict) -> "Exported":
        return cls(**{k: v for k, v in record.items() if k not in ("store_version", "files_left")})


def decode_value(value):
    """A column's value as it was: a BLOB from its `$bytes`; anything not a plain SQL value is refused."""
    if isinstance(value, dict) and set(value) == {"$bytes"} and isinstance(value["$bytes"], str):
        try:
            return base64.b64decode(value["$bytes"], validate=True)
        except ValueError:
            raise ValueError("a BLOB value that is not base64") from None
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise ValueError(f"a column value that is a {type(value).__name__}")


def session_columns(db) -> list[str]:
    return column_names(db, "sessions")


def fingerprint(names: list[str], rows: list[tuple]) -> str:
    """Session rows (sorted; `names`: session_columns) as one digest: a change of any column changes
    it, but for the parent link, which the engine's own deletes cut when a parent goes (a unit
    exported ahead of that is the same conversation)."""
    skip = names.index("parent_session_id") if "parent_session_id" in names else None
    kept = [r[:skip] + r[skip + 1:] if skip is not None else r for r in rows]
    return hashlib.sha256(json_bytes.standard(sorted(kept, key=lambda r: str(r[0])))).hexdigest()


PUT_BYTES = 1 << 16  # encoded messages held before they are compressed (plus one message: memory stays flat)


def message_columns(db) -> list[str]:
    return column_names(db, "messages")


ROW_WEIGHT = 256  # what a row costs beyond its bytes (index entries, FTS rows), in bytes of text
UNIT_WEIGHT = 1024  # what a unit costs beyond its rows (its session row, lookups, its event)


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:40] or "profile"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _folder(path: Path) -> Path:
    """The export folder, made 0700 if missing. A link, a file, a folder of another user or one others
    may write into is refused: exports hold whole conversations (a shared `export_dir` needs a
    folder per user)."""
    try:
        made = not path.exists()
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if made:
            _fsync_dir(path.parent)
        st = os.lstat(path)
    except OSError as exc:
        raise ExportError(exc.errno, f"cannot make the export folder: {exc.strerror}", str(path)) from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ExportError(errno.ENOTDIR, "is not a real folder; no export is written there", str(path))
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise ExportError(errno.EPERM, "is another user's folder, or others may write into it; no export is "
                                       "written there", str(path))
    return path


class ExportFile:
    """This run's export of one profile, made on its first batch."""

    def __init__(self, profile: Profile, settings: Settings, clock=time.time,
                 files: Callable[[], FileIndex | None] | None = None):
        self.profile, self.settings, self.clock = profile, settings, clock
        self.files = files or (lambda: None)  # the profile's sessions/ index, asked once a unit is exported
        self.path: Path | None = None
        self._head: dict | None = None  # the manifest's first line, written with the first member's
        self._members = 0  # members listed in the manifest so far
        self._manifest_fd: int | None = None  # the manifest, appended to (O_APPEND), created with the file
        self._broken: str | None = None  # why no member may follow (a manifest line that may be half written)
        self._lock = threading.Lock()  # members are appended one at a time (the engine exports ahead)
        self._fd: int | None = None  # the file as created (O_EXCL): never opened again by its name

    def _create(self) -> None:
        folder = _folder(self.settings.folder_of(self.profile))
        stamp = time.strftime(STAMP, time.gmtime(self.clock()))
        flags = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(100):  # a random id: two profiles, roots or runs in one second never share a name
            path = folder / f"{stamp}-{_safe_name(self.profile.name)}-{secrets.token_hex(4)}{SUFFIX}"
            fd = None
            try:
                # no fsync of the folder yet: the first member's manifest line, before any delete commits, covers both names
                fd = os.open(path, os.O_RDWR | flags, 0o600)
                manifest_fd = os.open(str(path) + MANIFEST, os.O_WRONLY | os.O_APPEND | flags, 0o600)
                break
            except OSError as exc:
                if fd is not None:  # the file without its manifest is not left behind
                    os.close(fd)
                    os.unlink(path)
                if isinstance(exc, FileExistsError):
                    continue  # the name is taken (by a file, or by a manifest left without one)
                raise ExportError(exc.errno, f"cannot create the export: {exc.strerror}", str(path)) from None
        else:
            raise ExportError(errno.EEXIST, "cannot create the export: too many of the same name", str(path))
        self.path, self._fd, self._manifest_fd = path, fd, manifest_fd
        self._head = {"format": FORMAT, "profile": self.profile.name, "home": str(self.profile.home),
                      "root": str(self.profile.root), "created": self.clock()}

    def write(self, db, schema, units, reason: str) -> dict[str, Exported]:
        """Append one member holding `units`; returns what was written, by head session id, once the
        member is on disk, verified, and in the manifest."""
        with self._lock:
            return self._write(db, schema, units, reason)

    def _write(self, db, schema, units, reason: str) -> dict[str, Exported]:
        if self._broken:
            raise ExportError(errno.EIO, self._broken, str(self.path) + MANIFEST)
        if self.path is None:
            self._create()
        digest, compressor = hashlib.sha256(), deflate.compressobj(LEVEL, zlib.DEFLATED, 31)
        size = [0]
        offset = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            with os.fdopen(os.dup(self._fd), "ab") as out:

                def put(data: bytes) -> None:
                    digest.update(data)
                    size[0] += len(data)
                    out.write(compressor.compress(data))

                found = {}
                with _snapshot(db):
                    columns = session_columns(db)
                    rows = {r[0]: r for r in session_rows(db, [i for u in units for i in u.ids])}
                    usage = usage_rows(db, schema, list(rows))
                    for unit in units:
                        found[unit.session_id] = self._unit(db, schema, unit, put, columns, rows, usage)
                ids = {unit.session_id: unit.ids for unit in units}
                out.write(compressor.flush())
                out.flush()
                os.fsync(out.fileno())
                length = out.tell() - offset
            expected = (digest.hexdigest(), size[0])
            if verify_member(self._fd, offset, length) != expected:
                raise ExportError(errno.EIO, "the export read back differs from what was written; nothing deleted",
                                  str(self.path))
        except BaseException as exc:
            try:  # a member that is not whole goes again: the file stays one valid gzip stream
                os.ftruncate(self._fd, offset)
            except OSError:
                pass
            if isinstance(exc, OSError) and not isinstance(exc, ExportError):
                raise ExportError(exc.errno, f"cannot write the export: {exc.strerror}", str(self.path)) from None
            raise
        written = {sid: e for sid, e in found.items() if e is not None}
        for item in written.values():
            item.offset, item.length = offset, length
        member = {"offset": offset, "length": length, "sha256": expected[0], "bytes": expected[1], "reason": reason,
                  "at": self.clock(),  # when its units were exported: just before they were deleted
                  "units": [[sid, e.sessions, e.messages, list(ids[sid])] for sid, e in written.items()]}
        self._append_manifest(member)
        return written

    def _unit(self, db, schema, unit, put, columns, by_id, usage) -> Exported | None:
        ids = list(unit.ids)
        rows = [by_id[i] for i in ids if i in by_id]
        if not rows:
            return None
        messages, weight, max_id = 0, UNIT_WEIGHT, 0
        index, left = self.files(), []
        for sid in ids:  # unit order: a lineage's root first, so a restore meets parents first
            row = by_id.get(sid)
            if row is None:
                continue
            record = dict(zip(columns, row))
            if schema.has_table("session_model_usage"):
                record["session_model_usage"] = usage.get(sid, [])
            if schema.has_table("system_prompts") and names_prompts(record):
                record["system_prompts"] = prompts_of(db, schema, record)
            head = json_bytes.standard(record)
            put(head[:-1] + (b"," if len(head) > 2 else b""))
            transcripts.put_carried(index, sid, put, left)  # `files`, streamed; before `messages`, which comes last
            put(b'"messages":[')
            names = message_columns(db)
            held: list[bytes] = []  # encoded messages not yet compressed: a few put()s a session, not one a message
            size = put_before = 0  # this session's messages already put
            for message in messages_of(db, sid, names):
                text = json_bytes.row(names, message)
                held.append(text)
                size += len(text)
                weight += json_bytes.chars(text) + ROW_WEIGHT
                if isinstance(message[0], int) and message[0] > max_id:
                    max_id = message[0]
                if size >= PUT_BYTES:
                    put((b"," if put_before else b"") + b",".join(held))
                    put_before += len(held)
                    held, size = [], 0
            put((b"," if held and put_before else b"") + b",".join(held) + b"]}\n")
            messages += put_before + len(held)
        return Exported(str(self.path), 0, 0, len(rows), messages, weight, max_id, fingerprint(columns, rows),
                        files_left=tuple(left))

    def close(self) -> None:
        fds, self._fd, self._manifest_fd = (self._fd, self._manifest_fd), None, None
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _append_manifest(self, member: dict) -> None:
        """The member's line (after the head, for the first), on disk before it returns; the first
        also syncs the folder, so both names are on disk before anything is deleted.

        A line that may be half written is cut off again; if even that fails, no member may
        follow (it would come after a line no reader can parse, and make the manifest unreadable)."""
        path = Path(str(self.path) + MANIFEST)
        lines = ([self._head] if self._members == 0 else []) + [member]
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        try:
            at = os.lseek(self._manifest_fd, 0, os.SEEK_END)
            try:
                while data:
                    data = data[os.write(self._manifest_fd, data):]
                os.fsync(self._manifest_fd)
            except BaseException:
                try:
                    os.ftruncate(self._manifest_fd, at)
                    os.fsync(self._manifest_fd)
                except BaseException:
                    self._broken = "the export's manifest may end in a half-written line; no more members after it"
                raise
            if self._members == 0:
                _fsync_dir(path.parent)
        except OSError as exc:
            raise ExportError(exc.errno, f"cannot write the export's manifest: {exc.strerror}", str(path)) from None
        self._members += 1


def _snapshot(db):
    """In WAL, one read transaction: a whole member as of one moment. In a rollback journal a read
    transaction holds every commit back, Hermes' and ours, for as long as it lasts (encoding and
    compressing included): there each statement is its own, a page of rows at a time; a unit that
    changed meanwhile is found unlike its export by the delete's own check, inside its
    transaction, and left for the next run."""
    return db.atomic() if journal(db) == "wal" else contextlib.nullcontext()


# -- reading -------------------------------------------------------------------


def _member_text(path, offset: int, length: int, codec=zlib) -> Iterator[bytes]:
    """The uncompressed bytes of one member, a piece at a time (never more than READ_CHUNK at once,
    whatever the compressed bytes expand to). `path`: a file name, or a descriptor of it; `codec`:
    the inflater's module (zlib's errors for every reader; `deflate` for the write's own check)."""
    inflater = codec.decompressobj(31)
    opened = os.fdopen(os.dup(path) if isinstance(path, int) else _plain_fd(path), "rb")
    with opened as source:
        source.seek(offset)
        left = length
        while left > 0:
            data = source.read(min(READ_CHUNK, left))
            if not data:
                raise ExportError(errno.EIO, "the export is shorter than its manifest says", str(path))
            left -= len(data)
            while data:
                yield inflater.decompress(data, READ_CHUNK)
                data = inflater.unconsumed_tail
        while not inflater.eof and (piece := inflater.decompress(b"", READ_CHUNK)):
            yield piece
    if not inflater.eof:
        raise ExportError(errno.EIO, "an export member ends early", str(path))


def _plain_fd(path) -> int:
    """The export at `path` opened to read: a plain file, never through a link, never waited on."""
    try:
        return open_plain(path)
    except OSError as exc:
        raise ExportError(exc.errno, f"cannot read the export: {exc.strerror}", str(path)) from None


def verify_member(path, offset: int, length: int) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    try:
        for data in _member_text(path, offset, length, deflate):
            digest.update(data)
            size += len(data)
    except DEFLATE_ERRORS as exc:
        raise ExportError(errno.EIO, f"the export does not decompress ({exc})", str(path)) from None
    return digest.hexdigest(), size


def load_manifest(path: Path) -> dict:
    """The manifest as one dict (its members listed under "members"): written a line at a time, or
    as one document (format 1, and what a person may write back)."""
    manifest_path = Path(str(path) + MANIFEST)
    try:  # a FIFO, a device or a link there is one line, never a wait (plain_files.read_plain)
        data = read_plain(manifest_path, MAX_MANIFEST)
    except NotPlain as exc:
        if exc.errno == errno.EFBIG:  # never a silent cut: the line it would end in is a member
            raise ExportError(errno.EFBIG, f"the export's manifest is over {MAX_MANIFEST >> 20} MB",
                              str(manifest_path)) from None
        raise ExportError(exc.errno, f"the export's manifest {exc.strerror}", str(manifest_path)) from None
    except OSError as exc:
        raise ExportError(exc.errno, f"cannot read the export's manifest: {exc.strerror}", str(manifest_path)) from None
    try:
        manifest = _parse_manifest(data)
    except (ValueError, RecursionError):
        raise ExportError(errno.EINVAL, "the export's manifest is not valid JSON", str(manifest_path)) from None
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS \
            or not isinstance(manifest.get("members"), list) or not all(map(_good_member, manifest["members"])):
        raise ExportError(errno.EINVAL, "not a hermes-admin export manifest", str(manifest_path))
    wrong = _wrong_header(manifest)
    if wrong:
        raise ExportError(errno.EINVAL, f"not a hermes-admin export manifest ({wrong})", str(manifest_path))
    return manifest


def _wrong_header(manifest: dict) -> str | None:
    """What in a manifest's own fields is not of the shape we write (its members are checked apart)."""
    created = manifest.get("created")
    if created is not None and not _moment(created):
        return "created: not a time"
    if manifest.get("home") is not None and not (isinstance(manifest["home"], str) and len(manifest["home"]) < 4096):
        return "home: not a folder"
    return None


def _moment(value) -> bool:
    """A time in seconds since the epoch that a clock can say (never NaN, 1e300 or text)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value < MAX_MOMENT)


def manifest_or_recomputed(path: Path) -> dict:
    """The export's manifest; for a file copied without it (`<file>.json`), one recomputed from the
    file itself, so an export is restorable on its own. A recomputed manifest knows neither the home
    (the caller names the profile) nor how sessions were grouped: each session is a unit of its own,
    in the file's order (a lineage's root before its children, as written)."""
    if os.path.lexists(str(path) + MANIFEST):
        return load_manifest(path)
    members, offset = [], 0
    try:
        size = os.lstat(path).st_size
    except OSError as exc:
        raise ExportError(exc.errno, f"cannot read the export: {exc.strerror}", str(path)) from None
    while offset < size:
        length = _member_length(path, offset)
        digest, count = verify_member(path, offset, length)
        units = []
        for fields, messages in _Parser(_member_text(path, offset, length), path).records():
            sid = fields.get("id")
            n = sum(1 for _ in messages)
            if isinstance(sid, str):
                units.append([sid, 1, n, [sid]])
        members.append({"offset": offset, "length": length, "sha256": digest, "bytes": count, "reason": None,
                        "units": units})
        offset += length
    return {"format": FORMAT, "home": None, "recomputed": True, "members": members}


def _member_length(path, offset: int) -> int:
    """How many compressed bytes the gzip member at `offset` takes (inflated to its end, then what
    was read past it subtracted)."""
    inflater = zlib.decompressobj(31)
    with os.fdopen(_plain_fd(path), "rb") as source:
        source.seek(offset)
        while not inflater.eof:
            data = source.read(READ_CHUNK)
            if not data:
                raise ExportError(errno.EIO, "an export member ends early", str(path))
            try:
                while data and not inflater.eof:
                    inflater.decompress(data, READ_CHUNK)
                    data = inflater.unconsumed_tail
            except zlib.error as exc:
                raise ExportError(errno.EIO, f"the export does not decompress ({exc})", str(path)) from None
        return source.tell() - offset - len(inflater.unused_data)


def _parse_manifest(data: bytes):
    try:
        return json.loads(data)  # one document
    except ValueError:
        pass
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    if not lines:
        raise ValueError("empty")
    # The last line may be one a crash cut short (or left with a page of zeros, on a file system
    # that orders no data before the file's size): every line before it was fsynced before it was
    # begun, so it was never relied on. Any other line must be whole.
    records = [json.loads(line) for line in lines[:-1]]
    try:
        records.append(json.loads(lines[-1]))
    except ValueError:
        pass
    if not records or not isinstance(records[0], dict) or "members" in records[0]:
        raise ValueError("not a manifest's first line")
    return {**records[0], "members": records[1:]}


def _good_member(member) -> bool:
    def good_unit(unit) -> bool:
        return (isinstance(unit, list) and len(unit) == 4 and isinstance(unit[0], str)
                and all(map(_count, unit[1:3]))
                and isinstance(unit[3], list) and all(isinstance(i, str) for i in unit[3]))

    return (isinstance(member, dict) and all(_count(member.get(k)) for k in ("offset", "length", "bytes"))
            and isinstance(member.get("sha256"), str) and len(member["sha256"]) <= 128
            and (member.get("reason") is None or isinstance(member["reason"], str) and len(member["reason"]) <= 256)
            and isinstance(member.get("units"), list) and all(map(good_unit, member["units"])))


def _count(value) -> bool:
    """A size or a count as we write them: a whole number a JSON reader anywhere holds exactly."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 53


class _Parser:
    """Records of one member, parsed as they stream: the session's fields, then its messages one by one."""

    def __init__(self, pieces: Iterator[bytes], path: Path):
        self.pieces, self.path = pieces, path
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        self.buf, self.pos, self.eof = "", 0, False

    def _fill(self) -> bool:
        if self.eof:
            return False
        if len(self.buf) - self.pos > MAX_VALUE:  # one value larger than any row Hermes stores
            raise self._bad(f"a value over {MAX_VALUE >> 20} MiB")
        piece = next(self.pieces, None)
        if piece is None:
            self.eof = True
            self.buf = self.buf[self.pos:] + self.utf8.decode(b"", final=True)
        else:
            self.buf = self.buf[self.pos:] + self.utf8.decode(piece)
        self.pos = 0
        return True

    def _bad(self, what: str) -> ExportError:
        return ExportError(errno.EINVAL, f"the export is malformed ({what})", str(self.path))

    def _char(self) -> str:
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return ""

    def _expect(self, char: str) -> None:
        if self._char() != char:
            raise self._bad(f"expected {char!r}")
        self.pos += 1

    def _value(self):
        self._char()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self._fill():
                    continue
                raise self._bad("a value does not parse") from None
            if end >= len(self.buf) and not self.eof:  # a number cut by the buffer's end reads as a shorter one
                if self._fill():
                    continue
            self.pos = end
            return value

    def records(self) -> Iterator[tuple[dict, Iterator[dict]]]:
        while self._char():
            self._expect("{")
            session: dict = {}
            messages_seen = False
            while True:
                if self._char() == "}":
                    self.pos += 1
                    break
                if session or messages_seen:
                    self._expect(",")
                key = self._value()
                if not isinstance(key, str):
                    raise self._bad("a key is not a string")
                self._expect(":")
                if key == "messages":  # the last key: its items stream to the caller
                    messages_seen = True
                    self._expect("[")
                    yield session, self._messages()
                    continue
                session[key] = self._value()
            if not messages_seen:
                yield session, iter(())

    def _messages(self) -> Iterator[dict]:
        first = True
        while True:
            if self._char() == "]":
                self.pos += 1
                return
            if not first:
                self._expect(",")
            first = False
            item = self._value()
            if not isinstance(item, dict):
                raise self._bad("a message is not an object")
            yield item


def read_member(path: Path, member: dict, check: bool = True) -> Iterator[tuple[dict, Iterator[dict]]]:
    """(session fields, its messages) of every record of a member, checked against the manifest first
    (`check`; the engine's own roll-back reads a member it verified itself when writing it)."""
    if check:
        found = verify_member(path, member["offset"], member["length"])
        if found != (member["sha256"], member.get("bytes", found[1])):
            raise ExportError(errno.EIO, "an export member's checksum does not match its manifest", str(path))
    parser = _Parser(_member_text(path, member["offset"], member["length"]), path)
    for session, messages in parser.records():
        yield session, messages
        for _ in messages:  # what the caller did not read
            pass


# -- the folder ------------------------------------------------------------------


def export_id(path: str) -> str:
    """An export's short id, as its file's name ends (`…-1a2b3c4d.jsonl.gz`): what `exports list`
    shows and `restore` takes. A name of an earlier version ends in `<home tag>-<pid>`: that is its
    id; a file named by hand has its id derived from the name (`exports list` shows both)."""
    name = os.path.basename(path)
    found = _ID_IN_NAME.search(name) or _OLDER_ID.search(name)
    return found.group(1) if found else hashlib.sha256(name.encode()).hexdigest()[:8]


def _made_elsewhere(profile: Profile, settings: Settings, home) -> bool:
    """Is an export in this profile's folder that names another home one this profile answers for?
    Yes in its own default folder (the profile's folder was renamed, moved or copied with its
    exports), and for a home that is no longer there; no in a folder several profiles share
    (`export_dir`) while the profile that made it exists: that one lists, prunes and restores it."""
    if settings.folder_of(profile) == profile.home / ".hermes-admin" / "exports":
        return True
    return not (isinstance(home, str) and os.path.isdir(home))


def listing(profile: Profile, settings: Settings) -> list[dict]:
    """This profile's exports in its folder, oldest first: its own, and those made in a profile
    folder it was renamed, moved or copied from (`made_in`: that folder; `_made_elsewhere`)."""
    folder = settings.folder_of(profile)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(SUFFIX))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ExportError(exc.errno, f"cannot list the export folder: {exc.strerror}", str(folder)) from None
    found = []
    for name in names:
        path = folder / name
        try:
            manifest = load_manifest(path)
            st = os.lstat(path)
            beside = os.lstat(str(path) + MANIFEST).st_blocks * 512
        except (ExportError, OSError) as exc:
            found.append({"file": str(path), "profile": profile.name, "home": str(profile.home),
                          "problem": str(exc)})
            continue
        made_in = manifest.get("home")
        if made_in != str(profile.home) and not _made_elsewhere(profile, settings, made_in):
            continue
        units = [u for m in manifest["members"] for u in m["units"]]
        found.append({"file": str(path), "id": export_id(name), "profile": profile.name, "home": str(profile.home),
                      "made_in": None if made_in == str(profile.home) else (made_in or "not recorded"),
                      "created": _created(manifest.get("created"), st), "units": len(units),
                      "sessions": sum(u[1] for u in units), "messages": sum(u[2] for u in units),
                      "reasons": sorted({m.get("reason") for m in manifest["members"] if m.get("reason")}),
                      # on disk with its manifest (what a prune frees; `usage` counts the same); allocated
                      # blocks: a sparse file is not its apparent size
                      "bytes": st.st_blocks * 512 + beside})
    return found


def listed_bytes(profile: Profile, settings: Settings) -> int:
    """What this profile's exports take on disk, as `exports list` counts them (with their manifests;
    one whose manifest cannot be read, its own blocks): what `usage` shows."""
    total = 0
    for item in listing(profile, settings):
        if "problem" not in item:
            total += item["bytes"]
            continue
        with contextlib.suppress(OSError):
            total += os.lstat(item["file"]).st_blocks * 512
    return total


def held_units(profile: Profile, settings: Settings) -> list[dict]:
    """Every unit this profile's exports hold: the export, the unit's head and every id it holds,
    and the reason it was deleted for, from the manifests alone (no export is read). The host finds
    a session among them (`sessions show` of one no store has), so no worker is told which one is
    sought. A manifest that cannot be read is left out here (`exports list` names it)."""
    found = []
    for item in listing(profile, settings):
        if "problem" in item:
            continue
        try:
            manifest = load_manifest(Path(item["file"]))
            written = os.lstat(item["file"]).st_mtime
        except (ExportError, OSError):
            continue
        for member in manifest["members"]:
            at = member.get("at")  # the owner's text: never later than the file's last write
            for head, _, _, ids in member["units"]:
                found.append({"unit": head, "ids": list(ids), "reason": member.get("reason"),
                              "file": item["file"], "id": item["id"], "created": item["created"],
                              "exported_at": min(at, written) if _moment(at) else item["created"],
                              "made_in": item["made_in"], "profile": profile.name, "home": str(profile.home)})
    return found


def _created(said, st: os.stat_result) -> float | None:
    """When an export was made, as its manifest says, but never after its file was last written
    (the manifest is the owner's text): what orders and ages exports cannot lie into the future."""
    if isinstance(said, bool) or not isinstance(said, (int, float)) or said != said:
        return None
    return float(min(said, st.st_mtime))


def prune(profile: Profile, settings: Settings, now: float, keep: set[str],
          dry_run: bool = False) -> tuple[list[dict], list[str]]:
    """This profile's exports older than `keep_days` (not those in `keep`), removed (`dry_run`: only
    named). Returns what went, each a listing row with `why` ("age") and `keep_days`, and problems."""
    removed: list[dict] = []
    problems: list[str] = []
    horizon = now - settings.keep_days * DAY
    folder = settings.folder_of(profile)
    if not os.path.isdir(folder):
        return removed, problems
    try:
        stamp = time.strftime(STAMP, time.gmtime(horizon))
    except (OverflowError, OSError, ValueError):  # kept "forever" (.inf, or past what a clock can say)
        return removed, problems
    try:  # names begin with the second the export was begun: manifests are read only when one may be old
        if not any(n.endswith(SUFFIX) and not (_STAMPED.match(n) and n[:len(stamp)] > stamp)
                   for n in os.listdir(folder)):
            return removed, problems
    except OSError:
        pass  # listing() says what is wrong
    for item in listing(profile, settings):
        if "problem" in item or item["file"] in keep or min(item.get("created") or now, now) >= horizon:
            continue
        failed = [] if dry_run else remove_export(item["file"])
        problems += failed
        if not failed:
            removed.append(dict(item, why="age", keep_days=settings.keep_days, dry_run=dry_run))
    return removed, problems


def at_run_end(profile: Profile, settings: Settings, now: float, outbox, dry_run: bool) -> tuple[list[dict], list[str]]:
    """A run's retention of exports (`prune`), but for those an unfinished split delete in the
    `outbox` still needs (None: a dry run, which keeps everything and names what would go)."""
    try:
        keep = {record["exported"]["path"] for _, record in outbox.splits()} if outbox is not None else set()
        return prune(profile, settings, now, keep, dry_run)
    except (OSError, KeyError, TypeError) as exc:  # housekeeping: the next run tries again
        return [], [f"old exports not pruned: {exc}"]


def remove_export(path: str) -> list[str]:
    """An export and its manifest gone; returns what could not be removed (the export stays listed)."""
    problems = []
    for name in (path, path + MANIFEST):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{name}: cannot remove an export: {exc.strerror}")
    return problems

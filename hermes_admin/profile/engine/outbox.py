"""hermes-admin's own journal in a profile: durable events, and the records of deletes in steps.

`.hermes-admin/outbox.db` holds these, nothing of them ever in Hermes' store:
- the `on_session_delete` events, delivered once their rows committed, never otherwise;
- the split records (table `splits`): one per unit being deleted in several transactions,
  written before its first step and ended after its last, so that a crash between steps is
  finished or undone by the next start (splits.py; docs/design.md §5);
- the last look at the store (table `looks`: which sessions it held, packed), the sessions our own
  deletes took since (`own_gone`), and the sessions found deleted outside hermes-admin
  (`noticed`), by which the deletions Hermes made itself are announced too (noticed.py).

Each event goes through three states:

    pending    written before the store transaction commits
    committed  the store transaction committed (so the event must be delivered)
    delivered  the plugins were called

A crash between the store's commit and `committed` leaves a pending event;
on the next start it is checked against the store itself: rows gone (or,
for an archive, archived) means the transaction committed, so the event is
delivered; rows still there means it rolled back, so the event is dropped.

Delivery is at-least-once: an event is marked delivered right after its
plugins ran, so a crash in between repeats that one event on the next run.
Each event has a stable id (`event_id`, passed to the callbacks that declare
it) by which a plugin can drop the repeat.

Faults of the outbox are named as the outbox's (OutboxError, never the store's):
a write that fails (disk full, read-only) stops deliveries for the run, and
what is left stays for the next one. A malformed outbox is set aside, kept for
inspection and reported once, and a new one is started, so the profile is
maintained again.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw

from hermes_admin.model import Profile
from hermes_admin.profile.state_folder import regular_file, set_aside, state_dir


@dataclass
class Event:
    id: int
    kind: str  # "delete", "archive" or "noticed" (deleted outside hermes-admin: never pending)
    session_id: str
    reason: str
    ids: list[str]  # every row that went with the unit

    @property
    def event_id(self) -> str:
        """Stable across re-deliveries (the outbox row and what it says): a plugin may drop a repeat by it."""
        digest = hashlib.sha256(json.dumps([self.session_id, self.reason, self.ids]).encode()).hexdigest()
        return f"{self.id}-{digest[:16]}"

    def payload(self, profile: Profile) -> dict:
        """The hook's keyword arguments (docs/design.md §7), JSON-safe; `event_id` only reaches callbacks
        that declare it (in_hermes.call)."""
        return {
            "session_id": self.session_id,
            "reason": self.reason,
            "profile": profile.name,
            "deleted_ids": list(self.ids) if len(self.ids) > 1 else None,
            "sessions_dir": str(profile.sessions_dir),
            "event_id": self.event_id,
        }


class OutboxError(OSError):
    """The outbox could not be read or written; the message names outbox.db."""


class Outbox:
    def __init__(self, profile: Profile):
        self.profile = profile
        folder, self.notes = state_dir(profile)  # what was set aside, here or later: its own to report
        self.path: Path = folder / "outbox.db"
        self.notes += regular_file(self.path, "the outbox", damage_set_aside=True)
        self._conn: apsw.Connection | None = None
        self._look_kept: bool | None = None  # is a look at the store kept (read once, then kept up to date)
        if self.path.exists():  # else made on the first event: a run that deletes nothing makes no file
            self._connect()

    @property
    def conn(self) -> apsw.Connection:
        if self._conn is None:
            self._connect()
        return self._conn

    def _connect(self) -> None:
        """Open the outbox; one that is damaged in any way is set aside and replaced by a new one
        holding what could still be read from it, so the profile is maintained on this same run."""
        problem = None
        try:
            self._conn = self._open()
            problem = _damage(self._conn)
        except apsw.Error as exc:
            if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
                raise OutboxError(f"{self.path}: {exc}") from None  # in use: not damaged
            problem = str(exc)
        if problem is None:
            return
        events, splits, lost = _salvage(self._conn) if self._conn is not None else ([], [], None)
        self.close()
        self._conn = None
        kept = f"{len(events)} event(s) and {len(splits)} split record(s) carried over"
        lost_text = "none could be read" if lost is None else (f"{lost} unreadable row(s) left in it" if lost else "")
        line = set_aside(self.path, f"damaged ({problem}); {kept}" + (f", {lost_text}" if lost_text else "")
                         + "; kept for inspection")
        for sidecar in ("-wal", "-shm"):
            if (side := self.path.with_name(self.path.name + sidecar)).exists():
                set_aside(side, "beside a damaged outbox")
        self.notes.append(line)
        self._conn = self._open()
        with self._writing() as conn:
            # OR IGNORE: a damaged b-tree can show one id twice; the first reading stands
            conn.executemany("INSERT OR IGNORE INTO events(id, created, state, kind, session_id, reason, ids) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", events)
            conn.executemany("INSERT OR IGNORE INTO splits(id, created, record) VALUES (?, ?, ?)", splits)

    def _open(self) -> apsw.Connection:
        # Autocommit unless we BEGIN (apsw's own SQLite). regular_file checked the name before; a
        # link put there since is refused here (NOFOLLOW), and a FIFO fails SQLite's first read at
        # once (pread on a pipe is ESPIPE): nothing swapped in after the check can hold us up.
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
                               | apsw.SQLITE_OPEN_NOFOLLOW)
        try:
            # Our own file: WAL with synchronous=NORMAL keeps every commit across the death of this
            # process (kill -9 included), at a fraction of an fsync per event.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, created REAL NOT NULL, "
                "state TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT NOT NULL, reason TEXT NOT NULL, "
                "ids TEXT NOT NULL)"
            )
            # Units being deleted in several steps (splits.py): the next start finishes or
            # restores each one left here.
            conn.execute(
                "CREATE TABLE IF NOT EXISTS splits (id INTEGER PRIMARY KEY, created REAL NOT NULL, "
                "record TEXT NOT NULL)"
            )
            # The last look at the store (noticed.py): one row, the sessions packed; the sessions our
            # own deletes took since; and what was found deleted outside hermes-admin, for a while.
            conn.execute(
                "CREATE TABLE IF NOT EXISTS looks (id INTEGER PRIMARY KEY CHECK (id = 1), taken REAL NOT NULL, "
                "device INTEGER NOT NULL, inode INTEGER NOT NULL, sessions BLOB NOT NULL)"
            )
            conn.execute("CREATE TABLE IF NOT EXISTS own_gone (session_id TEXT PRIMARY KEY) WITHOUT ROWID")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS noticed (session_id TEXT PRIMARY KEY, noticed REAL NOT NULL, "
                "looked REAL NOT NULL, head TEXT NOT NULL, reason TEXT NOT NULL, event INTEGER)"
            )
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _writing(self):
        """One transaction of the outbox; its failure is the outbox's, named so."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            yield self.conn
            self.conn.execute("COMMIT")
        except apsw.Error as exc:
            try:
                self.conn.execute("ROLLBACK")
            except apsw.Error:
                pass
            raise OutboxError(f"{self.path}: {exc}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def add_pending(self, kind: str, reason: str, units) -> list[int]:
        """One pending event per unit; returns their ids in unit order."""
        ids = []
        with self._writing() as conn:
            for unit in units:
                conn.execute(
                    "INSERT INTO events(created, state, kind, session_id, reason, ids) VALUES (?, 'pending', ?, ?, ?, ?)",
                    (time.time(), kind, unit.session_id, reason, json.dumps(list(unit.ids))),
                )
                ids.append(conn.last_insert_rowid())
        return ids

    def settle(self, committed: dict[int, list[str]], dropped: list[int], gone: list[str] = ()) -> None:
        """After the store transaction: committed events get the rows that really went. While a look
        at the store is kept, the sessions our own deletes took (a committed delete event's, and
        `gone`: those taken with no event, nobody listening) are remembered with it, in the same
        transaction: the next look must not take them for deletions made outside hermes-admin."""
        remember = self.keeps_look
        if not (committed or dropped or (gone and remember)):
            return  # nothing to write (and no outbox made for it)
        with self._writing() as conn:
            for event_id, ids in committed.items():
                conn.execute("UPDATE events SET state='committed', ids=? WHERE id=?", (json.dumps(ids), event_id))
                if remember and conn.execute("SELECT kind FROM events WHERE id=?", (event_id,)).fetchone() == ("delete",):
                    conn.executemany("INSERT OR IGNORE INTO own_gone(session_id) VALUES (?)", [(i,) for i in ids])
            conn.executemany("DELETE FROM events WHERE id=?", [(i,) for i in dropped])
            if remember:
                conn.executemany("INSERT OR IGNORE INTO own_gone(session_id) VALUES (?)", [(i,) for i in gone])

    # -- the last look at the store (noticed.py) ---------------------------------

    @property
    def keeps_look(self) -> bool:
        """Is a look at the store kept (so our own deletes are remembered beside it)?"""
        if self._conn is None:
            return False
        if self._look_kept is None:
            try:
                self._look_kept = self.conn.execute("SELECT 1 FROM looks").fetchone() is not None
            except apsw.Error as exc:
                raise OutboxError(f"{self.path}: {exc}") from None
        return self._look_kept

    def look(self) -> tuple[float, int, int, bytes] | None:
        """The last look: (when, the store's device and inode then, its sessions packed), or None."""
        if not self.keeps_look:
            return None
        try:
            row = self.conn.execute("SELECT taken, device, inode, sessions FROM looks").fetchone()
        except apsw.Error as exc:
            raise OutboxError(f"{self.path}: {exc}") from None
        return _look(row)

    def own_gone(self) -> set[str]:
        """The sessions our own deletes took since the last look."""
        if not self.keeps_look:
            return set()
        try:
            return {row[0] for row in self.conn.execute("SELECT session_id FROM own_gone")}
        except apsw.Error as exc:
            raise OutboxError(f"{self.path}: {exc}") from None

    def remember(self, taken: float, device: int, inode: int, sessions: bytes, looked: float | None,
                 units: list) -> list[int]:
        """One transaction: the units found deleted outside hermes-admin since the look at `looked`
        (each `session_id`, `reason`, `ids`) become committed events, to be delivered as our own are,
        and are recorded for `sessions show`; this look replaces the last; what our deletes took
        since the last is forgotten. All or nothing: an interrupted run finds the last look still
        there and the same sessions gone, or these events in the outbox and the new look."""
        ids = []
        with self._writing() as conn:
            for unit in units:
                conn.execute("INSERT INTO events(created, state, kind, session_id, reason, ids) "
                             "VALUES (?, 'committed', 'noticed', ?, ?, ?)",
                             (taken, unit.session_id, unit.reason, json.dumps(list(unit.ids))))
                ids.append(conn.last_insert_rowid())
                conn.executemany("INSERT OR REPLACE INTO noticed(session_id, noticed, looked, head, reason, event) "
                                 "VALUES (?, ?, ?, ?, ?, ?)",
                                 [(i, taken, looked or taken, unit.session_id, unit.reason, ids[-1]) for i in unit.ids])
            conn.execute("INSERT OR REPLACE INTO looks(id, taken, device, inode, sessions) VALUES (1, ?, ?, ?, ?)",
                         (taken, device, inode, sessions))
            conn.execute("DELETE FROM own_gone")
            conn.execute("DELETE FROM noticed WHERE noticed < ?", (taken - NOTICED_KEEP_S,))
        self._look_kept = True
        return ids

    def back(self, ids: list[str]) -> None:
        """Sessions put back (a restore): no longer gone by our hand, so a later delete of one by
        Hermes is announced."""
        if ids and self.keeps_look:
            with self._writing() as conn:
                conn.executemany("DELETE FROM own_gone WHERE session_id = ?", [(i,) for i in ids])

    def forget_look(self) -> bool:
        """No look kept any more (hermes-admin stops watching this store); True if there was one."""
        if not self.keeps_look:
            return False
        with self._writing() as conn:
            conn.execute("DELETE FROM looks")
            conn.execute("DELETE FROM own_gone")
        self._look_kept = False
        return True

    @contextmanager
    def _synced(self):
        """One transaction that a power cut cannot undo either (a split's record: its unit is half gone)."""
        self.conn.execute("PRAGMA synchronous=FULL")
        try:
            with self._writing() as conn:
                yield conn
        finally:
            self.conn.execute("PRAGMA synchronous=NORMAL")

    def begin_split(self, record: dict) -> int:
        """A unit about to be deleted in steps."""
        with self._synced() as conn:
            conn.execute("INSERT INTO splits(created, record) VALUES (?, ?)", (time.time(), json.dumps(record)))
            return conn.last_insert_rowid()

    def update_split(self, split_id: int, record: dict) -> None:
        with self._synced() as conn:
            conn.execute("UPDATE splits SET record=? WHERE id=?", (json.dumps(record), split_id))

    def end_split(self, split_id: int) -> None:
        with self._writing() as conn:
            conn.execute("DELETE FROM splits WHERE id=?", (split_id,))

    def splits(self) -> list[tuple[int, dict]]:
        if self._conn is None:
            return []
        try:
            rows = self.conn.execute("SELECT id, record FROM splits ORDER BY id").fetchall()
        except apsw.Error as exc:
            raise OutboxError(f"{self.path}: {exc}") from None
        return [(i, json.loads(record)) for i, record in rows]

    def delivered(self, event_ids: list[int]) -> None:
        with self._writing() as conn:
            conn.executemany("UPDATE events SET state='delivered' WHERE id=?", [(i,) for i in event_ids])

    def forget_old(self) -> None:
        """Keep a short history only: delivered events are not needed after a day."""
        if self._conn is None:
            return
        try:
            self.conn.execute("DELETE FROM events WHERE state='delivered' AND created < ?", (time.time() - 86400,))
        except apsw.Error:
            pass  # history only: the next run tries again

    def _events(self, state: str) -> list[Event]:
        if self._conn is None:
            return []  # no outbox yet: nothing was ever left in it
        try:
            rows = self.conn.execute(
                "SELECT id, kind, session_id, reason, ids FROM events WHERE state=? ORDER BY id", (state,)
            ).fetchall()
        except apsw.Error as exc:
            raise OutboxError(f"{self.path}: {exc}") from None
        return [Event(i, k, s, r, json.loads(ids)) for i, k, s, r, ids in rows]

    def pending(self) -> list[Event]:
        return self._events("pending")

    def undelivered(self) -> list[Event]:
        return self._events("committed")


COLUMNS = {  # what a readable outbox holds (anything else: set aside as malformed)
    "events": ("id", "created", "state", "kind", "session_id", "reason", "ids"),
    "splits": ("id", "created", "record"),  # the records of deletes in steps (splits.py)
}
STATES = ("pending", "committed", "delivered")  # an event's life (the module's docstring)
KINDS = ("delete", "archive", "noticed")  # the changes plugins hear of
NOTICED_KEEP_S = 90 * 86400  # how long `sessions show` can say a session was deleted outside hermes-admin


def _damage(conn: apsw.Connection) -> str | None:
    """What is wrong with an outbox, or None: its pages (quick_check), its shape, each row."""
    check = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)").fetchall()]
    if check != ["ok"]:
        said = [line for row in check for line in row.splitlines() if not line.startswith("***")]
        return "quick_check: " + (said[0][:120] if said else "failed")
    for table, wanted in COLUMNS.items():
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if missing := [c for c in wanted if c not in columns]:
            return f"another shape: {table} has no column {', '.join(missing)}"
    # Rows still to act on must read as ours (delivered ones are history: quick_check covers them).
    wanted = ", ".join(COLUMNS["events"])
    bad = sum(not _event(row) for row in conn.execute(f"SELECT {wanted} FROM events WHERE state != 'delivered'"))
    bad += sum(not _split(row) for row in conn.execute("SELECT id, created, record FROM splits"))
    return f"{bad} row(s) it cannot read" if bad else None


def _readable(conn: apsw.Connection) -> tuple[int, list]:
    """(rows, the events and split records that read as ours) of every table, row by row: a damaged
    page or a value of the wrong kind costs its own row only."""
    rows, good = 0, []
    for table, wanted in COLUMNS.items():
        try:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            ids = [row[0] for row in conn.execute(f"SELECT rowid FROM {table}")]
        except apsw.Error:
            continue
        for rowid in ids:
            rows += 1
            try:
                values = dict(zip(columns, conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (rowid,)).fetchone()))
            except (apsw.Error, TypeError):
                continue
            if table == "events" and "kind" not in values and isinstance(values.get("reason"), str):
                values["kind"] = "archive" if values["reason"] == "archive" else "delete"  # what made it
            row = tuple(values.get(c) for c in wanted)
            if (_event if table == "events" else _split)(row):
                good.append((table, row))
    return rows, good


def _event(row: tuple) -> bool:
    id_, created, state, kind, session_id, reason, ids = row
    try:
        listed = json.loads(ids) if isinstance(ids, str) else None
    except ValueError:
        return False
    return (isinstance(id_, int) and isinstance(created, (int, float)) and state in STATES and kind in KINDS
            and isinstance(session_id, str) and bool(session_id) and isinstance(reason, str)
            and isinstance(listed, list) and all(isinstance(i, str) for i in listed))


def _split(row: tuple) -> bool:
    id_, created, record = row
    try:
        parsed = json.loads(record) if isinstance(record, str) else None
    except ValueError:
        return False
    return isinstance(id_, int) and isinstance(created, (int, float)) and isinstance(parsed, dict)


def _salvage(conn: apsw.Connection) -> tuple[list, list, int | None]:
    """What can still be read from a damaged outbox: its events, its split records, and how many
    rows could not be read (None: none at all)."""
    try:
        rows, good = _readable(conn)
    except apsw.Error:
        return [], [], None
    events = [row for table, row in good if table == "events"]
    splits = [row for table, row in good if table == "splits"]
    return events, splits, rows - len(good)


NOTICED_LISTED = 5000  # rows of `noticed` one answer carries at the most, the newest first


def noticed(profile: Profile) -> list[dict]:
    """The sessions found deleted outside hermes-admin (the last NOTICED_KEEP_S, at most
    NOTICED_LISTED): the host finds a session among them, so no worker is told the id it seeks.
    Read-only, nothing created; none where there is no outbox to read."""
    path = profile.home / ".hermes-admin" / "outbox.db"
    if not path.is_file() or path.is_symlink():
        return []
    try:
        conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            rows = conn.execute("SELECT session_id, noticed, looked, head, reason FROM noticed "
                                "ORDER BY noticed DESC LIMIT ?", (NOTICED_LISTED,)).fetchall()
        finally:
            conn.close()
    except apsw.Error:
        return []  # no such table (an outbox of an older version), or unreadable: nothing noticed to say
    return [{"session_id": sid, "noticed_at": when, "looked_at": looked, "unit": head, "reason": reason,
             "home": str(profile.home), "profile": profile.name}
            for sid, when, looked, head, reason in rows if isinstance(sid, str)]


def read_look(profile: Profile) -> tuple[tuple[float, int, int, bytes] | None, set[str]]:
    """The last look at the store and what our deletes took since (Outbox.look, own_gone), for a dry
    run: read-only, nothing created; none where there is no outbox, or it cannot be read."""
    path = profile.home / ".hermes-admin" / "outbox.db"
    if not path.is_file() or path.is_symlink():
        return None, set()
    try:
        conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            row = conn.execute("SELECT taken, device, inode, sessions FROM looks").fetchone()
            own = {r[0] for r in conn.execute("SELECT session_id FROM own_gone")}
        finally:
            conn.close()
    except apsw.Error:
        return None, set()
    return _look(row), {i for i in own if isinstance(i, str)}


def _look(row) -> tuple[float, int, int, bytes] | None:
    """A `looks` row as the look reads it; one of another shape reads as a look whose sessions
    cannot be unpacked (noticed.looked: a new look is taken, nothing announced)."""
    if row is None:
        return None
    taken, device, inode, sessions = row
    if not (isinstance(taken, (int, float)) and isinstance(device, int) and isinstance(inode, int)
            and isinstance(sessions, bytes)):
        return 0.0, -1, -1, b""
    return float(taken), device, inode, sessions


def has_work(profile: Profile) -> bool:
    """Does the profile's outbox hold events not yet delivered? Read-only, nothing created."""
    path = profile.home / ".hermes-admin" / "outbox.db"
    if not path.is_file() or path.is_symlink():
        return False
    try:
        conn = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
        try:
            if conn.execute("SELECT 1 FROM events WHERE state IN ('pending', 'committed') LIMIT 1").fetchone():
                return True
            try:
                return conn.execute("SELECT 1 FROM splits LIMIT 1").fetchone() is not None
            except apsw.SQLError:
                return False  # an outbox of an older version: no splits table
        finally:
            conn.close()
    except apsw.Error:
        return True  # unreadable: opening the profile for writing will say what is wrong

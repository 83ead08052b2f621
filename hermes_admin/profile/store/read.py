"""Reads of a store: profile counts and session rows.

Counts and look-ups go through peewee models that declare only columns both
v22 and v30 have. The bulk read of session rows is one SQL statement (see
`_select_sessions`); columns only some versions have (`pinned`,
`last_activity_at`) enter it when the schema has them.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass
from typing import Iterator

import peewee
from peewee import SQL, fn

from hermes_admin.profile.store.sql import chunks, journal, marks
from hermes_admin.profile.store.open import Store


class _Base(peewee.Model):
    class Meta:
        database = None  # bound per store with bind_ctx


class Session(_Base):
    # Only what the counts and look-ups here read; the bulk read is `_select_sessions`.
    id = peewee.TextField(primary_key=True)
    started_at = peewee.FloatField()
    ended_at = peewee.FloatField(null=True)
    archived = peewee.IntegerField()

    class Meta:
        table_name = "sessions"


class Message(_Base):
    id = peewee.AutoField()
    session_id = peewee.TextField()
    timestamp = peewee.FloatField()

    class Meta:
        table_name = "messages"


MODELS = (Session, Message)  # the peewee models bound to a store for the reads written with them


@dataclass(slots=True)
class SessionRow:
    """What every task needs to know about one session, whatever the schema."""

    id: str
    source: str
    title: str | None
    parent_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    archived: bool
    pinned: bool
    last_activity_at: float | None
    last_message_at: float | None
    message_rows: int
    delegate_from: str | None
    model: str | None
    session_key: str | None
    profile_name: str | None

    @property
    def last_activity(self) -> float:
        """Newest of `last_activity_at` and the newest message; else `started_at`."""
        candidates = [t for t in (self.last_activity_at, self.last_message_at) if t is not None]
        return max(candidates) if candidates else self.started_at

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


def _shared(value):
    # A few distinct values repeated on every row: one string object each, not one per row.
    return sys.intern(value) if isinstance(value, str) else value


def _row(values: tuple) -> SessionRow:
    (sid, source, title, parent, started, ended, reason, archived, pinned,
     last_act, last_msg, n, delegate_from, model, key, profile_name) = values
    return SessionRow(
        id=sid, source=_shared(source), title=title, parent_id=parent,
        started_at=float(started or 0.0), ended_at=ended, end_reason=_shared(reason),
        archived=bool(archived), pinned=bool(pinned), last_activity_at=last_act,
        last_message_at=last_msg, message_rows=int(n), delegate_from=delegate_from,
        model=_shared(model), session_key=key, profile_name=_shared(profile_name),
    )


# json_extract raises on malformed JSON: a bad model_config must not fail a read
def _delegate_from(column: str = "model_config") -> str:
    return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$._delegate_from') END"


def _select_sessions(store: Store, where: str = "", params: list | None = None) -> list[SessionRow]:
    """Session rows with their message statistics, as one SQL read.

    Raw SQL on purpose: this is the one bulk read (every session of a store), and
    peewee's per-value conversion made it several times slower on a large store.
    The message statistics are correlated
    subqueries, each an index lookup in `messages(session_id, ...)`.
    """
    return list(_iter_sessions(store, _sessions_sql(store, where), params))


def _sessions_sql(store: Store, where: str = "", with_rowid: bool = False) -> str:
    has = store.schema.has_column
    pinned = "s.pinned" if has("sessions", "pinned") else "0"
    activity = "s.last_activity_at" if has("sessions", "last_activity_at") else "NULL"
    return (
        "SELECT s.id, s.source, s.title, s.parent_session_id, s.started_at, s.ended_at, s.end_reason, "
        f"s.archived, {pinned}, {activity}, "
        "(SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id), "
        "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id), "
        f"{_delegate_from('s.model_config')}, "
        f"s.model, s.session_key, s.profile_name{', s.rowid' if with_rowid else ''} FROM sessions s {where}"
    )


def _iter_sessions(store: Store, sql: str, params: list | None) -> Iterator[SessionRow]:
    for values in store.db.execute_sql(sql, params or []):  # row by row: no second copy
        yield _row(values)


def load_sessions(store: Store) -> list[SessionRow]:
    """Every session row of the store, with its message statistics. The commands read a store a
    part at a time (parts.py); the tests compare that with this one graph of every row."""
    return _select_sessions(store)


def most_recent(store: Store, limit: int) -> list[SessionRow]:
    """The `limit` most recently active sessions, newest first; the others are read and let go."""
    return heapq.nlargest(limit, _iter_sessions(store, _sessions_sql(store), None), key=lambda r: r.last_activity)


def related_ids(store: Store) -> set[str]:
    """Sessions at either end of a parent or delegate link: the ones whose unit may be more than themselves."""
    found: set[str] = set()
    sql = (f"SELECT id, parent_session_id, {_delegate_from()} FROM sessions "
           f"WHERE parent_session_id IS NOT NULL OR {_delegate_from()} IS NOT NULL")
    for values in store.db.execute_sql(sql):
        found.update(v for v in values if v is not None)
    return found


def session_batches(store: Store, leave_out: set[str], size: int = 2000,
                    only: str | None = None) -> Iterator[list[SessionRow]]:
    """Every session row but `leave_out` (that meets the condition `only`, on `s`), a few thousand
    at a time in rowid order.

    One read a batch, by rowid range: no list of ids to look up. Each batch is read when it
    is asked for (the caller may delete in between: rowids only grow, so no row is read twice
    or skipped).
    """
    after = None
    while True:
        conditions = ([f"({only})"] if only else []) + (["s.rowid > ?"] if after is not None else [])
        where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
        params = [after] if after is not None else []
        sql = _sessions_sql(store, f"{where}ORDER BY s.rowid LIMIT {int(size)}", with_rowid=True)
        page = store.db.execute_sql(sql, params).fetchall()
        if not page:
            return
        after = page[-1][-1]
        yield [_row(values[:-1]) for values in page if values[0] not in leave_out]
        if len(page) < size:  # the last one (a row added since has a newer rowid: a new session)
            return


def count_sessions(store: Store, only: str | None = None) -> int:
    """How many session rows there are (`only`: an SQL condition on them, aliased `s`)."""
    where = f"WHERE {only}" if only else ""
    return int(store.db.execute_sql(f"SELECT COUNT(*) FROM sessions s {where}").fetchone()[0])


def load_rows(store: Store, ids: list[str]) -> dict[str, SessionRow]:
    """The rows of these sessions only (those that exist), by id. The engine calls it inside
    its transactions (existence and recheck at once), where every millisecond holds the lock."""
    found: dict[str, SessionRow] = {}
    for part in chunks(ids):
        found.update((row.id, row) for row in _select_sessions(store, f"WHERE s.id IN ({marks(part)})", part))
    return found


def existing_ids(store: Store, ids: list[str]) -> list[str]:
    """Those of `ids` that a sessions row has."""
    found: list[str] = []
    for part in chunks(ids):
        found += [r[0] for r in store.db.execute_sql(f"SELECT id FROM sessions WHERE id IN ({marks(part)})",
                                                     part).fetchall()]
    return found


def session_ids(store: Store):
    """Every session id of the store, in no particular order, read as they come."""
    with store.db.bind_ctx(MODELS):
        for (sid,) in Session.select(Session.id).tuples().iterator():
            yield sid


@dataclass
class ProfileCounts:
    sessions: int
    messages: int
    archived: int
    live: int
    empty: int
    last_activity: float | None


def message_bytes(db, ids: list[str] | None = None) -> dict[str, int]:
    """Bytes of message text (content and tool calls) per session: of every session, or of `ids`
    (in chunks). What `usage` lists and what the size budget weighs units by."""
    size = ("SUM(COALESCE(LENGTH(CAST(content AS BLOB)), 0) + COALESCE(LENGTH(CAST(tool_calls AS BLOB)), 0))")
    if ids is None:
        return {sid: int(n or 0) for sid, n in
                db.execute_sql(f"SELECT session_id, {size} FROM messages GROUP BY session_id").fetchall()}
    found: dict[str, int] = {}
    for part in chunks(ids):
        found.update((sid, int(n or 0)) for sid, n in db.execute_sql(
            f"SELECT session_id, {size} FROM messages WHERE session_id IN ({marks(part)}) GROUP BY session_id",
            part).fetchall())
    return found


def sources_by_id(db) -> dict[str, str]:
    """Every session's source, by id."""
    return dict(db.execute_sql("SELECT id, source FROM sessions").fetchall())


def open_sessions(store: Store) -> list[SessionRow]:
    """The sessions still open (`ended_at` NULL): what the stale-row rule looks at."""
    return _select_sessions(store, "WHERE s.ended_at IS NULL")


def profile_counts(store: Store) -> ProfileCounts:
    """The counts `profiles` shows; `empty` checks message rows, not `message_count`."""
    with store.db.bind_ctx(MODELS):
        has_messages = Message.select(SQL("1")).where(Message.session_id == Session.id)
        sessions = Session.select().count()
        messages = Message.select().count()
        archived = Session.select().where(Session.archived != 0).count()
        live = Session.select().where(Session.ended_at.is_null()).count()
        empty = (
            Session.select()
            .where(Session.ended_at.is_null(False) & ~fn.EXISTS(has_messages))
            .count()
        )
        newest = [
            Session.select(fn.MAX(Session.started_at)).scalar(),
            Message.select(fn.MAX(Message.timestamp)).scalar(),
        ]
        if store.schema.has_column("sessions", "last_activity_at"):
            newest.append(store.db.execute_sql("SELECT MAX(last_activity_at) FROM sessions").fetchone()[0])
    known = [float(t) for t in newest if t is not None]
    return ProfileCounts(sessions, messages, archived, live, empty, max(known) if known else None)


def journal_mode(store: Store) -> str:
    # Reading the mode never changes it.
    return journal(store.db)


def orphan_session_ids(store: Store) -> list[str]:
    """Session ids that message or usage rows name but no sessions row has."""
    tables = ["messages"] + (["session_model_usage"] if store.schema.has_table("session_model_usage") else [])
    found: set[str] = set()
    for table in tables:
        sql = (f"SELECT session_id FROM (SELECT DISTINCT session_id FROM {table}) AS t "
               "WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = t.session_id)")
        found.update(r[0] for r in store.db.execute_sql(sql).fetchall())
    return sorted(found)


# The sessions the empty sweep and the TUI-ghost prune look at (a condition on `s`).
WITHOUT_MESSAGES = "NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)"


def any_without_messages(store: Store, source: str | None = None) -> bool:
    """Is there a session (of `source`, when given) without a single message row?

    The empty sweep and the TUI-ghost prune look only at such sessions: where there is none,
    their graphs would select nothing and keep nothing, so they need not be built.
    """
    sql = f"SELECT 1 FROM sessions s WHERE {WITHOUT_MESSAGES}"
    params: list = []
    if source is not None:
        sql += " AND s.source = ?"
        params.append(source)
    return store.db.execute_sql(sql + " LIMIT 1", params).fetchone() is not None


def session_marks(store: Store, size: int = 5000) -> Iterator[list[tuple[str, str | None, bool, float]]]:
    """Every session as a look at the store keeps it (engine/noticed.py): its id, its parent, whether
    it ended, and when it was last active by its own row (`last_activity_at` where the schema has it,
    else when it ended or began); a page at a time in id order, each page one short read (in a
    rollback journal a reader holds Hermes' commits off)."""
    activity = "s.last_activity_at, " if store.schema.has_column("sessions", "last_activity_at") else ""
    sql = (f"SELECT s.id, s.parent_session_id, s.ended_at IS NOT NULL, "
           f"MAX(COALESCE({activity}s.ended_at, s.started_at, 0), COALESCE(s.ended_at, 0), COALESCE(s.started_at, 0)) "
           "FROM sessions s WHERE s.id > ? ORDER BY s.id LIMIT ?")
    after = ""
    while True:
        page = store.db.execute_sql(sql, [after, int(size)]).fetchall()
        if not page:
            return
        yield [(sid, parent, bool(ended), float(active or 0)) for sid, parent, ended, active in page
               if isinstance(sid, str)]
        after = page[-1][0]
        if len(page) < size:
            return

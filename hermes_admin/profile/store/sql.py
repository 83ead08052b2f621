"""SQL helpers for a Hermes store (parameter lists in chunks, their `?` marks), and the guards:
rows the engine must not touch, whatever selected them.

- a session whose conversation has a live `compression_locks` or
  `session_turn_leases` row (store/guards.py): a live Hermes process is working on it;
- a session referenced from a table hermes-admin does not know (a newer
  Hermes runtime ledger, say): deleting it would break that table's meaning,
  or fail on its `ON DELETE RESTRICT`.
"""

from __future__ import annotations

from typing import Iterable

import apsw
import peewee

from hermes_admin.profile.store import guards
from hermes_admin.profile.store.schema import Schema

# Tables whose references to sessions the engine handles itself.
KNOWN_REFERENCES = {"sessions", "messages", "session_model_usage", "telegram_dm_topic_bindings"}
CHUNK = 900  # SQLite's host-parameter limit is far above; Hermes uses 900 too


def changes(db: peewee.SqliteDatabase, cursor) -> int:
    """Rows the statement just run on `db` changed (apsw's cursors carry no rowcount)."""
    return db.rows_affected(cursor)


def column_names(db: peewee.SqliteDatabase, table: str) -> list[str]:
    """A table's columns in `SELECT *` order (apsw tells a cursor's columns only while it has rows)."""
    return [row[1] for row in db.execute_sql(f'PRAGMA table_info("{table}")').fetchall()]


def dicts(db: peewee.SqliteDatabase, sql: str, params: list | tuple = ()) -> list[dict]:
    """The rows a query returns, each as {column: value}."""
    cursor = db.execute_sql(sql, params)
    try:
        names = [d[0] for d in cursor.description]
    except apsw.ExecutionCompleteError:  # no row: nothing to name
        return []
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def journal(db: peewee.SqliteDatabase) -> str:
    """The store's journal mode, as this connection sees it ("wal", "delete", ...)."""
    return str(db.execute_sql("PRAGMA journal_mode").fetchone()[0]).lower()


def chunks(ids: list[str], size: int = CHUNK) -> Iterable[list[str]]:
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def marks(ids: list[str]) -> str:
    return ",".join("?" * len(ids))


def foreign_references(db: peewee.SqliteDatabase, schema: Schema) -> list[tuple[str, str]]:
    """(table, column) of every unknown table with a foreign key to sessions."""
    found = []
    for table in sorted(schema.tables - KNOWN_REFERENCES):
        if table.startswith(("sqlite_", "messages_fts")):
            continue
        quoted = table.replace('"', '""')
        for row in db.execute_sql(f'PRAGMA foreign_key_list("{quoted}")').fetchall():
            if row[2] == "sessions":
                found.append((table, row[3]))
    return found


def live_ids(db: peewee.SqliteDatabase, schema: Schema, now: float) -> dict[str, str]:
    """Sessions a live Hermes process is at work on (a live lease or lock on their conversation,
    keyed and aged as Hermes does: store/guards.py) -> why."""
    return guards.live_sessions(db, schema, now)


def blocked(db: peewee.SqliteDatabase, schema: Schema, ids: list[str], now: float,
            references: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """Session id -> why it must be left alone. `references`: foreign_references(), when already known."""
    why: dict[str, str] = {}
    if references is None:
        references = foreign_references(db, schema)
    live = live_ids(db, schema, now)
    why.update((sid, live[sid]) for sid in ids if sid in live)
    for part in chunks(ids):
        for table, column in references:
            sql = f'SELECT DISTINCT "{column}" FROM "{table}" WHERE "{column}" IN ({marks(part)})'
            for (sid,) in db.execute_sql(sql, part).fetchall():
                why.setdefault(sid, f"referenced by {table}.{column}, which hermes-admin does not know")
    return why

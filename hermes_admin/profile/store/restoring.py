"""The statements that put exported rows back into a Hermes store (engine/restore.py, repair.py)."""

from __future__ import annotations

import peewee

from hermes_admin.profile.store.sql import chunks, dicts, marks


# The tables rows are put back into: a session's row and what an export holds with it.
ROW_TABLES = ("sessions", "messages", "session_model_usage", "system_prompts")


def put_row(db: peewee.SqliteDatabase, table: str, row: dict, columns, keep_existing: bool = False) -> None:
    """One row into `table` (one of ROW_TABLES): its values for the `columns` the table has (names
    quoted: a column may be named like an SQL word). `keep_existing`: a row the table already holds
    (same key) stays as it is and this one is dropped, else that is an error. The one way rows are
    put into a store (restore, repair)."""
    if table not in ROW_TABLES:
        raise ValueError(f"rows are not put into {table!r}")
    names = [c for c in columns if c in row]
    quoted = ", ".join(f'"{c}"' for c in names)
    verb = "INSERT OR IGNORE" if keep_existing else "INSERT"
    db.execute_sql(f"{verb} INTO {table} ({quoted}) VALUES ({marks(names)})", [row[c] for c in names])


def session_exists(db: peewee.SqliteDatabase, sid: str) -> bool:
    return db.execute_sql("SELECT 1 FROM sessions WHERE id = ?", [sid]).fetchone() is not None


def session_row(db: peewee.SqliteDatabase, sid: str) -> dict | None:
    """The session's row, by column name; None when there is none."""
    rows = dicts(db, "SELECT * FROM sessions WHERE id = ?", [sid])
    return rows[0] if rows else None


def message_owners(db: peewee.SqliteDatabase, ids: list[int]) -> dict[int, str]:
    """Which session holds each of these message ids now (those that exist)."""
    return dict(db.execute_sql(f"SELECT id, session_id FROM messages WHERE id IN ({marks(ids)})",
                               ids).fetchall()) if ids else {}


def newest_message_id(db: peewee.SqliteDatabase) -> int:
    """The newest message id Hermes has given out (AUTOINCREMENT's record), or the newest row's."""
    try:
        row = db.execute_sql("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    except Exception:
        row = None
    if row is None:
        row = db.execute_sql("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()
    return int(row[0] or 0)


def pin(db: peewee.SqliteDatabase, ids: list[str]) -> None:
    """Hermes' own `pinned` flag set on these sessions."""
    for part in chunks(ids):
        db.execute_sql(f"UPDATE sessions SET pinned = 1 WHERE id IN ({marks(part)})", part)

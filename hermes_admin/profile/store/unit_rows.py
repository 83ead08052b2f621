"""A unit's rows as the engine reads them to export, weigh and check them (docs/design.md §5):
its session rows whole, its messages page by page, their counts and sizes, what is left of it."""

from __future__ import annotations

from typing import Iterator

import peewee

from hermes_admin.profile.store.sql import chunks, marks

# A session's messages are read a page at a time, each page one short statement: in a rollback
# journal our read lock holds Hermes' commit back, so it is never held while we encode and compress.
PAGE_ROWS = 64


def session_rows(db: peewee.SqliteDatabase, ids: list[str]) -> list[tuple]:
    """The existing sessions' rows, every column."""
    rows = []
    for part in chunks(list(ids)):
        rows += db.execute_sql(f"SELECT * FROM sessions WHERE id IN ({marks(part)})", part).fetchall()
    return rows


def messages_of(db: peewee.SqliteDatabase, sid: str, names: list[str]) -> Iterator[tuple]:
    """One session's message rows in id order, read in pages of PAGE_ROWS (see there); `names`: the
    messages table's columns."""
    at, after = names.index("id"), None
    while True:
        page = db.execute_sql("SELECT * FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
                              [sid, -1 if after is None else after, PAGE_ROWS]).fetchall()
        yield from page
        if len(page) < PAGE_ROWS:
            return
        after = page[-1][at]


def per_session(db: peewee.SqliteDatabase, ids: list[str], aggregate: str) -> dict[str, tuple[int, float]]:
    """Each of these sessions' messages: (how many, `aggregate` over them, 0 for NULL), in chunks."""
    found: dict[str, tuple[int, float]] = {}
    for part in chunks(ids):
        for sid, count, value in db.execute_sql(
                f"SELECT session_id, COUNT(*), {aggregate} FROM messages WHERE session_id IN ({marks(part)}) "
                f"GROUP BY session_id", part).fetchall():
            found[sid] = (count, value or 0)
    return found


def message_sizes(db: peewee.SqliteDatabase, ids: list[str], size: str) -> dict[str, tuple[int, float]]:
    """Each session's messages: (how many, their size). `size`: the SQL aggregate that measures
    them (export_ahead.text_size, what this store's columns hold)."""
    return per_session(db, ids, size)


def each_message_size(db: peewee.SqliteDatabase, ids: list[str], size: str, upto: int) -> list[tuple[int, int]]:
    """The sessions' messages up to id `upto`, in id order: (id, size). `size`: an SQL expression."""
    return [(i, int(w)) for i, w in db.execute_sql(
        f"SELECT id, {size} FROM messages WHERE session_id IN ({marks(ids)}) AND id <= ? ORDER BY id",
        [*ids, upto]).fetchall()]


def messages_beside(db: peewee.SqliteDatabase, ids: list[str], newest: int) -> tuple[int, int]:
    """The sessions' messages: (how many are newer than id `newest`, how many are not)."""
    newer, older = db.execute_sql(
        f"SELECT COALESCE(SUM(id > ?), 0), COALESCE(SUM(id <= ?), 0) FROM messages WHERE session_id IN ({marks(ids)})",
        [newest, newest, *ids]).fetchone()
    return newer, older


def rows_left(db: peewee.SqliteDatabase, ids: list[str]) -> int:
    """The sessions' rows and messages still in the store."""
    return db.execute_sql(
        f"SELECT (SELECT COUNT(*) FROM sessions WHERE id IN ({marks(ids)})) + "
        f"(SELECT COUNT(*) FROM messages WHERE session_id IN ({marks(ids)}))", [*ids, *ids]).fetchone()[0]


def unarchived_left(db: peewee.SqliteDatabase, ids: list[str]) -> int:
    """The sessions' rows still there and not archived."""
    return db.execute_sql(f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks(ids)}) AND archived = 0",
                          ids).fetchone()[0]

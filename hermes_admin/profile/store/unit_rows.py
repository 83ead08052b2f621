"""A unit's rows as the engine reads them to export, weigh and check them (docs/design.md §5):
its session rows whole, its messages page by page, its usage rows and system prompts, their counts
and sizes, what is left of it. Repair's copy of a session into another store reads it here too."""

from __future__ import annotations

from typing import Iterator

import peewee

from hermes_admin.profile.store.schema import Schema
from hermes_admin.profile.store.sql import chunks, dicts, marks

# A session's messages are read a page at a time, each page one short statement: in a rollback
# journal our read lock holds Hermes' commit back, so it is never held while we encode and compress.
PAGE_ROWS = 64


def session_rows(db: peewee.SqliteDatabase, ids: list[str]) -> list[tuple]:
    """The existing sessions' rows, every column."""
    rows = []
    for part in chunks(list(ids)):
        rows += db.execute_sql(f"SELECT * FROM sessions WHERE id IN ({marks(part)})", part).fetchall()
    return rows


def all_messages(db: peewee.SqliteDatabase, sid: str) -> list[dict]:
    """One session's messages (inactive ones too), every column, in id order, in one read: what
    repair copies into another store, a session at a time (an export reads them with messages_of)."""
    return dicts(db, "SELECT * FROM messages WHERE session_id = ? ORDER BY id", [sid])


def usage_rows(db: peewee.SqliteDatabase, schema: Schema, ids: list[str]) -> dict[str, list[dict]]:
    """These sessions' `session_model_usage` rows, by session id: none where the store has no such table."""
    found: dict[str, list[dict]] = {}
    if schema.has_table("session_model_usage"):
        for part in chunks(list(ids)):
            for row in dicts(db, f"SELECT * FROM session_model_usage WHERE session_id IN ({marks(part)})", part):
                found.setdefault(row["session_id"], []).append(row)
    return found


PROMPT_COLUMNS = ("system_prompt_hash", "tool_names")  # a session row's columns that name system_prompts rows


def names_prompts(session: dict) -> bool:
    """Does this session row name any `system_prompts` row?"""
    return any(session.get(c) for c in PROMPT_COLUMNS)


def prompts_of(db: peewee.SqliteDatabase, schema: Schema, session: dict) -> list[dict]:
    """The `system_prompts` rows a session row names (PROMPT_COLUMNS): none where the store has no
    such table or the row names none."""
    hashes = [session.get(c) for c in PROMPT_COLUMNS if session.get(c)]
    if not hashes or not schema.has_table("system_prompts"):
        return []
    return dicts(db, f"SELECT * FROM system_prompts WHERE hash IN ({marks(hashes)})", hashes)


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


TEXT_COLUMNS = ("content", "tool_calls", "reasoning", "reasoning_content", "api_content")  # what FTS5 indexes


def _text_size(schema: Schema, each: str) -> str:
    """SQL for the bytes of a message's text columns (what FTS5 tokenizes, near enough): `each`
    measures one column, for the columns this store has."""
    texts = [c for c in TEXT_COLUMNS if schema.has_column("messages", c)]
    return " + ".join(each.format(c) for c in texts) or "0"


def message_sizes(db: peewee.SqliteDatabase, schema: Schema, ids: list[str]) -> dict[str, tuple[int, float]]:
    """Each session's messages: (how many, the bytes of their text), what a unit weighs before its export."""
    return per_session(db, ids, _text_size(schema, "TOTAL(LENGTH({}))"))


def each_message_size(db: peewee.SqliteDatabase, schema: Schema, ids: list[str], upto: int) -> list[tuple[int, int]]:
    """The sessions' messages up to id `upto`, in id order: (id, the bytes of its text)."""
    size = _text_size(schema, "COALESCE(LENGTH({}), 0)")
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

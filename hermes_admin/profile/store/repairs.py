"""The statements profile repair reads and fixes a store with (profile/repair.py)."""

from __future__ import annotations

from typing import Iterator

import peewee

from hermes_admin.profile.store.sql import marks

# A row whose parent is named but absent.
_DANGLING = "(s.parent_session_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id))"


def quick_check(db: peewee.SqliteDatabase) -> list[tuple]:
    """SQLite's `quick_check`: [("ok",)] for a sound store, else its first findings."""
    return db.execute_sql("PRAGMA quick_check").fetchall()


def rows_worth_a_look(db: peewee.SqliteDatabase, profile_name: str,
                      own_prefixes: list[str]) -> Iterator[tuple[str, str | None, str | None, str | None, int]]:
    """(id, parent, session_key, profile_name, its parent dangles) of the rows that may have
    something to say: a dangling parent, another profile's label, or a session key of agents
    that does not start with one of `own_prefixes`. SQLite leaves the others out: memory stays flat."""
    not_own = "".join(f" AND substr(s.session_key, 1, {len(prefix)}) != ?" for prefix in own_prefixes)
    yield from db.execute_sql(
        f"SELECT s.id, s.parent_session_id, s.session_key, s.profile_name, {_DANGLING} FROM sessions s "
        f"WHERE {_DANGLING} OR (s.profile_name IS NOT NULL AND s.profile_name != ?) "
        f"OR (s.session_key LIKE 'agent:%'{not_own})", [profile_name, *own_prefixes])


def title_taken(db: peewee.SqliteDatabase, title: str, other_than: str) -> bool:
    """Does another session hold this title (Hermes keeps titles unique)?"""
    return db.execute_sql("SELECT 1 FROM sessions WHERE title = ? AND id <> ?", [title, other_than]).fetchone() is not None


def message_count(db: peewee.SqliteDatabase, sid: str) -> int:
    return db.execute_sql("SELECT COUNT(*) FROM messages WHERE session_id = ?", [sid]).fetchone()[0]


def meta_keys_set(db: peewee.SqliteDatabase, keys: tuple[str, ...]) -> list[str]:
    """Those of `keys` that `state_meta` holds, sorted."""
    return [r[0] for r in db.execute_sql(f"SELECT key FROM state_meta WHERE key IN ({marks(list(keys))}) ORDER BY key",
                                         list(keys)).fetchall()]


def detach_if_dangling(db: peewee.SqliteDatabase, sid: str) -> None:
    """The row's parent link cut, if its parent is still absent (checked in the same statement)."""
    db.execute_sql("UPDATE sessions SET parent_session_id = NULL WHERE id = ? AND NOT EXISTS "
                   "(SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id)", [sid])


def relabel(db: peewee.SqliteDatabase, sid: str, profile_name: str) -> None:
    db.execute_sql("UPDATE sessions SET profile_name = ? WHERE id = ?", [profile_name, sid])

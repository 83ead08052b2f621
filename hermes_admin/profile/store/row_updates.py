"""The statements of the engine's row updates: archive flips and stale open rows closed (docs/design.md §5).

What to change is decided by the engine from the rows read inside the transaction
(engine/decisions.py); these read those rows and apply the decision.
"""

from __future__ import annotations

from typing import NamedTuple

import peewee

from hermes_admin.profile.store.sql import changes, chunks, marks


class ArchiveState(NamedTuple):
    """A row's `archived`, and its `auto_archived` (None where the store has no such column, or NULL)."""
    archived: int | None
    auto_archived: int | None


def archive_states(db: peewee.SqliteDatabase, ids: list[str], provenance: bool) -> dict[str, ArchiveState]:
    """The existing rows' archive columns, by id; `provenance`: the store has `auto_archived`."""
    also = "auto_archived" if provenance else "NULL"
    found: dict[str, ArchiveState] = {}
    for part in chunks(ids):
        for sid, archived, auto in db.execute_sql(
                f"SELECT id, archived, {also} FROM sessions WHERE id IN ({marks(part)})", part).fetchall():
            found[sid] = ArchiveState(archived, auto)
    return found


def set_archived(db: peewee.SqliteDatabase, ids: list[str], archived: int, auto_archived: int | None) -> None:
    """`archived` on these rows; `auto_archived` too unless None (a store without the column)."""
    also = ", auto_archived = ?" if auto_archived is not None else ""
    for part in chunks(ids):
        db.execute_sql(f"UPDATE sessions SET archived = ?{also} WHERE id IN ({marks(part)})",
                       [archived, *([auto_archived] if auto_archived is not None else []), *part])


def clear_auto_archived(db: peewee.SqliteDatabase, ids: list[str]) -> int:
    """`auto_archived` set to 0 where it is not; returns the rows changed."""
    changed = 0
    for part in chunks(ids):
        changed += changes(db, db.execute_sql(f"UPDATE sessions SET auto_archived = 0 WHERE id IN ({marks(part)}) "
                                              "AND auto_archived <> 0", part))
    return changed


def close_open(db: peewee.SqliteDatabase, ids: list[str], ended_at: float, end_reason: str) -> None:
    """Open rows among these closed: `ended_at` and `end_reason` set where `ended_at` is NULL."""
    for part in chunks(ids):
        db.execute_sql(f"UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id IN ({marks(part)}) "
                       "AND ended_at IS NULL", [ended_at, end_reason, *part])

"""The statements that delete a unit's rows from a Hermes store, in Hermes' order (docs/design.md §5).

Order inside each transaction (Hermes' own, required by its foreign keys and FTS triggers):
orphan surviving children, delete the doomed sessions' messages (while their rows still exist:
v30's trigram trigger looks them up), delete usage rows and the sessions, drop system prompts
nobody references. The engine decides which units go (engine/decisions.py); these apply it.
"""

from __future__ import annotations

import peewee

from hermes_admin.profile.store.schema import Schema
from hermes_admin.profile.store.unit_rows import per_session
from hermes_admin.profile.store.sql import changes, chunks, marks


def rowids(db: peewee.SqliteDatabase, ids: list[str]) -> dict[str, int]:
    """Each existing session's rowid: the order its row was written in."""
    position: dict[str, int] = {}
    for part in chunks(ids):
        position.update(db.execute_sql(f"SELECT id, rowid FROM sessions WHERE id IN ({marks(part)})",
                                       part).fetchall())
    return position


def message_counts(db: peewee.SqliteDatabase, ids: list[str]) -> dict[str, tuple[int, int]]:
    """Each session's messages: (how many, the newest id)."""
    return per_session(db, ids, "MAX(id)")


def delete_messages(db: peewee.SqliteDatabase, message_ids: list[int]) -> None:
    """These messages only (a step of a split delete: their session rows stay until the last step)."""
    for part in chunks(message_ids):
        db.execute_sql(f"DELETE FROM messages WHERE id IN ({marks(part)})", part)


def delete_sessions(db: peewee.SqliteDatabase, schema: Schema, doomed: list[str]) -> int:
    """The sessions' rows and what hangs on them, in Hermes' order; returns how many rows it changed."""
    db.execute_sql("CREATE TEMP TABLE IF NOT EXISTS hermes_admin_doomed (id TEXT PRIMARY KEY)")
    db.execute_sql("DELETE FROM temp.hermes_admin_doomed")
    for part in chunks(doomed):
        db.execute_sql(f"INSERT OR IGNORE INTO temp.hermes_admin_doomed(id) VALUES {','.join(['(?)'] * len(part))}",
                       part)
    doomed_set = "(SELECT id FROM temp.hermes_admin_doomed)"
    refs = [c for c in ("system_prompt_hash", "tool_names") if schema.has_column("sessions", c)]
    prompt_hashes: set[str] = set()
    if schema.has_table("system_prompts"):
        for column in refs:
            prompt_hashes.update(r[0] for r in db.execute_sql(
                f"SELECT DISTINCT {column} FROM sessions WHERE id IN {doomed_set} AND {column} IS NOT NULL"
            ).fetchall())
    # 1. survivors whose parent goes keep living, without a parent
    changed = changes(db, db.execute_sql(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN "
                                         f"{doomed_set} AND id NOT IN {doomed_set}"))
    # 2. messages while their session rows still exist (the trigram trigger reads them)
    changed += changes(db, db.execute_sql(f"DELETE FROM messages WHERE session_id IN {doomed_set}"))
    # 3. usage rows (they cascade, but say so), then the sessions
    if schema.has_table("session_model_usage"):
        changed += changes(db, db.execute_sql(f"DELETE FROM session_model_usage WHERE session_id IN {doomed_set}"))
    changed += changes(db, db.execute_sql(f"DELETE FROM sessions WHERE id IN {doomed_set}"))
    # 4. system prompts nobody references any more
    if prompt_hashes:
        unreferenced = " AND ".join(f"NOT EXISTS (SELECT 1 FROM sessions WHERE {c} = system_prompts.hash)"
                                    for c in refs)
        for part in chunks(sorted(prompt_hashes)):
            db.execute_sql(f"DELETE FROM system_prompts WHERE hash IN ({marks(part)}) AND {unreferenced}", part)
    db.execute_sql("DELETE FROM temp.hermes_admin_doomed")
    return changed

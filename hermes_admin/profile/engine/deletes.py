"""The delete statements, inside the transaction the engine opened (docs/design.md §5).

Order inside each transaction (Hermes' own, required by its foreign keys and FTS triggers):
orphan surviving children, delete the doomed sessions' messages (while their rows still exist:
v30's trigram trigger looks them up), delete usage rows and the sessions, drop system prompts
nobody references. Every unit is checked first, inside the same transaction: still there, not
guarded (store/sql.py), still chosen by its rule, and still as it was exported.
"""

from __future__ import annotations

from typing import Callable

from hermes_admin.profile.engine import exports, faults
from hermes_admin.profile.engine.exports import Exported
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store, sql
from hermes_admin.profile.store.read import SessionRow, load_rows
from hermes_admin.profile.store.sql import changes, chunks, marks
from hermes_admin.results import Result

Recheck = Callable[[Unit, dict[str, SessionRow]], "str | None"]


class Deletes:
    """`references()`: unknown tables pointing at sessions; `now()`: the run's clock;
    `data_version()`: other connections' commits, as the deleting connection sees them."""

    def __init__(self, store: Store, references: Callable[[], list], now: Callable[[], float],
                 data_version: Callable[[], int]):
        self.store, self.references, self.now, self.data_version = store, references, now, data_version
        self._session_columns: list[str] | None = None

    def blocked(self, db, ids: list[str]) -> dict[str, str]:
        """Guarded ids (a live Hermes at work on them, a table we do not know pointing at them) -> why."""
        return sql.blocked(db, self.store.schema, ids, self.now(), self.references())

    def columns(self, db) -> list[str]:
        if self._session_columns is None:  # the schema does not change during a run
            self._session_columns = exports.session_columns(db)
        return self._session_columns

    def live(self, db, ids: list[str]) -> dict[str, str]:
        """Ids a live Hermes process is at work on (its lease or lock on their conversation) -> why."""
        found = sql.live_ids(db, self.store.schema, self.now())
        return {i: found[i] for i in ids if i in found}

    def screen(self, units: list[Unit], result: Result, live_only: bool = False) -> list[Unit]:
        """Drop units with a guarded member (a dry run's stand-in for the check each transaction makes);
        `live_only`: guarded by a live lease or lock only (an archive flip deletes nothing)."""
        ids = [i for unit in units for i in unit.ids]
        blocked = self.live(self.store.db, ids) if live_only else self.blocked(self.store.db, ids)
        fit = []
        for unit in units:
            why = next((blocked[i] for i in unit.ids if i in blocked), None)
            if why:
                result.skipped.append({"session_id": unit.session_id, "ids": list(unit.ids), "why": why})
            else:
                fit.append(unit)
        return fit

    def in_store_order(self, units: list[Unit]) -> list[Unit]:
        """Units in the order their rows were written: neighbouring pages, fewer page reads."""
        heads = [u.session_id for u in units]
        position: dict[str, int] = {}
        for part in chunks(heads):
            position.update(self.store.db.execute_sql(
                f"SELECT id, rowid FROM sessions WHERE id IN ({marks(part)})", part).fetchall())
        return sorted(units, key=lambda u: position.get(u.session_id, -1))

    def in_transaction(self, db, chunk: list[Unit], exported: dict[str, Exported], recheck: Recheck | None,
                       orphans: bool) -> tuple[dict[int, list[str]], dict[int, str], bool]:
        """Delete the units that may go: (index -> the ids that went, index -> why one stayed, it wrote)."""
        all_ids = [i for unit in chunk for i in unit.ids]
        fresh = load_rows(self.store, all_ids)  # inside the transaction: what exists now, as it is now
        existing = set(fresh)
        blocked = {} if orphans else self.blocked(db, all_ids)
        blocked.update(self.unlike_exports(db, [u for u in chunk if u.session_id in exported], exported))
        went: dict[int, list[str]] = {}
        skipped: dict[int, str] = {}
        for index, unit in enumerate(chunk):
            why = _why_kept(unit, existing, blocked, orphans)
            if why is None and recheck is not None and not orphans:
                why = recheck(unit, fresh)
            if why:
                skipped[index] = why
            else:
                went[index] = list(unit.ids) if orphans else [i for i in unit.ids if i in existing]
        doomed = [i for ids in went.values() for i in ids]
        return went, skipped, bool(doomed) and self.delete_rows(db, doomed) > 0

    def unlike_exports(self, db, units: list[Unit], exported: dict[str, Exported]) -> dict[str, str]:
        """Inside the transaction: units whose rows are not those exported (a message came, went or
        grew since), each id -> why. They stay, exported or not, until a run exports them as they are."""
        why = self._unlike(db, units, exported)
        faults.point("compared_with_exports", why=why)
        return why

    def _unlike(self, db, units: list[Unit], exported: dict[str, Exported]) -> dict[str, str]:
        # No other connection committed since the export began: the rows are as exported (our own
        # deletes meanwhile touched other units only, and a cut parent link is not compared).
        version = self.data_version() if units else None
        units = [u for u in units if exported[u.session_id].store_version != version]
        if not units:
            return {}
        ids = [i for unit in units for i in unit.ids]
        counts = _message_counts(db, ids)
        rows: dict[str, tuple] = {r[0]: r for r in exports.session_rows(db, ids)}
        columns = self.columns(db)
        why = {}
        for unit in units:
            found = exported[unit.session_id]
            present = [rows[i] for i in unit.ids if i in rows]
            messages = sum(counts.get(i, (0, 0))[0] for i in unit.ids)
            newest = max((counts.get(i, (0, 0))[1] for i in unit.ids), default=0)
            if not present:
                continue  # gone already: the caller says so
            if (messages != found.messages or newest > found.max_message_id
                    or exports.fingerprint(columns, present) != found.fingerprint):
                why.update({i: "changed since it was exported (left for the next run)" for i in unit.ids})
        return why

    @staticmethod
    def delete_messages(db, message_ids: list[int]) -> None:
        """One step of a split delete: these messages only (their session rows stay until the last step)."""
        for part in chunks(message_ids):
            db.execute_sql(f"DELETE FROM messages WHERE id IN ({marks(part)})", part)

    def delete_rows(self, db, doomed: list[str]) -> int:
        """The units' rows, in Hermes' order; returns how many rows of the store it changed."""
        schema = self.store.schema
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
        faults.point("rows_deleted")
        return changed


def _why_kept(unit: Unit, existing: set[str], blocked: dict[str, str], orphans: bool) -> str | None:
    """Why a unit stays, as the transaction finds it (before its rule is applied again)."""
    if orphans:
        return "its session row exists again" if any(i in existing for i in unit.ids) else None
    if unit.session_id not in existing:
        return "gone already"
    return next((blocked[i] for i in unit.ids if i in blocked), None)


def _message_counts(db, ids: list[str]) -> dict[str, tuple[int, int]]:
    """Each session's messages: (how many, the newest id)."""
    counts: dict[str, tuple[int, int]] = {}
    for part in chunks(ids):
        for sid, count, newest in db.execute_sql(
                f"SELECT session_id, COUNT(*), MAX(id) FROM messages WHERE session_id IN ({marks(part)}) "
                f"GROUP BY session_id", part).fetchall():
            counts[sid] = (count, newest or 0)
    return counts

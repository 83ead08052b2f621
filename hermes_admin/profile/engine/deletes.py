"""A delete's transaction: what it reads, decides (decisions.py) and applies (docs/design.md §5).

Every unit is checked first, inside the same transaction: still there, not guarded
(store/sql.py), still chosen by its rule, and still as it was exported; the statements, in
Hermes' order, are store/deleting.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from hermes_admin.profile import exports
from hermes_admin.profile.engine import decisions, faults
from hermes_admin.profile.engine.decisions import Decision, Recheck
from hermes_admin.profile.exports import Exported
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store, deleting, sql, unit_rows
from hermes_admin.profile.store.read import SessionRow, load_rows
from hermes_admin.profile.tasks.retention import REAPED

__all__ = ["Ask", "Deletes", "Recheck"]


@dataclass(frozen=True)
class Ask:
    """What a delete is asked, as one value through its steps: why (the reason its events carry),
    the rule applied again inside each transaction (`recheck`), and `orphans`: units whose session
    rows are gone already (message and usage rows left behind), taken without the existence check."""

    reason: str
    recheck: Recheck | None = None
    orphans: bool = False


class Deletes:
    """`references()`: unknown tables pointing at sessions; `now()`: the run's clock;
    `data_version()`: other connections' commits, as the deleting connection sees them."""

    def __init__(self, store: Store, references: Callable[[], list], now: Callable[[], float],
                 data_version: Callable[[], int]):
        self.store, self.references, self.now, self.data_version = store, references, now, data_version
        self._session_columns: list[str] | None = None
        # A dry run's: rows its close_stale would have closed (id -> ended_at), read closed by the
        # decisions after it, as the run's later transactions read them.
        self.closed_in_dry_run: dict[str, float] = {}

    def rows(self, ids: list[str]) -> dict[str, SessionRow]:
        """The rows of these sessions as they are now (inside the caller's transaction); in a dry run,
        as its earlier steps would have left them."""
        return self.as_left(load_rows(self.store, ids))

    def as_left(self, rows: dict[str, SessionRow]) -> dict[str, SessionRow]:
        """`rows` (changed in place, and returned) as this run has left them: in a dry run, those its
        close_stale would have closed are closed; the tasks' selection reads them so too."""
        for sid in rows.keys() & self.closed_in_dry_run.keys():
            rows[sid] = replace(rows[sid], ended_at=self.closed_in_dry_run[sid], end_reason=REAPED)
        return rows

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

    def in_store_order(self, units: list[Unit]) -> list[Unit]:
        """Units in the order their rows were written: neighbouring pages, fewer page reads."""
        position = deleting.rowids(self.store.db, [u.session_id for u in units])
        return sorted(units, key=lambda u: position.get(u.session_id, -1))

    def decide(self, db, chunk: list[Unit], exported: dict[str, Exported], recheck: Recheck | None,
               orphans: bool) -> Decision:
        """Inside a transaction (a write one, or a dry run's read one): which units go, from their
        rows as they are now, their guards, and whether they are still as exported."""
        fresh = self.rows([i for unit in chunk for i in unit.ids])
        blocked = {} if orphans else self.blocked(db, [i for unit in chunk for i in unit.ids])
        blocked.update(self.unlike_exports(db, [u for u in chunk if u.session_id in exported], exported))
        return decisions.to_delete(chunk, fresh, blocked, recheck, orphans)

    def in_transaction(self, db, chunk: list[Unit], exported: dict[str, Exported], recheck: Recheck | None,
                       orphans: bool) -> tuple[Decision, bool]:
        """Delete the units that may go: what was decided, and whether it wrote."""
        decision = self.decide(db, chunk, exported, recheck, orphans)
        doomed = decision.ids
        return decision, bool(doomed) and self.delete_rows(db, doomed) > 0

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
        counts = deleting.message_counts(db, ids)
        rows: dict[str, tuple] = {r[0]: r for r in unit_rows.session_rows(db, ids)}
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
        deleting.delete_messages(db, message_ids)

    def delete_rows(self, db, doomed: list[str]) -> int:
        """The units' rows, in Hermes' order; returns how many rows of the store it changed."""
        changed = deleting.delete_sessions(db, self.store.schema, doomed)
        faults.point("rows_deleted")
        return changed


"""Row updates in paced transactions: archive flips and stale open rows closed (docs/design.md §5).

Each transaction reads its units' rows, decides (decisions.py) and applies the decision
(store/row_updates.py); a dry run reads and decides the same way in a read transaction. A row
update each, so units go by count (packing.units_by_count), in synced commits: they are rare,
and an archive's events go at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_admin.profile.engine import decisions
from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.decisions import Decision, Outcome, Recheck
from hermes_admin.profile.engine.deletes import Deletes
from hermes_admin.profile.engine.outbox import Event
from hermes_admin.profile.engine.pacer import Pacer
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import row_updates
from hermes_admin.profile.tasks.retention import REAPED
from hermes_admin.results import Action, Result


@dataclass(frozen=True)
class Flip:
    """An archive (or unarchive) of units. `auto_archived`, where the store has it (`provenance`), is
    written as Hermes 0.22.2 writes it: the inactivity sweep (`swept`) marks the rows it hides with 1,
    so that Hermes un-hides them when the conversation is resumed; a deliberate archive or unarchive
    sets 0 on the whole unit, so nothing un-hides it on the user's behalf. A swept flip leaves units
    with a member a live Hermes process holds (checked inside the transaction)."""
    archived: bool
    provenance: bool
    swept: bool

    def decide(self, db, deletes: Deletes, chunk: list[Unit]) -> Decision:
        """Inside a transaction: which rows flip, from the rows as they are now."""
        ids = [i for unit in chunk for i in unit.ids]
        held = deletes.live(db, ids) if self.swept else {}
        states = row_updates.archive_states(db, ids, self.provenance)
        return decisions.to_flip(chunk, states, held, self.archived, self.provenance, self.swept)

    def apply(self, db, decision: Decision) -> bool:
        """The decision written; whether it changed any row."""
        if decision.ids:
            row_updates.set_archived(db, decision.ids, int(self.archived),
                                     int(self.swept) if self.provenance else None)
        if decision.claimed:
            row_updates.clear_auto_archived(db, list(decision.claimed))
        return bool(decision.ids or decision.claimed)


def flip_archived(pacer: Pacer, aftermath: Aftermath, deletes: Deletes, flip: Flip, chunk: list[Unit], weight: int,
                  reason: str | None, result: Result) -> Outcome:
    """One transaction of archive (or unarchive) flips; an event for each real unarchived -> archived change."""
    outbox = aftermath.outbox
    pacer.commits.before(last=True)  # archive commits stay synced: rare, and their events go at once
    fires = flip.archived and reason is not None and aftermath.listening
    event_ids = outbox.add_pending(Action.ARCHIVE, reason, chunk) if fires else []

    def work(db) -> tuple[Decision, bool]:
        decision = flip.decide(db, deletes, chunk)
        return decision, flip.apply(db, decision)

    try:
        held = pacer.hold(work, quiet=False)
    except BaseException:
        if fires:
            outbox.settle({}, event_ids)  # rolled back: these events must never fire
        raise
    decision, _ = pacer.settle(held, weight, result, f"an archive flip of {len(chunk)} unit(s)", synced=True,
                               follow=lambda done: (done[1], None)).value  # a claim alone wrote: a checkpoint
    if not fires:
        return decision.outcome()
    changed = decision.changes
    outbox.settle({event_ids[i]: list(ids) for i, ids in changed.items()},
                  [e for i, e in enumerate(event_ids) if i not in changed])
    failures = aftermath.deliver([Event(event_ids[i], Action.ARCHIVE, chunk[i].session_id, reason, list(ids))
                                  for i, ids in changed.items()])
    return decision.outcome().plus(Outcome(hook_failures=tuple(failures)))


def decide_close(db, deletes: Deletes, chunk: list[Unit], recheck: Recheck) -> Decision:
    """Inside a transaction: which stale open rows close, from the rows as they are now."""
    ids = [u.session_id for u in chunk]
    return decisions.to_close(chunk, deletes.rows(ids), deletes.blocked(db, ids), recheck)


def close_stale_rows(pacer: Pacer, deletes: Deletes, chunk: list[Unit], weight: int, recheck: Recheck, now: float,
                     result: Result) -> Outcome:
    """One transaction closing open rows a dead process left, each checked again inside it."""
    pacer.commits.before(last=True)

    def work(db) -> Decision:
        decision = decide_close(db, deletes, chunk, recheck)
        if decision.ids:
            row_updates.close_open(db, decision.ids, now, REAPED)
        return decision

    return pacer.write(work, weight, result, f"closing {len(chunk)} stale open row(s)",
                       synced=True, quiet=False).value.outcome()

"""Row updates in paced transactions: archive flips and stale open rows closed (docs/design.md §5).

A row update each, so units go by count (packing.units_by_count), in synced commits: they are
rare, and an archive's events go at once.
"""

from __future__ import annotations

from typing import Callable

from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.deletes import Deletes, Recheck
from hermes_admin.profile.engine.outbox import Event
from hermes_admin.profile.engine.pacer import Pacer
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store.read import load_rows
from hermes_admin.profile.store.sql import changes, marks
from hermes_admin.profile.tasks.retention import REAPED
from hermes_admin.results import Done, Result


def flip_archived(pacer: Pacer, aftermath: Aftermath, chunk: list[Unit], weight: int, archived: bool,
                  reason: str | None, result: Result, provenance: bool = False, swept: bool = False,
                  live: Callable[[object, list[str]], dict] | None = None) -> None:
    """One transaction of archive (or unarchive) flips; an event for each real unarchived -> archived change.

    `auto_archived`, where the store has it (`provenance`), is written as Hermes 0.22.2 writes it:
    the inactivity sweep (`swept`) marks the rows it hides with 1, so that Hermes un-hides them
    when the conversation is resumed; a deliberate archive or unarchive sets 0 on the whole
    unit, so nothing un-hides it on the user's behalf. `live(db, ids)`: units with a member a
    live Hermes process holds stay (checked again inside the transaction)."""
    target, current = (1, 0) if archived else (0, 1)
    outbox = aftermath.outbox
    pacer.commits.before(last=True)  # archive commits stay synced: rare, and their events go at once
    fires = archived and reason is not None and aftermath.listening
    event_ids = outbox.add_pending("archive", reason, chunk) if fires else []

    def work(db) -> tuple[dict[int, list[str]], dict[int, str], bool]:
        changed: dict[int, list[str]] = {}
        claimed = 0  # rows whose auto_archived a deliberate (un)archive cleared, their flag unchanged
        held = live(db, [i for unit in chunk for i in unit.ids]) if live is not None else {}
        kept = {index: next(held[i] for i in unit.ids if i in held)
                for index, unit in enumerate(chunk) if any(i in held for i in unit.ids)}
        for index, unit in enumerate(chunk):
            if index in kept:
                continue
            ids = list(unit.ids)
            flip = [r[0] for r in db.execute_sql(
                f"SELECT id FROM sessions WHERE id IN ({marks(ids)}) AND archived = ?", [*ids, current]).fetchall()]
            if flip:
                also = ", auto_archived = ?" if provenance else ""
                db.execute_sql(f"UPDATE sessions SET archived = ?{also} WHERE id IN ({marks(flip)})",
                               [target, *([int(swept)] if provenance else []), *flip])
                changed[index] = flip
            if provenance and not swept:  # deliberate: the whole unit's archive is the user's now
                claimed += changes(db, db.execute_sql(f"UPDATE sessions SET auto_archived = 0 WHERE id IN "
                                                      f"({marks(ids)}) AND auto_archived <> 0", ids))
        return changed, kept, bool(claimed)

    changed, kept, _ = pacer.write(work, weight, result, f"an archive flip of {len(chunk)} unit(s)", synced=True,
                                   quiet=False, follow=lambda done: (bool(done[0]) or done[2], None),  # a checkpoint
                                   rolled_back=lambda: outbox.settle({}, event_ids) if fires else None).value
    for index, ids in changed.items():
        result.done.append(Done(chunk[index].session_id, tuple(ids), chunk[index].rule))
    result.skipped += [{"session_id": chunk[i].session_id, "ids": list(chunk[i].ids), "why": why}
                       for i, why in kept.items()]
    if fires:
        outbox.settle({event_ids[i]: ids for i, ids in changed.items()},
                      [e for i, e in enumerate(event_ids) if i not in changed])
        aftermath.deliver([Event(event_ids[i], "archive", chunk[i].session_id, reason, ids)
                           for i, ids in changed.items()], result.hook_failures)


def close_stale_rows(pacer: Pacer, deletes: Deletes, chunk: list[Unit], weight: int, recheck: Recheck, now: float,
                     result: Result) -> None:
    """One transaction closing open rows a dead process left, each checked again inside it."""
    pacer.commits.before(last=True)

    def work(db):
        ids = [u.session_id for u in chunk]
        fresh = load_rows(deletes.store, ids)
        blocked = deletes.blocked(db, ids)
        closing = [u for u in chunk if u.session_id not in blocked and recheck(u, fresh) is None]
        if closing:
            closed = [u.session_id for u in closing]
            db.execute_sql(f"UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id IN ({marks(closed)}) "
                           "AND ended_at IS NULL", [now, REAPED, *closed])
        return closing, {u.session_id: blocked.get(u.session_id) or recheck(u, fresh)
                         for u in chunk if u not in closing}

    closing, kept = pacer.write(work, weight, result, f"closing {len(chunk)} stale open row(s)",
                                synced=True, quiet=False).value
    result.done += [Done(unit.session_id, tuple(unit.ids), unit.rule) for unit in closing]
    result.skipped += [{"session_id": sid, "ids": [sid], "why": why} for sid, why in kept.items()]

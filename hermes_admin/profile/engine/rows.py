"""Row updates in paced transactions: archive flips and stale open rows closed (docs/design.md §5).

A row update each, so units go by count (packing.units_by_count), in synced commits: they are
rare, and an archive's events go at once.
"""

from __future__ import annotations

from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.deletes import Deletes, Recheck
from hermes_admin.profile.engine.outbox import Event
from hermes_admin.profile.engine.pacer import Pacer
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store.read import load_rows
from hermes_admin.profile.store.sql import marks
from hermes_admin.profile.tasks.retention import REAPED
from hermes_admin.results import Done, Result


def flip_archived(pacer: Pacer, aftermath: Aftermath, chunk: list[Unit], weight: int, archived: bool,
                  reason: str | None, result: Result) -> None:
    """One transaction of archive (or unarchive) flips; an event for each real unarchived -> archived change."""
    target, current = (1, 0) if archived else (0, 1)
    outbox = aftermath.outbox
    pacer.commits.before(last=True)  # archive commits stay synced: rare, and their events go at once
    fires = archived and reason is not None and aftermath.listening
    event_ids = outbox.add_pending("archive", reason, chunk) if fires else []

    def work(db) -> dict[int, list[str]]:
        changed: dict[int, list[str]] = {}
        for index, unit in enumerate(chunk):
            ids = list(unit.ids)
            flip = [r[0] for r in db.execute_sql(
                f"SELECT id FROM sessions WHERE id IN ({marks(ids)}) AND archived = ?", [*ids, current]).fetchall()]
            if flip:
                db.execute_sql(f"UPDATE sessions SET archived = ? WHERE id IN ({marks(flip)})", [target, *flip])
                changed[index] = flip
        return changed

    changed = pacer.write(work, weight, result, f"an archive flip of {len(chunk)} unit(s)", synced=True, quiet=False,
                          follow=lambda changed: (bool(changed), None),  # a synced commit: asks for a checkpoint
                          rolled_back=lambda: outbox.settle({}, event_ids) if fires else None).value
    for index, ids in changed.items():
        result.done.append(Done(chunk[index].session_id, tuple(ids), chunk[index].rule))
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

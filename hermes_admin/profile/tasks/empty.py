"""Empty-session sweep (reason `empty_sweep`).

Ended, unarchived, unpinned sessions without a single message row (rows are
checked, not `message_count`) and without children, ended more than
`empty_min_age_hours` ago: the row of a conversation that never happened.
"""

from __future__ import annotations

from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.tasks import HOUR, Selection


def _why_not(graph: Graph, sid: str, cutoff: float, live: set[str]) -> str | None:
    row = graph.rows[sid]
    if row.message_rows:
        return None  # not empty: not this task's business, nothing to report
    if row.ended_at is None:
        return "empty but open"
    if sid in live:
        return "empty but live (lock or lease)"
    if row.archived:
        return "empty but archived"
    if row.pinned:
        return "empty but pinned"
    if graph.children.get(sid):
        return "empty but has children"
    if row.ended_at > cutoff:
        return "empty but ended too recently"
    return ""


def select(graph: Graph, min_age_hours: float, now: float, live: set[str] = frozenset()) -> Selection:
    cutoff = now - min_age_hours * HOUR
    chosen = Selection()
    for sid in sorted(graph.rows):
        why = _why_not(graph, sid, cutoff, live)
        if why is None:
            continue
        if why:
            chosen.kept[sid] = why
        else:
            chosen.units.append(Unit(sid, [sid], f"no messages, ended over {min_age_hours:g} h ago"))
    return chosen


def recheck(unit, fresh) -> str | None:
    row = fresh.get(unit.session_id)
    if row is None:
        return "gone already"
    if row.message_rows:
        return "received a message"
    if row.ended_at is None:
        return "was reopened"
    return None

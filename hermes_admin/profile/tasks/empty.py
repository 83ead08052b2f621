"""Empty-session sweep (reason `empty_sweep`).

Ended, unarchived, unpinned sessions without a single message row (rows are
checked, not `message_count`) and without children, ended more than
`empty_min_age_hours` ago: the row of a conversation that never happened.
"""

from __future__ import annotations

from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.store.read import WITHOUT_MESSAGES
from hermes_admin.profile.tasks import HOUR, Rule, Selection

# Why a row with messages stays: not this task's business, so the selector reports nothing for it.
NOT_EMPTY = "not empty: received a message"


def why_kept(row, has_children: bool, cutoff: float, live: set[str]) -> str | None:
    """Why this row is not swept, in the report's words; None: it goes. One rule for the selector (the
    row as read) and its re-check in the deleting transaction (the row as it is then)."""
    if row.message_rows:
        return NOT_EMPTY
    if row.ended_at is None:
        return "empty but open"
    if row.id in live:
        return "empty but live (lock or lease)"
    if row.archived:
        return "empty but archived"
    if row.pinned:
        return "empty but pinned"
    if has_children:
        return "empty but has children"
    if row.ended_at > cutoff:
        return "empty but ended too recently"
    return None


def select(graph: Graph, min_age_hours: float, now: float, live: set[str] = frozenset()) -> Selection:
    cutoff = now - min_age_hours * HOUR
    chosen = Selection()
    for sid in sorted(graph.rows):
        why = why_kept(graph.rows[sid], bool(graph.children.get(sid)), cutoff, live)
        if why == NOT_EMPTY:
            continue
        if why:
            chosen.kept[sid] = why
        else:
            chosen.units.append(Unit(sid, [sid], f"no messages, ended over {min_age_hours:g} h ago"))
    return chosen


def recheck(min_age_hours: float, now: float):
    """The selector's rule (why_kept), on the row as it is inside the deleting transaction. Live rows are
    the engine's own guard there (store/sql.py: blocked). Children are looked for among the rows that
    transaction read; a child made since the selection is orphaned by the delete, as Hermes does."""
    cutoff = now - min_age_hours * HOUR

    def check(unit, fresh) -> str | None:
        row = fresh.get(unit.session_id)
        if row is None:
            return "gone already"
        has_children = any(other.parent_id == row.id for other in fresh.values())
        return why_kept(row, has_children, cutoff, set())
    return check


def rule(policy, now: float) -> Rule:
    hours = policy.empty_min_age_hours
    return Rule(lambda graph, live: select(graph, hours, now, live), recheck(hours, now), WITHOUT_MESSAGES)

"""Retention purge (reason `prune`): whole units, every member ended, unpinned, not live, old.

A unit is a compression lineage plus the delegates of its members. Age is
inactivity: the newest activity of any member. Archived rows are included,
as in Hermes' own auto-prune. One recent or open member keeps the whole unit.
"""

from __future__ import annotations

import sys

from hermes_admin.profile.lineage import Graph, lineage_unit
from hermes_admin.profile.tasks import DAY, Selection, days_ago


def unit_heads(graph: Graph) -> list[str]:
    """Sessions that start a unit: not a compression continuation, not the delegate of an existing row."""
    heads = []
    for sid, row in graph.rows.items():
        if row.delegate_from and (row.delegate_from in graph.rows or row.parent_id in graph.rows):
            continue  # part of its parent's unit
        if graph.compression_parent(sid) is None:
            heads.append(sid)
    return sorted(heads)


def why_kept(graph: Graph, ids: tuple[str, ...], cutoff: float, live: set[str], now: float) -> str | None:
    for sid in ids:
        row = graph.rows[sid]
        if row.ended_at is None:
            return f"{sid} is open"
        if sid in live:
            return f"{sid} is live (lock or lease)"
        if row.pinned:
            return f"{sid} is pinned"
    newest = max(graph.rows[sid].last_activity for sid in ids)
    if newest >= cutoff:
        return f"active {days_ago(now, newest)}"
    return None


def select(graph: Graph, retention_days: float, now: float, live: set[str] = frozenset()) -> Selection:
    cutoff = now - retention_days * DAY
    chosen = Selection()
    for head in unit_heads(graph):
        unit = lineage_unit(graph, head)
        why = why_kept(graph, unit.ids, cutoff, live, now)
        if why:
            why = sys.intern(why)  # a few hundred distinct texts over tens of thousands of rows
            for sid in unit.ids:
                chosen.kept[sid] = why
            continue
        newest = max(graph.rows[sid].last_activity for sid in unit.ids)
        unit.rule = sys.intern(
            f"every member ended, last active {days_ago(now, newest)} (retention {retention_days:g} days)")
        chosen.units.append(unit)
    return chosen


def recheck(retention_days: float, now: float):
    """The same rule, on the rows as they are inside the deleting transaction."""
    cutoff = now - retention_days * DAY

    def check(unit, fresh) -> str | None:
        rows = [fresh[i] for i in unit.ids if i in fresh]
        for row in rows:
            if row.ended_at is None:
                return f"{row.id} was reopened"
            if row.pinned:
                return f"{row.id} was pinned"
        if rows and max(r.last_activity for r in rows) >= cutoff:
            return "became active again"
        return None
    return check

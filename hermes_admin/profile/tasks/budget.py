"""A size budget (`max_store_mb`): over it after the usual tasks, the oldest eligible units go.

Eligible is what retention could ever take, whatever its window: every member ended, unpinned, not
live, and none active within `min_keep_days` (7 by default). They are offered oldest first (by their
newest activity); the task takes them until their text covers the excess (a deleted row's FTS5
traces stay until the index's merges, so the size right after a delete says little), or nothing
eligible is left. Reason `prune`, with exports and events, as any purge.
"""

from __future__ import annotations

import sys

from hermes_admin.profile.lineage import Graph, lineage_unit
from hermes_admin.profile.tasks import DAY, Selection, days_ago
from hermes_admin.profile.tasks.retention import unit_heads


def why_kept(rows, live: set[str], cutoff: float, now: float) -> str | None:
    for row in rows:
        if row.ended_at is None:
            return f"{row.id} is open"
        if row.id in live:
            return f"{row.id} is live (lock or lease)"
        if row.pinned:
            return f"{row.id} is pinned"
    newest = max(r.last_activity for r in rows)
    return f"active {days_ago(now, newest)} (within min_keep_days)" if newest >= cutoff else None


def select(graph: Graph, max_mb: float, min_keep_days: float, now: float, live: set[str] = frozenset()) -> Selection:
    """Every eligible unit, oldest first; the caller takes as many as the store needs."""
    cutoff = now - min_keep_days * DAY
    chosen = Selection()
    aged = []
    for head in unit_heads(graph):
        unit = lineage_unit(graph, head)
        rows = [graph.rows[sid] for sid in unit.ids]
        why = why_kept(rows, live, cutoff, now)
        if why:
            for sid in unit.ids:
                chosen.kept[sid] = sys.intern(why)
            continue
        newest = max(r.last_activity for r in rows)
        unit.rule = f"oldest while over max_store_mb {max_mb:g}: last active {days_ago(now, newest)}"
        aged.append((newest, head, unit))
    chosen.units = [unit for _, _, unit in sorted(aged, key=lambda item: item[:2])]
    return chosen


def recheck(min_keep_days: float, now: float):
    """The same rule inside the deleting transaction."""
    cutoff = now - min_keep_days * DAY

    def check(unit, fresh) -> str | None:
        rows = [fresh[i] for i in unit.ids if i in fresh]
        return why_kept(rows, set(), cutoff, now) if rows else None
    return check

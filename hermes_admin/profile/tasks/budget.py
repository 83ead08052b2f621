"""A size budget (`max_store_mb`): over it after the usual tasks, the oldest eligible units go.

Eligible is what retention could ever take, whatever its window: every member ended, unpinned, not
live, and none active within `min_keep_days` (7 by default). They are offered oldest first (by their
newest activity); the task takes them until their text covers the excess (a deleted row's FTS5
traces stay until the index's merges, so the size right after a delete says little), or nothing
eligible is left. Reason `prune`, with exports and events, as any purge.
"""

from __future__ import annotations

import sys
from typing import Iterable

from hermes_admin.profile.lineage import Graph, Unit, lineage_unit
from hermes_admin.profile.tasks import DAY, Rule, Selection, days_ago
from hermes_admin.profile.tasks.retention import unit_heads

# A unit's text weighs this many times over in the store: the row and its two FTS5 indexes (real stores
# measure more, 6.6x in #110589 with everything else; what the budget counts on is the text's share).
TEXT_WEIGHT = 3


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
        aged.append(unit)
    chosen.units = sorted(aged, key=lambda unit: age(graph, unit))
    return chosen


def age(graph: Graph, unit: Unit) -> tuple[float, str]:
    """The order units are offered in, oldest first: by the newest activity of any member, then by id.
    A key that holds across the store's parts (the pass sorts what every part offered by it)."""
    return max(graph.rows[i].last_activity for i in unit.ids), unit.session_id


def recheck(min_keep_days: float, now: float):
    """The same rule inside the deleting transaction."""
    cutoff = now - min_keep_days * DAY

    def check(unit, fresh) -> str | None:
        rows = [fresh[i] for i in unit.ids if i in fresh]
        return why_kept(rows, set(), cutoff, now) if rows else None
    return check


def rule(policy, now: float) -> Rule:
    limit, keep = policy.max_store_mb, policy.min_keep_days
    return Rule(lambda graph, live: select(graph, limit, keep, now, live), recheck(keep, now))


def weight_mb(text_bytes: int) -> float:
    """What this much message text weighs in the store, in MB (the unit max_store_mb counts in: 1e6)."""
    return TEXT_WEIGHT * text_bytes / 1e6


def covering(offered: Iterable[tuple[Unit, int]], planned_mb: float, max_mb: float) -> list[Unit]:
    """The budget's decision: of the units offered oldest first, each with the bytes of its messages'
    text, the first ones whose weight (`weight_mb`) covers how far the store's planned content
    (`planned_mb`) is over `max_mb`; all of them when they do not. Nothing when it is not over.

    Deleted rows leave traces in the FTS5 indexes until their merges, so the store's size right after
    a delete says little: the decision is made on the text before anything goes, and the next run
    looks again. `offered` is read only as far as needed (the caller sums the text a part at a time)."""
    over, taken, total = planned_mb - max_mb, [], 0.0
    for unit, text_bytes in offered:
        if total >= over:
            break
        total += weight_mb(text_bytes)
        taken.append(unit)
    return taken

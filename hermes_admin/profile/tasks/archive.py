"""Auto-archive for inactivity (silent: no event).

Unarchived, unpinned lineages whose newest activity is older than
`auto_archive_days`; open sessions included, as Hermes does it. The whole
compression lineage flips to `archived = 1` (and, where the store has the
column, `auto_archived = 1`: Hermes un-hides such a lineage when it is resumed).
A lineage a live Hermes process is at work on is not idle, and stays.
"""

from __future__ import annotations

from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.tasks import DAY, Rule, Selection, days_ago
from hermes_admin.profile.tasks.retention import unit_heads


def select(graph: Graph, idle_days: float, now: float, live: set[str] = frozenset()) -> Selection:
    cutoff = now - idle_days * DAY
    chosen = Selection()
    for head in unit_heads(graph):
        members = graph.lineage(head)
        rows = [graph.rows[sid] for sid in members]
        if all(r.archived for r in rows):
            continue
        newest = max(r.last_activity for r in rows)
        if any(r.pinned for r in rows):
            why = "pinned"
        elif newest >= cutoff:
            why = None  # active: nothing to say about every active session
        elif any(r.id in live for r in rows):
            why = "idle, but live (lock or lease)"
        else:
            chosen.units.append(Unit(head, members, f"idle since {days_ago(now, newest)} "
                                                    f"(auto-archive after {idle_days:g} days)"))
            continue
        if why:
            for sid in members:
                chosen.kept[sid] = why
    return chosen


def rule(policy, now: float) -> Rule:
    days = policy.auto_archive_days
    return Rule(lambda graph, live: select(graph, days, now, live))

"""Retention purge (reason `prune`): whole units, every member ended, unpinned, not live, old.

A unit is a compression lineage plus the delegates of its members. Age is
inactivity: the newest activity of any member. Archived rows are included,
as in Hermes' own auto-prune. One recent or open member keeps the whole unit.

Each member is held to its own source's window (`source_retention_days`, else
`retention_days`). A row closed because it was stale (`startup_orphan_reap`, by
Hermes or by our close_stale task) ages from its closing, as in Hermes, so it
waits one further window before it goes; `stale_grace_days` shortens that wait.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from hermes_admin.profile.lineage import Graph, lineage_unit
from hermes_admin.profile.tasks import DAY, Rule, Selection, days_ago

REAPED = "startup_orphan_reap"  # the end_reason of a row closed because its process was gone


@dataclass(frozen=True)
class Windows:
    """How long a session stays after its last activity: per source, else `days`."""

    days: float
    by_source: dict = field(default_factory=dict)  # source -> days (source_retention_days)
    stale_grace_days: float | None = None  # a stale-closed row's wait after its closing (None: its window)

    def of(self, source: str) -> float:
        return self.by_source.get(source, self.days)

    def aged_since(self, row) -> float:
        """When the row's age starts: its last activity; a stale-closed row's, its closing, less what
        `stale_grace_days` takes off the further window it waits."""
        if row.end_reason == REAPED and row.ended_at is not None:
            window = self.of(row.source)
            grace = window if self.stale_grace_days is None else min(self.stale_grace_days, window)
            return max(row.last_activity, row.ended_at - (window - grace) * DAY)
        return row.last_activity

    def due(self, row, now: float) -> bool:
        return self.aged_since(row) < now - self.of(row.source) * DAY

    def rule(self, rows) -> str:
        """The windows that applied to these rows, as the report names them."""
        own = sorted({f"{r.source} {self.by_source[r.source]:g} days" for r in rows if r.source in self.by_source})
        named = [f"retention {self.days:g} days"] if any(r.source not in self.by_source for r in rows) else []
        named += [f"source_retention_days: {', '.join(own)}"] if own else []
        if any(r.end_reason == REAPED for r in rows):
            named.append("closed as stale: aged from its closing")
        return "; ".join(named)


def unit_heads(graph: Graph) -> list[str]:
    """Sessions that start a unit: not a compression continuation, not the delegate of an existing row."""
    heads = []
    for sid, row in graph.rows.items():
        if row.delegate_from and (row.delegate_from in graph.rows or row.parent_id in graph.rows):
            continue  # part of its parent's unit
        if graph.compression_parent(sid) is None:
            heads.append(sid)
    return sorted(heads)


def why_kept(rows, windows: Windows, live: set[str], now: float) -> str | None:
    """Why a unit of these rows stays, in the report's words; None: it may go. One rule for the selector
    (rows as read) and its re-check in the deleting transaction (rows as they are then)."""
    for row in rows:
        if row.ended_at is None:
            return f"{row.id} is open"
        if row.id in live:
            return f"{row.id} is live (lock or lease)"
        if row.pinned:
            return f"{row.id} is pinned"
    recent = [row for row in rows if not windows.due(row, now)]
    if recent:
        newest = max(recent, key=windows.aged_since)
        since = windows.aged_since(newest)
        return (f"closed as stale {days_ago(now, since)}" if since != newest.last_activity
                else f"active {days_ago(now, since)}")
    return None


def _windows(retention: float | Windows) -> Windows:
    return retention if isinstance(retention, Windows) else Windows(retention)


def select(graph: Graph, retention_days: float | Windows, now: float, live: set[str] = frozenset()) -> Selection:
    windows = _windows(retention_days)
    chosen = Selection()
    for head in unit_heads(graph):
        unit = lineage_unit(graph, head)
        rows = [graph.rows[sid] for sid in unit.ids]
        why = why_kept(rows, windows, live, now)
        if why:
            why = sys.intern(why)  # a few hundred distinct texts over tens of thousands of rows
            for sid in unit.ids:
                chosen.kept[sid] = why
            continue
        newest = max(r.last_activity for r in rows)
        unit.rule = sys.intern(f"every member ended, last active {days_ago(now, newest)} ({windows.rule(rows)})")
        chosen.units.append(unit)
    return chosen


def recheck(retention_days: float | Windows, now: float):
    """The selector's rule (why_kept), on the rows as they are inside the deleting transaction. Live
    rows are the engine's own guard there (store/sql.py: blocked), so none are passed."""
    windows = _windows(retention_days)

    def check(unit, fresh) -> str | None:
        rows = [fresh[i] for i in unit.ids if i in fresh]
        return why_kept(rows, windows, set(), now) if rows else None
    return check


def rule(policy, now: float) -> Rule:
    windows = policy.windows()  # per source, unless the command's --older-than (or filters) replaced them
    return Rule(lambda graph, live: select(graph, windows, now, live), recheck(windows, now))

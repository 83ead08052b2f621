"""Stale open rows (silent: closing deletes nothing, so no event), as Hermes' own maintenance closes them.

A process that died (a crashed cron run, a subagent, a one-shot CLI) leaves its session open for
ever, and retention only takes ended sessions. Hermes closes the open rows of its automated
sources idle for a whole retention window, unpinned and not live, with `end_reason =
'startup_orphan_reap'`; they then age one further window before a purge may take them
(retention.Windows). Messaging and UI sources are never closed: a person's chat may be open for
months. Each row is its own unit: what is closed is that row, not its lineage.
"""

from __future__ import annotations

import sys

from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.tasks import Rule, Selection, days_ago
from hermes_admin.profile.tasks.retention import REAPED, Windows

# Hermes' sources that no person keeps open: the only ones closed when idle
AUTOMATED = frozenset({"cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered"})


def why_kept(row, windows: Windows, live: set[str], now: float) -> str | None:
    if row.source not in AUTOMATED:
        return f"open, and {row.source!r} is not an automated source"
    if row.pinned:
        return "open and pinned"
    if row.id in live:
        return "open and live (lock or lease)"
    if not windows.due(row, now):
        return f"open, active {days_ago(now, row.last_activity)}"
    return None


def select(graph: Graph, windows: Windows | float, now: float, live: set[str] = frozenset()) -> Selection:
    windows = windows if isinstance(windows, Windows) else Windows(windows)
    chosen = Selection()
    for sid in sorted(graph.rows):
        row = graph.rows[sid]
        if row.ended_at is not None:
            continue
        why = why_kept(row, windows, live, now)
        if why:
            chosen.kept[sid] = sys.intern(why)
            continue
        chosen.units.append(Unit(sid, (sid,), sys.intern(
            f"open {row.source} session idle since {days_ago(now, row.last_activity)} "
            f"(window {windows.of(row.source):g} days): closed as {REAPED}")))
    return chosen


def recheck(windows: Windows | float, now: float):
    """The same rule on the row as it is inside the closing transaction."""
    windows = windows if isinstance(windows, Windows) else Windows(windows)

    def check(unit, fresh) -> str | None:
        row = fresh.get(unit.session_id)
        if row is None or row.ended_at is not None:
            return "no longer open"
        return why_kept(row, windows, set(), now)
    return check


def rule(policy, now: float) -> Rule:
    windows = policy.windows()
    return Rule(lambda graph, live: select(graph, windows, now, live), recheck(windows, now))

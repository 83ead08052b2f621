"""Maintenance tasks: each a small module that *selects*, as a pure function.

`select(rows, policy, now, ...) -> Selection`: what to act on, each unit with
the rule that chose it, and for the sessions it looked at and kept, why. No
store access, no clock: the caller passes rows and `now`, so every rule is a
table of cases in the tests. The engine does the acting.

`rule(policy, now) -> Rule`: the module's selection and its re-check bound to
the policy's values, which is what the task's record in
profile/actions/maintenance.py names (the policy is profile/policy.Policy,
read by its attributes: it imports this floor, so this floor does not import it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hermes_admin.profile.lineage import Graph, Unit


@dataclass
class Selection:
    units: list[Unit] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # session id -> why it was kept
    files: list[str] = field(default_factory=list)  # paths of orphan files (ghost prune only)

    def ids(self) -> set[str]:
        return {i for unit in self.units for i in unit.ids}


@dataclass(frozen=True)
class Rule:
    """A task's rule under one policy and `now`: which units of a graph it picks (the rest kept, each with
    why), and the same rule on the rows as they are inside the transaction that acts."""

    select: Callable[[Graph, set[str]], Selection]
    # engine.decisions.Recheck: (unit, its rows as the transaction reads them) -> why it stays, or None
    recheck: Callable | None = None
    only: str | None = None  # what every unlinked session the rule can pick or keep meets (parts.graph_parts)


DAY = 86400.0  # seconds: policies count days, timestamps are Unix seconds
HOUR = 3600.0  # seconds, for the keys counted in hours


def days_ago(now: float, ts: float) -> str:
    return f"{(now - ts) / DAY:.1f} days ago"

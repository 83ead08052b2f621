"""Maintenance tasks: each a small module that *selects*, as a pure function.

`select(rows, policy, now, ...) -> Selection`: what to act on, each unit with
the rule that chose it, and for the sessions it looked at and kept, why. No
store access, no clock: the caller passes rows and `now`, so every rule is a
table of cases in the tests. The engine does the acting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_admin.profile.lineage import Unit


@dataclass
class Selection:
    units: list[Unit] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # session id -> why it was kept
    files: list[str] = field(default_factory=list)  # paths of orphan files (ghost prune only)

    def ids(self) -> set[str]:
        return {i for unit in self.units for i in unit.ids}


DAY = 86400.0  # seconds: policies count days, timestamps are Unix seconds
HOUR = 3600.0  # seconds, for the keys counted in hours


def days_ago(now: float, ts: float) -> str:
    return f"{(now - ts) / DAY:.1f} days ago"

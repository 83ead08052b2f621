"""What opening and closing an engine did, returned as values: the caller reads these, never the
engine's attributes (docs/design.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_admin.hook_failures import HookFailure
from hermes_admin.problems import Problem
from hermes_admin.results import Result


@dataclass(frozen=True)
class Opened:
    """What opening did before any call: the config's warnings (each names its file and key), the
    units an interrupted split delete left, finished or restored, and the plugin failures met
    delivering what an earlier run left in the outbox."""

    warnings: tuple[Problem, ...] = ()
    recovered: tuple[Result, ...] = ()
    replayed: tuple[HookFailure, ...] = ()


@dataclass(frozen=True)
class Closed:
    """What closing did: what the collaborators set aside or left for the next run (`notes`, in the
    order met, said even when closing failed), the old exports retention removed (a dry run: would
    remove), the free pages left waiting for a moment nobody holds the store, and this run's export
    file when it is still there (an export kept 0 days is gone once the run is done)."""

    notes: tuple[str, ...] = ()
    exports_removed: tuple[dict, ...] = ()
    reclaim_waits: tuple[dict, ...] = ()
    export: str | None = None

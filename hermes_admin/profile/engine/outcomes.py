"""What opening and closing an engine did, returned as values: the caller reads these, never the
engine's attributes (docs/design.md §5)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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


class Interrupted(Exception):
    """An engine call that failed after doing part of its work: `partial` is what it did (what
    committed before the failure, reported as done); `failure`, what stopped it, raised again as it
    was where the partial outcome is folded into a report (`fold`)."""

    def __init__(self, partial: Result, failure: Exception):
        super().__init__(f"{type(failure).__name__}: {failure}")
        self.partial, self.failure = partial, failure


@contextmanager
def carried(outcome: Result) -> Iterator[Result]:
    """An engine call's own outcome, filled as its transactions commit; a failure is raised as
    Interrupted carrying it (a signal's KeyboardInterrupt passes as it is: the run ends there)."""
    try:
        yield outcome
    except Interrupted as inner:  # a call inside this one (a batch's): both outcomes, one failure
        outcome.absorb(inner.partial)
        raise Interrupted(outcome, inner.failure) from inner.failure
    except Exception as exc:
        raise Interrupted(outcome, exc) from exc


def fold(result: Result, call: Callable[[], Any]) -> Any:
    """`call()` (one engine call) and what it did folded into `result`, the caller's report; returns
    what the call returned (what it did, or a pair: what it did and a value of its own). After a
    failure, what it did before the failure is folded, then the failure raised as it was (its own
    type, for the caller's handling)."""
    try:
        returned = call()
    except Interrupted as exc:
        result.absorb(exc.partial)
        failure = exc.failure
    else:
        result.absorb(returned if isinstance(returned, Result) else returned[0])
        return returned
    raise failure

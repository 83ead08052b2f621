"""Named fault points: where crash and fault tests reach into the engine, by name.

The engine says `faults.point("after_commit")` at the moments a crash matters; in production
nothing is armed and a point is one dictionary look-up. A test arms a point by name, with a
callable (a crash, a write of another connection meanwhile, a look at what was decided) or an
exception to raise, instead of patching private methods. The points:

- committed: a paced transaction committed, recorded by its caller, not yet measured (pacer.py);
- after_commit: a paced transaction committed and was measured (pacer.py);
- before_turn: a commit's files and events handed on, the lock about to be left free (pacer.py);
- data_version: the deleting connection about to read `PRAGMA data_version` between
  transactions (turns.py; a rollback journal can answer "database is locked" there);
- split_step_deleted: inside a step of a split delete, its messages deleted, before its commit;
- rows_deleted: inside a delete's transaction, its rows deleted, before its commit;
- before_delivery: events about to go to the plugins (`events=`), their commit durable;
- batch_exported: a batch of units exported, before any of it is deleted (`units=`);
- compared_with_exports: inside a delete's transaction, the units unlike their exports (`why=`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

_armed: dict[str, Callable[..., None]] = {}


def point(name: str, **seen) -> None:
    """A named moment of the engine: whatever a test armed here runs (nothing, in production)."""
    action = _armed.get(name)
    if action is not None:
        action(**seen)


def arm(name: str, action: Callable[..., None] | None = None, raise_: BaseException | None = None) -> None:
    """From now on, `point(name)` calls `action(**seen)` or raises `raise_` (for a process that dies there)."""
    def fire(**seen) -> None:
        if action is not None:
            action(**seen)
        if raise_ is not None:
            raise raise_
    _armed[name] = fire


def disarm(name: str) -> None:
    _armed.pop(name, None)


@contextmanager
def armed(name: str, action: Callable[..., None] | None = None,
          raise_: BaseException | None = None) -> Iterator[None]:
    """`arm` for the length of a `with` block."""
    arm(name, action, raise_)
    try:
        yield
    finally:
        disarm(name)

"""A stop request: set by a signal handler, honoured between transactions.

The daemon's SIGTERM/SIGINT handlers only set this flag (as signal handlers
should: a plain assignment, no lock); the engine checks it between write
transactions, and the task loop between tasks and profiles, so work stops
after the current transaction.
"""

from __future__ import annotations

_requested = False


def request() -> None:
    global _requested
    _requested = True


def requested() -> bool:
    return _requested


def clear() -> None:
    global _requested
    _requested = False

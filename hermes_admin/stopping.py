"""A stop request: set by a signal handler, honoured between transactions.

The daemon's SIGTERM/SIGINT handlers only set this flag (as signal handlers
should: a plain assignment, no lock); the engine checks it between write
transactions, and the task loop between tasks and profiles, so work stops
after the current transaction.
"""

from __future__ import annotations

import time

_requested = False
_at = 0.0  # time.monotonic() of the first request


def request() -> None:
    global _requested, _at
    if not _requested:
        _at = time.monotonic()
    _requested = True


def requested() -> bool:
    return _requested


def requested_at() -> float:
    """When the stop was first asked for (monotonic); meaningful only once requested()."""
    return _at


def clear() -> None:
    global _requested
    _requested = False

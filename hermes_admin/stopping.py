"""A stop request: set by a signal handler, honoured between transactions.

The daemon's SIGTERM/SIGINT handlers only set this flag (as signal handlers
should); the engine checks it between write transactions, and the task loop
between tasks and profiles, so work stops after the current transaction.
"""

from __future__ import annotations

import threading

_requested = threading.Event()


def request() -> None:
    _requested.set()


def requested() -> bool:
    return _requested.is_set()


def clear() -> None:
    _requested.clear()

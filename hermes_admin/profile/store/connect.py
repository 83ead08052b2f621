"""peewee connections to a Hermes store, and the write-transaction helper.

Stores belong to Hermes: live processes share them. So reads use `mode=ro`
URIs, writes take `BEGIN IMMEDIATE` with a short busy timeout and retry the
whole transaction with jitter, and nothing here ever sets `journal_mode`.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import quote

import peewee

T = TypeVar("T")

# Hermes' own writers wait about 1 s in SQLite's busy handler; ours wait less
# and retry the whole transaction instead, so a Hermes writer is never starved.
WRITE_BUSY_TIMEOUT_S = 0.2
READ_BUSY_TIMEOUT_S = 5.0
WRITE_PATIENCE_S = 20.0
SAY_WAIT_S = 2.0  # a wait on the lock this long is told on stderr


def readonly_uri(path: Path) -> str:
    return "file:" + quote(str(Path(path).absolute())) + "?mode=ro"


def open_readonly(path: Path) -> peewee.SqliteDatabase:
    """A read-only connection: cannot write, checkpoint or unlink sidecars."""
    db = peewee.SqliteDatabase(
        readonly_uri(path),
        uri=True,
        timeout=READ_BUSY_TIMEOUT_S,
        pragmas={"query_only": 1},
    )
    db.connect()
    return db


def open_readwrite(path: Path) -> peewee.SqliteDatabase:
    """A write connection: foreign keys on, IMMEDIATE transactions, journal mode untouched.

    Automatic checkpoints are off for this connection only (a per-connection
    setting; the file is not changed): SQLite would run them inside COMMIT, so
    the engine runs PASSIVE checkpoints itself, between transactions.
    """
    db = peewee.SqliteDatabase(
        str(Path(path).absolute()),
        timeout=WRITE_BUSY_TIMEOUT_S,
        lock_type="IMMEDIATE",
        pragmas={"foreign_keys": 1, "wal_autocheckpoint": 0},
    )
    db.connect()
    return db


def open_for_checkpoints(path: Path) -> sqlite3.Connection:
    """A plain connection for the checkpoint thread: no transactions, never waits for a lock.

    Plain sqlite3, not peewee: peewee keeps one connection per thread, and this one is
    opened by the engine and used by the thread it starts. Its checkpoints sync the WAL
    and the database file (`synchronous` FULL, set for this connection only): the
    engine counts on that to make its unsynced commits durable (group_commit.py).
    """
    conn = sqlite3.connect(str(Path(path).absolute()), timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


def write_transaction(
    db: peewee.SqliteDatabase,
    work: Callable[[peewee.SqliteDatabase], T],
    patience_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_busy: Callable[[], None] | None = None,
) -> T:
    """Run `work` inside one `BEGIN IMMEDIATE` transaction, retried whole on lock.

    `work` must be idempotent with respect to a rollback: it is simply run
    again. Jitter as Hermes does it: short waits first, longer ones later.
    """
    patience_s = WRITE_PATIENCE_S if patience_s is None else patience_s  # read now: --lock-wait sets it
    started = time.monotonic()
    said = False
    while True:
        try:
            with db.atomic():
                return work(db)
        except peewee.OperationalError as exc:
            waited = time.monotonic() - started
            if not is_lock_error(exc) or waited >= patience_s:
                raise
            if on_busy is not None:  # someone else writes: the caller paces itself for them
                on_busy()
            if waited >= SAY_WAIT_S and not said:  # never silent: a person or the journal sees why
                print(f"hermes-admin: {db.database}: another process holds the write lock; "
                      f"waiting up to {patience_s:.0f} s", file=sys.stderr, flush=True)
                said = True
            delay = random.uniform(0.02, 0.15) if waited < 2.0 else random.uniform(0.25, 1.0)
            sleep(min(delay, max(0.0, patience_s - waited)))

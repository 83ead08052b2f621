"""peewee connections to a Hermes store, and the write-transaction helper.

Stores belong to Hermes: live processes share them. So reads use `mode=ro`
URIs, writes take `BEGIN IMMEDIATE` with a short busy timeout and retry the
whole transaction with jitter, and nothing here ever sets `journal_mode`.
Every connection, read or write, is made by keep_wal, on the SQLite apsw
brings (3.51.3 or later: without the WAL-reset bug): none of ours ever
checkpoints or deletes the WAL when it closes.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import quote, unquote

import apsw
import peewee
from playhouse.apsw_ext import APSWDatabase

from hermes_admin.lockrecord import command_of
from hermes_admin.holders import write_lock_holder
from hermes_admin.profile.store.keep_wal import READ_ONLY, READ_WRITE
from hermes_admin.profile.store.keep_wal import connect as keep_wal_connect

T = TypeVar("T")

# Hermes' own writers wait about 1 s in SQLite's busy handler; ours wait less
# and retry the whole transaction instead, so a Hermes writer is never starved.
WRITE_BUSY_TIMEOUT_S = 0.2
READ_BUSY_TIMEOUT_S = 5.0  # a read waits only for a checkpoint's or recovery's short locks
# How long another writer may hold the write lock without any progress before a profile stops
# (exit 3), where the opener says nothing (--lock-wait and the policy's `lock_wait` are passed to
# every open): a nightly run can wait minutes, and Hermes' own FTS optimize of a GB store holds it ~15 s.
DEFAULT_LOCK_WAIT_S = 300.0
# A WAL file a big transaction blew up (Hermes' FTS optimize writes the whole index into it) stays
# that size until its last connection closes. When a commit of ours is the first since the WAL
# started over, SQLite cuts the file back to our journal_size_limit (set per connection; the file
# and its journal mode are not changed): to 4 MiB, what 1000 pages take (the automatic checkpoint's
# trigger), by at most 64 MiB a commit, since the cut is made with the write lock held (about 15 ms
# for 64 MiB on ext4).
WAL_SIZE_LIMIT = 4 * 1024 * 1024
WAL_CUT_STEP = 64 * 1024 * 1024
# In a rollback journal, a transaction whose changed pages outgrow the page cache writes some of
# them into the database file before its COMMIT (a "spill"), which takes the exclusive lock: while
# any reader holds the store (one of Hermes', our export's), each spilling statement waits out the
# whole busy timeout with the write lock held (and Hermes' writer waiting for it), then goes on
# without spilling. Our transactions are short (pacer.py): with SQLite's own 2 MB cache, 3 of 1,387
# of them spilled on a real store's purge. They keep their pages in memory up to this many (16 MiB at
# Hermes' 4 KiB pages). A VACUUM, which changes every page, spills as SQLite's default does
# (pragmas.vacuum).
SPILL_PAGES = 4096
PATIENCE_CAP = 4  # progress or not, a wait ends after this many lock waits
SAY_WAIT_S = 2.0  # a wait on the lock this long is told on stderr


class StoreDatabase(APSWDatabase):
    """A connection to a Hermes store on which every statement outside our write transactions waits
    for a lock the way the write transaction does (docs/design.md §6).

    In a rollback journal (Hermes 0.20+ on any SQLite before 3.51.3) any statement, a read or
    `PRAGMA data_version` included, can meet "database is locked" while another connection commits
    or holds the lock; in WAL only a checkpoint or recovery does that. SQLite's own wait (the busy
    timeout) is kept short; past it the statement is tried again with jitter while the holder makes
    progress, up to `lock_wait_s` without (then WriteLockHeld, exit 3, naming the holder). Inside a
    transaction a lock error goes up: write_transaction retries the whole transaction.
    """

    def __init__(self, database, flags: int = READ_WRITE, lock_wait_s: float | None = None, **kwargs):
        self.flags = flags
        self.lock_wait_s = DEFAULT_LOCK_WAIT_S if lock_wait_s is None else lock_wait_s  # 0: no wait
        super().__init__(database, **kwargs)

    def _connect(self):
        """apsw's connection, told to keep the WAL on close before it reads anything (keep_wal.py)."""
        conn = keep_wal_connect(self.database, self.flags, int((self._timeout or 0) * 1000))
        try:
            self._add_conn_hooks(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def execute_sql(self, sql, params=None):
        if self.in_transaction():
            return super().execute_sql(sql, params)
        return patiently(self, lambda: super(StoreDatabase, self).execute_sql(sql, params))


def patiently(db: peewee.SqliteDatabase, statement: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
    """`statement()`, tried again on a lock error while the lock's holder makes progress."""
    waiting: _Wait | None = None
    while True:
        try:
            return statement()
        except (peewee.OperationalError, apsw.BusyError, apsw.LockedError) as exc:
            if not is_lock_error(exc):
                raise
            if waiting is None:
                waiting = _Wait(_store_path(db), _patience_of(db))
            if waiting.over():
                raise WriteLockHeld(waiting.why()) from None
            waiting.tell(db)
            sleep(waiting.pause())


def _patience_of(db: peewee.SqliteDatabase) -> float:
    """The connection's `lock_wait_s` (0: no wait), given when it was opened; a plain peewee
    connection (a test's) has none and waits the default."""
    given = getattr(db, "lock_wait_s", None)
    return DEFAULT_LOCK_WAIT_S if given is None else given


def _store_path(db: peewee.SqliteDatabase) -> Path:
    """The store's path, from a plain path or a `file:…?mode=ro` URI."""
    name = str(db.database)
    if name.startswith("file:"):
        name = unquote(name[len("file:"):].split("?", 1)[0])
    return Path(name)


def readonly_uri(path: Path) -> str:
    return "file:" + quote(str(Path(path).absolute())) + "?mode=ro"


def open_readonly(path: Path, shared: bool = False, lock_wait_s: float | None = None) -> peewee.SqliteDatabase:
    """A read-only connection: cannot write, checkpoint or unlink sidecars. `shared`: one connection
    for every thread (the engine's export thread and its own), where peewee keeps one per thread.
    `lock_wait_s`: how long a read waits, without progress, for a store another process holds
    (None: DEFAULT_LOCK_WAIT_S)."""
    db = StoreDatabase(
        readonly_uri(path),
        flags=READ_ONLY,
        lock_wait_s=lock_wait_s,
        timeout=READ_BUSY_TIMEOUT_S,
        pragmas={"query_only": 1},
        thread_safe=not shared,  # apsw lets threads share a connection (each call holds its mutex)
    )
    db.connect()
    return db


def open_readwrite(path: Path, lock_wait_s: float | None = None) -> peewee.SqliteDatabase:
    """A write connection: foreign keys on, IMMEDIATE transactions, journal mode untouched.

    Automatic checkpoints are off for this connection only (a per-connection
    setting; the file is not changed): SQLite would run them inside COMMIT, so
    the engine runs PASSIVE checkpoints itself, between transactions. So is the
    spilling of a transaction's pages before its commit, up to SPILL_PAGES.
    """
    db = StoreDatabase(
        str(Path(path).absolute()),
        timeout=WRITE_BUSY_TIMEOUT_S,
        lock_type="IMMEDIATE",
        pragmas={"foreign_keys": 1, "wal_autocheckpoint": 0, "cache_spill": SPILL_PAGES},
        lock_wait_s=lock_wait_s,  # write_transaction's patience too
    )
    db.connect()
    return db


def open_for_checkpoints(path: Path) -> apsw.Connection:
    """A plain connection for the checkpoint thread: no transactions, never waits for a lock.

    Plain apsw, not peewee: peewee keeps one connection per thread, and this one is
    opened by the engine and used by the thread it starts. Its checkpoints sync the WAL
    and the database file (`synchronous` FULL, set for this connection only): the
    engine counts on that to make its unsynced commits durable (group_commit.py).
    """
    conn = keep_wal_connect(str(Path(path).absolute()))
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


class WriteLockHeld(peewee.OperationalError):
    """Another process held the store's write lock past our patience: the profile stops there, with
    what it did reported (exit 3, "lock held"); the next run goes on from there. The message names
    the holder when /proc/locks does."""


def write_transaction(
    db: peewee.SqliteDatabase,
    work: Callable[[peewee.SqliteDatabase], T],
    patience_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_busy: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Run `work` inside one `BEGIN IMMEDIATE` transaction, retried whole on lock.

    `work` must be idempotent with respect to a rollback: it is simply run again. Another
    writer is waited out as long as it makes progress (_Wait), up to `patience_s` (else the
    connection's `lock_wait_s`) without any. Jitter as Hermes does it: short waits first,
    longer ones later.
    """
    waiting: _Wait | None = None
    while True:
        _limit_wal(db)
        try:
            with db.atomic():
                return work(db)
        except peewee.OperationalError as exc:
            if not is_lock_error(exc):
                raise
            if waiting is None:
                waiting = _Wait(_store_path(db), patience_s if patience_s is not None else _patience_of(db), clock)
            if waiting.over():
                raise WriteLockHeld(waiting.why()) from None
            if on_busy is not None:  # someone else writes: the caller paces itself for them
                on_busy()
            waiting.tell(db)
            sleep(waiting.pause())


def read_transaction(db: peewee.SqliteDatabase, work: Callable[[peewee.SqliteDatabase], T]) -> T:
    """Run `work` inside one read transaction: its statements see the store as of one moment, as a
    write transaction's do. Tried again whole on a lock error while the holder makes progress
    (`patiently`). Kept as short as one write transaction of ours: in a rollback journal a reader
    holds off every writer's commit, Hermes' included."""
    def once() -> T:
        with db.atomic():
            return work(db)

    return patiently(db, once)


def _limit_wal(db: peewee.SqliteDatabase) -> None:
    """Set how far SQLite may cut the WAL file back at our next commit (see WAL_SIZE_LIMIT)."""
    try:
        size = os.stat(f"{db.database}-wal").st_size
    except OSError:
        return
    db.execute_sql(f"PRAGMA journal_size_limit = {max(WAL_SIZE_LIMIT, size - WAL_CUT_STEP)}")


class _Wait:
    """A wait for another writer. Progress is what `stat` shows without opening anything: the
    WAL or the database file growing or being written (Hermes' FTS optimize writes as it goes,
    a checkpoint writes the database file). The wait ends after `patience` seconds without any,
    or after PATIENCE_CAP of them in all, progress or not."""

    def __init__(self, store: Path, patience: float, clock: Callable[[], float] = time.monotonic):
        self.store, self.patience, self.clock = store, patience, clock
        self.started = self.moved = clock()
        self.seen = self._look()
        self.said = False

    def _look(self) -> tuple:
        looks = []
        for path in (self.store, Path(f"{self.store}-wal")):
            try:
                st = os.stat(path)
                looks.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                looks.append(None)
        return tuple(looks)

    def waited(self) -> float:
        return self.clock() - self.started

    def pause(self) -> float:
        """Jitter as Hermes does it: short waits first, longer ones later."""
        return random.uniform(0.02, 0.15) if self.waited() < 2.0 else random.uniform(0.25, 1.0)

    def tell(self, db) -> None:
        """A wait this long is said once on stderr: never silent, a person or the journal sees why."""
        if self.waited() >= SAY_WAIT_S and not self.said:
            print(f"hermes-admin: {self.store}: another process holds the write lock; waiting while it "
                  f"makes progress, up to {self.patience:g} s without progress (lock_wait)", file=sys.stderr, flush=True)
            self.said = True

    def over(self) -> bool:
        now, look = self.clock(), self._look()
        if look != self.seen:
            self.seen, self.moved = look, now
        return now - self.moved >= self.patience or now - self.started >= PATIENCE_CAP * self.patience

    def why(self) -> str:
        holder = write_lock_holder(self.store)
        who = f"pid {holder} ({command_of(holder) or '?'})" if holder else "another process"
        still = self.clock() - self.moved
        return (f"{self.store}: {who} held the write lock for {self.waited():.0f} s, the last {still:.0f} s "
                f"without progress (lock_wait: {self.patience:g} s); stopped there, the rest is left for "
                f"the next run")

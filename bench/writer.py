"""A live Hermes process during the benchmark (run inside the venv of the release that wrote the store).

Usage: python writer.py STORE STOP_FILE OUT_JSON [OPTIMIZE_AFTER]

OPTIMIZE_AFTER: Hermes' own FTS maintenance runs after that many appends of this writer (its
count of writes starts that far short of the next multiple of its cadence), so that it falls
inside a short run.

Appends one message every 20 ms through the real SessionDB to a live session,
until STOP_FILE exists; records every failure and, for each append:
- its wait: the time it spent on another connection's lock, that is
  * in SQLite's busy handler, whichever statement of the append met the lock:
    `BEGIN IMMEDIATE` (the write lock), a statement inside the transaction
    (a cache spill) and `COMMIT` (in a rollback journal, DELETE mode, the
    commit waits for every reader's SHARED lock to go: our reads block it);
    the handler is SQLite's own default one (the same delays, the same
    timeout the connection was given), installed through the C API so that
    its sleeps can be timed;
  * and Hermes' own retries after a statement gave up with "database is
    locked" (0.19.0 retries its BEGIN; 0.22.2 rolls back and retries the
    whole write, whether BEGIN or COMMIT gave up, with time-based patience:
    60 s for a transcript append), from the failure to the next BEGIN;
  as the issue defines a wait. Time in SQLite's own work (its statements,
  fsyncs, the commit's FTS5 flush) is not a wait;
- its whole time, which also holds Hermes' own work inside the append (its
  statements, its commit's FTS5 flush and merges, and the WAL checkpoints its
  commits run): reported beside the waits. The wait at COMMIT is reported
  apart too (`max_commit_wait_ms`).

Hermes' own maintenance is not a wait on us: 0.19.0 rewrites its FTS indexes
('optimize') inside every 1000th write of its own, 0.22.2 runs a bounded FTS
merge every 1000th write, and both run a PASSIVE WAL checkpoint every 50th. No
lock time met inside them counts as the append's wait; the appends holding an
optimize or a merge are reported apart ("own maintenance"), as their whole
time is Hermes' work, not a lock held by others.
"""

import ctypes
import ctypes.util
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from hermes_state import SessionDB

# SQLite's default busy handler (sqliteDefaultBusyCallback, main.c): these delays, capped by the timeout
DELAYS_MS = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)
TOTALS_MS = (0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228)
BUSY_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)


def _lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


class Timed:
    """Hermes' writer connection, with the time its statements spent waiting on another connection's
    lock (SQLite's busy handler) and the time between a statement that gave up and Hermes' next BEGIN."""

    def __init__(self, conn, store: Path):
        self._conn = conn
        self.waited = 0.0  # this append's wait
        self.commit_waited = 0.0  # of which at COMMIT
        self.own = False  # inside Hermes' own maintenance: what it meets there is not the append's wait
        self._failed_at = None  # a statement gave up: Hermes sleeps, then tries again
        self._in_commit = False
        self._timeout_ms = conn.execute("PRAGMA busy_timeout").fetchone()[0]
        self._lib = ctypes.CDLL(ctypes.util.find_library("sqlite3"))
        self._lib.sqlite3_libversion.restype = ctypes.c_char_p
        if self._lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            raise RuntimeError("the sqlite3 module is not linked to the system's libsqlite3: cannot time its waits")
        # pysqlite_Connection: PyObject_HEAD, then the sqlite3 handle
        self._db = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        self._lib.sqlite3_db_filename.restype = ctypes.c_char_p
        self._lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        name = self._lib.sqlite3_db_filename(self._db, b"main")
        if not name or not os.path.samefile(name.decode(), store):
            raise RuntimeError("could not find Hermes' connection handle: cannot time its waits")
        self._lib.sqlite3_busy_handler.argtypes = [ctypes.c_void_p, BUSY_HANDLER, ctypes.c_void_p]
        self._handler = BUSY_HANDLER(self._busy)  # kept: the C side holds only a pointer
        self._install()

    def _install(self) -> None:
        if self._lib.sqlite3_busy_handler(self._db, self._handler, None) != 0:
            raise RuntimeError("sqlite3_busy_handler failed")

    def _busy(self, _arg, count: int) -> int:
        """SQLite's default busy handler, its sleeps timed."""
        if count < len(DELAYS_MS):
            delay, prior = DELAYS_MS[count], TOTALS_MS[count]
        else:
            delay, prior = DELAYS_MS[-1], TOTALS_MS[-1] + DELAYS_MS[-1] * (count - len(DELAYS_MS) + 1)
        if prior + delay > self._timeout_ms:
            delay = self._timeout_ms - prior
            if delay <= 0:
                return 0
        started = time.monotonic()
        time.sleep(delay / 1000)
        if not self.own:
            slept = time.monotonic() - started
            self.waited += slept
            if self._in_commit:
                self.commit_waited += slept
        return 1

    def _call(self, method, sql, *args):
        if self._failed_at is not None and sql.lstrip().upper().startswith("BEGIN"):
            if not self.own:
                self.waited += time.monotonic() - self._failed_at
            self._failed_at = None
        try:
            return method(sql, *args)
        except sqlite3.Error as exc:
            if _lock_error(exc) and not self.own:
                self._failed_at = time.monotonic()
            raise

    def execute(self, sql, *args):
        pragma = sql.strip().lower().replace(" ", "")
        if pragma.startswith("pragmabusy_timeout"):  # the timeout our handler applies, not SQLite's own handler
            if "=" in pragma:
                self._timeout_ms = int(pragma.split("=", 1)[1].rstrip(";"))
            return self._conn.execute("SELECT ?", (self._timeout_ms,))
        return self._call(self._conn.execute, sql, *args)

    def executemany(self, sql, *args):
        return self._call(self._conn.executemany, sql, *args)

    def commit(self):
        self._in_commit = True
        try:
            return self._call(lambda _sql: self._conn.commit(), "COMMIT")
        finally:
            self._in_commit = False

    def settle(self) -> None:
        """The append is over: a retry that never came (Hermes gave up) still waited until now."""
        if self._failed_at is not None:
            self.waited += time.monotonic() - self._failed_at
            self._failed_at = None

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _p99(values):
    return round(sorted(values)[int(len(values) * 0.99)] * 1000, 1) if values else None


def _ms(values):
    return round(max(values) * 1000, 1) if values else None


def main() -> None:
    store, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    db = SessionDB(store)
    real = db._conn
    conn = db._conn = Timed(real, store)
    journal = real.execute("PRAGMA journal_mode").fetchone()[0]
    maintained = []  # Hermes' own FTS optimize or merge ran in this append

    def own(name, marks):
        """Run Hermes' own maintenance step `name` with its lock time left out of the append's wait."""
        original = getattr(db, name, None)
        if original is None:
            return

        def wrapped(*args, **kwargs):
            conn.own = True
            try:
                return original(*args, **kwargs)
            finally:
                conn.own = False
                if marks:
                    maintained.append(name)

        setattr(db, name, wrapped)

    own("_try_optimize_fts", True)  # 0.19.0: 'optimize' every 1000th write
    own("_try_incremental_merge_fts", True)  # 0.22.2: a bounded 'merge' every 1000th write
    own("_try_wal_checkpoint", False)  # both: PASSIVE checkpoint every 50th write
    waits, commit_waits, appends, own_ms, spans, failures, errors, slowest = [], [], [], [], [], 0, [], []
    every = getattr(SessionDB, "_OPTIMIZE_EVERY_N_WRITES", 0) or getattr(SessionDB, "_FTS_MERGE_EVERY_N_WRITES", 0)
    if len(sys.argv) > 4 and every:
        db._write_count = every - int(sys.argv[4])
    Path(str(out) + ".ready").write_text("1")
    while not stop.exists():
        conn.waited, conn.commit_waited, conn._failed_at = 0.0, 0.0, None
        maintained.clear()
        started = time.monotonic()
        try:
            db.append_message("bench-live", "user", "tick")
        except Exception as exc:  # Hermes gave up: a failure a user would see
            failures += 1
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        conn.settle()
        elapsed = time.monotonic() - started
        if maintained:  # when, on the system-wide monotonic clock the bench's own timings use
            own_ms.append(elapsed)
            spans.append((started, started + elapsed))
        else:
            waits.append(conn.waited)
            commit_waits.append(conn.commit_waited)
            appends.append(elapsed)
        slowest.append((round(elapsed * 1000, 1), round(conn.waited * 1000, 1), getattr(db, "_write_count", 0)))
        time.sleep(max(0.0, 0.020 - elapsed))
    db._conn = real
    db.close()
    out.write_text(json.dumps({"appends": len(waits) + len(own_ms), "failures": failures, "errors": errors[:5],
                               "journal_mode": journal,
                               "max_wait_ms": _ms(waits), "p99_wait_ms": _p99(waits),
                               "max_commit_wait_ms": _ms(commit_waits),
                               "max_append_ms": _ms(appends), "p99_append_ms": _p99(appends),
                               "own_maintenance_ms": [round(w * 1000, 1) for w in own_ms],
                               "own_maintenance_spans": spans,
                               # (whole ms, ms waited, Hermes' write count)
                               "slowest": sorted(slowest, reverse=True)[:6]}))


if __name__ == "__main__":
    main()

"""A live Hermes process during the benchmark (run inside the peer's venv).

Usage: python writer.py STORE STOP_FILE OUT_JSON [OPTIMIZE_AFTER]

OPTIMIZE_AFTER: Hermes' own FTS optimize runs after that many appends of this writer (its
count of writes starts that far short of the 1000th), so that it falls inside a short run.

Appends one message every 20 ms through the real SessionDB to a live session,
until STOP_FILE exists; records every failure and, for each append:
- its wait: the time it spent on another connection's write lock, that is in
  `BEGIN IMMEDIATE` (SQLite's busy handler) and in Hermes' own retries after
  one gave up (its jittered sleeps), as the issue defines a wait;
- its whole time, which also holds Hermes' own work inside the append (its
  statements, its commit's FTS5 flush and merges, and the WAL checkpoints its
  commits run): reported beside the waits.

Hermes 0.19.0 rewrites its FTS indexes ('optimize') inside every 1000th write of
its own; on a large store that alone takes seconds. Those appends are reported
apart ("own maintenance"): their time is Hermes' work, not a lock held by others.
"""

import json
import sys
import time
from pathlib import Path

from hermes_state import SessionDB


class Timed:
    """Hermes' writer connection, with the time its BEGINs (and the retries between them) took."""

    def __init__(self, conn):
        self._conn = conn
        self.waited = 0.0
        self._failed_at = None  # a BEGIN that gave up: Hermes sleeps, then tries again

    def execute(self, sql, *args):
        if not sql.lstrip().upper().startswith("BEGIN"):
            return self._conn.execute(sql, *args)
        started = time.monotonic()
        if self._failed_at is not None:
            self.waited += started - self._failed_at
            self._failed_at = None
        try:
            return self._conn.execute(sql, *args)
        except Exception:
            self._failed_at = time.monotonic()
            raise
        finally:
            self.waited += time.monotonic() - started

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _p99(values):
    return round(sorted(values)[int(len(values) * 0.99)] * 1000, 1) if values else None


def main() -> None:
    store, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    db = SessionDB(store)
    conn = db._conn = Timed(db._conn)
    waits, appends, own, spans, failures, errors, slowest = [], [], [], [], 0, [], []
    every = getattr(SessionDB, "_OPTIMIZE_EVERY_N_WRITES", 0)
    if len(sys.argv) > 4 and every:
        db._write_count = every - int(sys.argv[4])
    Path(str(out) + ".ready").write_text("1")
    while not stop.exists():
        before = getattr(db, "_write_count", 0)
        conn.waited, conn._failed_at = 0.0, None
        started = time.monotonic()
        try:
            db.append_message("bench-live", "user", "tick")
        except Exception as exc:  # Hermes gave up: a failure a user would see
            failures += 1
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        elapsed = time.monotonic() - started
        after = getattr(db, "_write_count", 0)
        optimized = every and after // every > before // every
        if optimized:  # when, on the system-wide monotonic clock the bench's own timings use
            own.append(elapsed)
            spans.append((started, started + elapsed))
        else:
            waits.append(conn.waited)
            appends.append(elapsed)
        slowest.append((round(elapsed * 1000, 1), round(conn.waited * 1000, 1), after))
        time.sleep(max(0.0, 0.020 - elapsed))
    db.close()
    out.write_text(json.dumps({"appends": len(waits) + len(own), "failures": failures, "errors": errors[:5],
                               "max_wait_ms": round(max(waits) * 1000, 1) if waits else None,
                               "p99_wait_ms": _p99(waits),
                               "max_append_ms": round(max(appends) * 1000, 1) if appends else None,
                               "p99_append_ms": _p99(appends),
                               "own_maintenance_ms": [round(w * 1000, 1) for w in own],
                               "own_maintenance_spans": spans,
                               # (whole ms, ms waited, Hermes' write count)
                               "slowest": sorted(slowest, reverse=True)[:6]}))


if __name__ == "__main__":
    main()

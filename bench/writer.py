"""A live Hermes process during the benchmark (run inside the peer's venv).

Usage: python writer.py STORE STOP_FILE OUT_JSON

Appends one message every 20 ms through the real SessionDB to a live session,
until STOP_FILE exists; records each append's wall time and every failure.

Hermes 0.19.0 rewrites its FTS indexes ('optimize') inside every 1000th write of
its own; on a large store that alone takes seconds. Those appends are reported
apart ("own maintenance"): their wait is Hermes' work, not a lock held by others.
"""

import json
import sys
import time
from pathlib import Path

from hermes_state import SessionDB


def main() -> None:
    store, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    db = SessionDB(store)
    waits, own, spans, failures, errors, slowest = [], [], [], 0, [], []
    every = getattr(SessionDB, "_OPTIMIZE_EVERY_N_WRITES", 0)
    Path(str(out) + ".ready").write_text("1")
    while not stop.exists():
        before = getattr(db, "_write_count", 0)
        started = time.monotonic()
        try:
            db.append_message("bench-live", "user", "tick")
        except Exception as exc:  # Hermes gave up: a failure a user would see
            failures += 1
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        elapsed = time.monotonic() - started
        after = getattr(db, "_write_count", 0)
        optimized = every and after // every > before // every
        (own if optimized else waits).append(elapsed)
        if optimized:  # when, on the system-wide monotonic clock the bench's own timings use
            spans.append((started, started + elapsed))
        slowest.append((round(elapsed * 1000, 1), after))
        time.sleep(max(0.0, 0.020 - elapsed))
    db.close()
    out.write_text(json.dumps({"appends": len(waits) + len(own), "failures": failures, "errors": errors[:5],
                               "max_wait_ms": round(max(waits) * 1000, 1) if waits else None,
                               "own_maintenance_ms": [round(w * 1000, 1) for w in own],
                               "own_maintenance_spans": spans,
                               "slowest": sorted(slowest, reverse=True)[:6],  # (ms, Hermes' write count)
                               "p99_wait_ms": round(sorted(waits)[int(len(waits) * 0.99)] * 1000, 1) if waits else None}))


if __name__ == "__main__":
    main()

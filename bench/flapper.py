"""A lock that comes and goes: another process takes the store's lock 0.4 s of every 0.7 s.

Usage: python flapper.py STORE STOP_FILE OUT_JSON [HOLD_S] [GAP_S]

Plain sqlite3, in a loop until STOP_FILE exists: BEGIN EXCLUSIVE (waiting for it as long as it
takes), sleep HOLD_S (0.4), COMMIT, sleep GAP_S (0.3). In a rollback journal (DELETE) an exclusive
lock keeps every other connection out, readers included; in WAL it keeps other writers out.
Writes OUT_JSON: cycles, seconds held, and the longest it waited for its own lock.
"""

import json
import sqlite3
import sys
import time
from pathlib import Path


def main() -> None:
    store, stop, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    hold = float(sys.argv[4]) if len(sys.argv) > 4 else 0.4
    gap = float(sys.argv[5]) if len(sys.argv) > 5 else 0.3
    conn = sqlite3.connect(store, timeout=3600, isolation_level=None)
    cycles, held, longest_wait = 0, 0.0, 0.0
    Path(str(out) + ".ready").write_text("1")
    while not stop.exists():
        asked = time.monotonic()
        conn.execute("BEGIN EXCLUSIVE")
        got = time.monotonic()
        longest_wait = max(longest_wait, got - asked)
        time.sleep(hold)
        conn.execute("COMMIT")
        held += time.monotonic() - got
        cycles += 1
        time.sleep(gap)
    conn.close()
    out.write_text(json.dumps({"cycles": cycles, "held_s": round(held, 2), "hold_s": hold, "gap_s": gap,
                               "longest_wait_ms": round(longest_wait * 1000, 1)}))


if __name__ == "__main__":
    main()

"""Build a benchmark store with the real Hermes Agent (run inside the peer's venv).

Usage: python build_workload.py HOME SCALE NOW

SCALE 1 is W1: ~13 k sessions (~5 k past a 90-day retention), ~150 k messages,
~25 k transcript files. SCALE 10 is W10, ten times that. The schema, triggers
and both FTS indexes are Hermes' own: every row goes through Hermes' write
path (`_execute_write` with its triggers); rows are batched per transaction
only so that building W10 takes minutes, not hours.

Hermes 0.19.0's prune selects on `started_at` while hermes-admin's purge
selects on last activity; every session here starts and stays on the same side
of the cutoff, so both must keep exactly the same sessions.
"""

import json
import os
import random
import sys
import time
from pathlib import Path

from hermes_state import SessionDB

DAY = 86400.0


def main() -> None:
    home, scale, now = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    rng = random.Random(42 * scale)
    sessions_dir = home / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    db = SessionDB(home / "state.db")
    total, old = 13_000 * scale, 5_000 * scale
    batch = []

    def flush():
        def work(conn):
            for sid, source, started, ended, msgs in batch:
                conn.execute("INSERT INTO sessions (id, source, model, started_at, ended_at, end_reason, "
                             "message_count) VALUES (?, ?, 'bench/model', ?, ?, ?, ?)",
                             (sid, source, started, ended, "user_exit" if ended else None, len(msgs)))
                conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                                 msgs)
        db._execute_write(work)
        batch.clear()

    files = 0
    for i in range(total):
        is_old = i < old
        age = rng.uniform(91, 400) if is_old else rng.uniform(0.5, 85)
        started = now - age * DAY
        open_ = (not is_old and rng.random() < 0.05) or (is_old and rng.random() < 0.01)
        ended = None if open_ else started + rng.uniform(60, 3600)
        sid = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started)) + f"_{i:07x}"
        count = rng.randint(4, 19)
        msgs = [(sid, "user" if k % 2 == 0 else "assistant",
                 f"bench message {k} about topic {rng.randint(0, 5000)} in {sid}", started + k * 30)
                for k in range(count)]
        batch.append((sid, rng.choice(["cli", "telegram", "discord", "tui"]), started, ended, msgs))
        # ~25 k files for W1: a transcript for every session, a .json for most, a few request dumps.
        stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started)) + "_000001"
        names = [f"{sid}.jsonl"] + ([f"{sid}.json"] if rng.random() < 0.8 else []) + \
                ([f"request_dump_{sid}_{stamp}.json"] if rng.random() < 0.12 else [])
        for name in names:
            path = sessions_dir / name
            path.write_text('{"bench": true}\n')
            os.utime(path, (started, started))
        files += len(names)
        if len(batch) >= 500:
            flush()
    flush()
    db.create_session("bench-live", "cli", model="bench/model")  # the concurrent writer's session
    db.close()
    print(json.dumps({"sessions": total + 1, "old": old, "files": files}))


if __name__ == "__main__":
    main()

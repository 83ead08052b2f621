"""Waiting for Hermes is not failing: the real Hermes holds its store's write lock in the middle of
our purge (as its own FTS optimize does, inside an append), and the purge waits it out; held past
--lock-wait without progress, the profile stops with exit 3 naming the holder, and the next run
finishes the work."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

from tests.compat.test_compat_live_holder import admin, holding
from tests.conftest import fts_problems, store_health
from tests.helpers import home_of

DAY = 86400.0


def add_old_sessions(db: Path, count: int, now: float) -> set[str]:
    """Many old ended sessions in a store the real Hermes wrote (its triggers index every message)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN")
        ids = set()
        for n in range(count):
            sid = f"20250101_000000_m{n:05d}"
            started = now - 200 * DAY + n
            conn.execute("INSERT INTO sessions (id, source, started_at, ended_at, end_reason, message_count) "
                         "VALUES (?, 'cron', ?, ?, 'done', 3)", (sid, started, started + 60))
            for m in range(3):
                conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                             (sid, f"cron output {n} line {m} " + "x" * 400, started + m))
            ids.add(sid)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return ids


def count_of(db: Path, ids: set[str]) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM sessions WHERE id LIKE '20250101_000000_m%'").fetchone()[0]
    finally:
        conn.close()


def purge_held_midway(root: Path, home: Path, ids: set[str], hold_s: float, *options: str):
    """Start a purge; once its first deletes committed, the holder takes the write lock for hold_s."""
    db = home / "state.db"
    with holding(home, "keep") as holder:
        import os
        import sys
        env = dict(os.environ, HERMES_ADMIN_CONFIG="", HERMES_HOME="")
        purge = subprocess.Popen([sys.executable, "-m", "hermes_admin", "--root", str(root), *options, "purge",
                                  "-p", "alpha", "--older-than", "90", "--yes", "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while count_of(db, ids) == len(ids) and time.monotonic() < deadline and purge.poll() is None:
            time.sleep(0.01)
        left_when_held = count_of(db, ids)
        holder.proc.stdin.write(f"hold {hold_s}\n")
        holder.proc.stdin.flush()
        assert holder.proc.stdout.readline().strip() == "holding"
        held_at = time.monotonic()
        out, err = purge.communicate(timeout=hold_s + 300)
        assert holder.proc.stdout.readline().strip() == "released"
        return purge.returncode, json.loads(out), err, left_when_held, time.monotonic() - held_at, holder


def test_a_60_s_lock_of_hermes_during_a_purge_costs_a_wait_not_a_failure(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default", "alpha"], now, orphans=False)
    home = home_of(root, "alpha")
    ids = add_old_sessions(home / "state.db", 3000, now)
    code, doc, err, left_when_held, waited, _ = purge_held_midway(root, home, ids, 60)
    assert 0 < left_when_held < len(ids), "the lock was not taken in the middle of the purge"
    assert code in (0, 1), err
    assert doc["errors"] == [] and doc["locked"] == []
    assert count_of(home / "state.db", ids) == 0  # every due session went
    assert waited >= 59  # the purge was still waiting when the holder let go
    assert "another process holds the write lock" in err
    db = home / "state.db"
    assert store_health(db) == [] and fts_problems(db) == []


def test_held_past_lock_wait_the_profile_stops_with_3_and_the_next_run_finishes(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default", "alpha"], now, orphans=False)
    home = home_of(root, "alpha")
    ids = add_old_sessions(home / "state.db", 3000, now)
    code, doc, err, left_when_held, _, holder = purge_held_midway(root, home, ids, 8, "--lock-wait", "2")
    assert code == 3, err  # lock held: not 2
    assert doc["errors"] == []
    stopped = [line for line in doc["locked"] if "profile 'alpha'" in line]
    assert len(stopped) == 1 and f"pid {holder.proc.pid}" in stopped[0] and "peer_holder.py" in stopped[0]
    done = sum(r["rows"] for r in doc["results"] if r["profile"] == "alpha")
    left = count_of(home / "state.db", ids)
    assert done > 0 and 0 < left < len(ids) and done >= len(ids) - left  # what was done is reported
    again = admin(root, "purge", "-p", "alpha", "--older-than", "90", "--yes")
    assert again.returncode in (0, 1), again.stderr
    assert count_of(home / "state.db", ids) == 0
    db = home / "state.db"
    assert store_health(db) == [] and fts_problems(db) == []

"""Stores in a rollback journal (what Hermes 0.20+ makes on a SQLite before 3.51.3): a reader blocks
a commit, and any statement can meet "database is locked" while another connection commits."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest

from hermes_admin.synth.builder import SynthStore
from tests.conftest import fts_problems
from tests.helpers import row_ids

DAY = 86400.0

# Another process that takes the store's lock (EXCLUSIVE: no reader gets in either) for 0.4 s of
# every 0.7 s, until its stop file appears.
FLAPPER = r"""
import os, sqlite3, sys, time
db, stop = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(db, isolation_level=None, timeout=30)
print("ready", flush=True)
while not os.path.exists(stop):
    conn.execute("BEGIN EXCLUSIVE")
    time.sleep(0.4)
    conn.execute("COMMIT")
    time.sleep(0.3)
"""


@pytest.fixture
def delete_root(tmp_path, now):
    root = tmp_path / "hermes"
    rng = random.Random(3)
    synth = SynthStore(root / "state.db", 30, journal="delete")
    for n in range(120):
        when = now - (200 if n % 3 else 10) * DAY + n
        synth.session(f"s{n}", started=when, ended=when + 60, end_reason="user_exit")
        synth.messages(f"s{n}", rng.randint(2, 12), when, 1, text="words " * rng.randint(10, 400))
    synth.close()
    return root


def test_a_purge_beside_a_lock_that_comes_and_goes_finishes_and_loses_nothing(delete_root, invoke, tmp_path):
    db = delete_root / "state.db"
    kept = {f"s{n}" for n in range(120) if n % 3 == 0}
    stop = tmp_path / "stop"
    flapper = subprocess.Popen([sys.executable, "-c", FLAPPER, str(db), str(stop)], stdout=subprocess.PIPE, text=True)
    try:
        assert flapper.stdout.readline().strip() == "ready"
        started = time.monotonic()
        result = invoke("--root", str(delete_root), "purge", "--older-than", "90", "--yes", "--json")
        took = time.monotonic() - started
    finally:
        stop.touch()
        flapper.wait(timeout=10)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert not doc["errors"]
    assert row_ids(db) == kept, f"after {took:.1f} s"
    assert fts_problems(db) == []


def test_an_export_holds_no_read_lock_between_its_pages_in_a_rollback_journal(delete_root, invoke, monkeypatch):
    """A read transaction of ours holds every commit back in a rollback journal: Hermes commits
    while we export, between any two pages we read."""
    from hermes_admin.profile import exports
    from hermes_admin.profile.store import unit_rows
    from tests.helpers import other_connection

    db = delete_root / "state.db"
    monkeypatch.setattr(unit_rows, "PAGE_ROWS", 2)
    original, commits = exports.messages_of, []

    def interleaved(conn_db, sid, names):
        for n, row in enumerate(original(conn_db, sid, names)):
            if n == 2:  # a page read, the next not yet: Hermes commits now, without waiting
                # Our own write transactions are short; a read lock held between pages would hold
                # this commit off for good, however long it waited.
                hermes = other_connection(db, timeout=10)
                hermes.execute("BEGIN IMMEDIATE")
                hermes.execute("UPDATE sessions SET title = title WHERE id = 's1'")
                hermes.execute("COMMIT")
                hermes.close()
                commits.append(sid)
            yield row

    monkeypatch.setattr(exports, "messages_of", interleaved)
    result = invoke("--root", str(delete_root), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert commits  # Hermes committed in the middle of an export, never refused
    assert fts_problems(db) == []

"""The bench's plain-SQL floor deletes the same sessions whether in one transaction or in many."""

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes_admin.synth.builder import SynthStore, write_session_files

FLOOR = Path(__file__).resolve().parents[2] / "bench" / "floor.py"
DAY = 86400.0


@pytest.fixture
def home(tmp_path: Path) -> Path:
    now = time.time()
    home = tmp_path / "home"
    home.mkdir()
    store = SynthStore(home / "state.db")
    for i in range(20):
        old = i % 2 == 0
        sid = f"s{i:02d}"
        started = now - (200 if old else 5) * DAY
        parent = "s00" if i == 11 else None  # a new child keeps its old parent: one unit, kept whole
        store.session(sid, started=started, ended=started + 60, end_reason="x", parent=parent,
                      system_prompt=f"prompt {i % 3}")
        store.messages(sid, 4, started, text=f"words of session {sid}")
        write_session_files(home / "sessions", sid)
    store.close()
    return home


def floor(home: Path, *per_txn: int) -> dict:
    done = subprocess.run([sys.executable, str(FLOOR), str(home), "90", *map(str, per_txn)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def state(home: Path) -> tuple:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        sessions = sorted(r[0] for r in conn.execute("SELECT id FROM sessions"))
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        prompts = conn.execute("SELECT count(*) FROM system_prompts").fetchone()[0]
        fts = [conn.execute(f"SELECT count(*) FROM {t} WHERE {t} MATCH 'session'").fetchone()[0]
               for t in ("messages_fts", "messages_fts_trigram")]
    finally:
        conn.close()
    return sessions, messages, prompts, fts, sorted(p.name for p in (home / "sessions").iterdir())


@pytest.mark.parametrize("per_txn, transactions", [(1, 9), (4, 3), (100, 1)])
def test_the_floor_in_short_transactions_deletes_what_it_deletes_in_one(home, tmp_path, per_txn, transactions):
    chunked = tmp_path / "chunked"
    shutil.copytree(home, chunked)
    whole = floor(home)
    parts = floor(chunked, per_txn)
    assert whole["deleted"] == parts["deleted"] == 9  # s00 stays with its new child s11
    assert whole["transactions"] == 1 and parts["transactions"] == transactions
    assert whole["counts"] == parts["counts"]
    assert state(home) == state(chunked)
    conn = sqlite3.connect(chunked / "state.db")
    for table in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
    conn.close()

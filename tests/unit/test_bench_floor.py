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
        sid = f"s{i:02d}"
        old = i % 2 == 0 or i == 19
        started = now - (200 if old else 5) * DAY
        # s11 (new) keeps its old parent s00: one unit, kept whole; s04 and its old child s19 go together
        parent = {11: "s00", 19: "s04"}.get(i)
        # "prompt old" only old sessions use: deleted with the last of them, whichever transaction that is
        prompt = "prompt old" if i in (2, 16) else f"prompt {i % 3}"
        store.session(sid, started=started, ended=started + 60, end_reason="x", parent=parent, system_prompt=prompt)
        store.messages(sid, 4, started, text=f"words of session {sid}")
        store.usage(sid, when=started)
        write_session_files(home / "sessions", sid)
    store.close()
    return home


def floor(home: Path, *transactions: int, by: str = "weight") -> dict:
    extra = ["--by-sessions"] if by == "sessions" else []
    done = subprocess.run([sys.executable, str(FLOOR), str(home), "90", *map(str, transactions), *extra],
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


# 10 doomed sessions in 9 units (s04 with s19). By sessions: 9 transactions at most, each of whole
# units. By weight (each unit weighs about the same, the pair twice that): a unit heavier than a
# transaction's share goes in steps of its messages: as many transactions as asked, or a few fewer.
@pytest.mark.parametrize("by, wanted, transactions", [
    ("sessions", 20, 9), ("sessions", 9, 9), ("sessions", 3, 3), ("sessions", 1, 1),
    ("weight", 20, 19), ("weight", 9, 9), ("weight", 3, 3), ("weight", 1, 1),
])
def test_the_floor_in_short_transactions_deletes_what_it_deletes_in_one(home, tmp_path, by, wanted, transactions):
    chunked = tmp_path / "chunked"
    shutil.copytree(home, chunked)
    whole = floor(home)
    parts = floor(chunked, wanted, by=by)
    assert whole["deleted"] == parts["deleted"] == 10  # s00 stays with its new child s11
    assert whole["transactions"] == 1 and parts["transactions"] == transactions
    assert whole["counts"] == parts["counts"]
    assert whole["counts"]["system_prompts"] == parts["counts"]["system_prompts"] == 1
    assert whole["counts"]["usage"] == 10
    assert state(home) == state(chunked)
    conn = sqlite3.connect(chunked / "state.db")
    try:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


@pytest.mark.parametrize("wanted", ["0", "-3"])
def test_a_transaction_count_below_one_is_refused_before_anything_goes(home, wanted):
    done = subprocess.run([sys.executable, str(FLOOR), str(home), "90", wanted], capture_output=True, text=True)
    assert done.returncode != 0 and "TRANSACTIONS must be 1 or more" in done.stderr
    assert len(state(home)[0]) == 20 and len(state(home)[4]) == 80


def test_the_floor_on_apsw_deletes_what_it_deletes_on_sqlite3(home, tmp_path):
    """`--apsw`: the same statements on the SQLite hermes-admin runs on, the same rows gone."""
    other = tmp_path / "other"
    shutil.copytree(home, other)
    plain = floor(home, 3)
    done = subprocess.run([sys.executable, str(FLOOR), str(other), "90", "3", "--apsw"],
                          capture_output=True, text=True, check=True)
    on_apsw = json.loads(done.stdout.strip().splitlines()[-1])
    assert on_apsw["sqlite"] != plain["sqlite"] == sqlite3.sqlite_version
    assert on_apsw["counts"] == plain["counts"] and on_apsw["transactions"] == plain["transactions"] >= 3
    assert state(home) == state(other)

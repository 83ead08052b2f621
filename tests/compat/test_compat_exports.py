"""Issue: real-sized units. A long conversation the real Hermes wrote goes in short steps, and
`restore` puts it back so that Hermes lists it, searches it and reads it byte for byte."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from tests.conftest import store_health
from tests.helpers import engine_steps, row_ids

WRITE = """
import json, random, sys, time
from hermes_state import SessionDB
db = SessionDB()
rng = random.Random(3)
words = [f"tok{n}" for n in range(300)] + ["deploy", "kubernetes", "stacktrace"]
now = time.time()
def say(sid, n, size):
    for i in range(n):
        body = " ".join(rng.choice(words) for _ in range(size // 7))
        if i % 3 == 0:
            db.append_message(sid, "assistant", body, tool_calls=[{"id": f"c{i}", "type": "function",
                              "function": {"name": "terminal", "arguments": json.dumps({"cmd": "ls"})}}])
        elif i % 3 == 1:
            db.append_message(sid, "tool", body + " zebracorn" if (i, sid) == (1, "long-old") else body, tool_name="terminal",
                              tool_call_id=f"c{i - 1}")
        else:
            db.append_message(sid, "user", body[:300])
db.create_session("long-old", "cli", model="peer/model")
say("long-old", 150, 6000)
db.end_session("long-old", "user_exit")
db.create_session("short-old", "telegram", model="peer/model")
say("short-old", 6, 200)
db.end_session("short-old", "user_exit")
db.create_session("kept", "cli", model="peer/model")
say("kept", 6, 200)
db.end_session("kept", "user_exit")
old = now - 200 * 86400
db._conn.execute("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id IN ('long-old', 'short-old')",
                 (old, old + 3600))
db._conn.execute("UPDATE messages SET timestamp = ? WHERE session_id IN ('long-old', 'short-old')", (old + 60,))
db._conn.commit()
db.close()
"""

SEARCH = """
import json
from hermes_state import SessionDB
db = SessionDB()
print(json.dumps(sorted({m["session_id"] for m in db.search_messages("zebracorn")})))
"""


def digest(db) -> dict[int, str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {i: hashlib.sha256(repr(row).encode()).hexdigest() for i, *row in conn.execute(
            "SELECT id, session_id, role, content, tool_calls, tool_name, tool_call_id, timestamp FROM messages "
            "WHERE session_id IN ('long-old', 'short-old')")}
    finally:
        conn.close()


def test_a_long_real_conversation_goes_in_steps_and_restores_for_hermes(hermes_peer, tmp_path, invoke, monkeypatch):
    home = tmp_path / "hermes"
    (home / "sessions").mkdir(parents=True)
    done = hermes_peer.run_script(WRITE, home=home, timeout=300)
    assert done.returncode == 0, done.stderr
    db = home / "state.db"
    before = digest(db)
    assert json.loads(hermes_peer.run_script(SEARCH, home=home).stdout) == ["long-old"]

    engine_steps(monkeypatch, 40_000)  # some 25 steps, whatever this machine's speed
    result = invoke("--root", str(home), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (purge,) = [r for r in json.loads(result.stdout)["results"] if r["task"] == "purge"]
    assert purge["transactions"] > 10
    assert row_ids(db) == {"kept"}
    assert store_health(db) == []
    listed = hermes_peer.hermes(home, "sessions", "list")
    assert listed.returncode == 0 and "long-old" not in listed.stdout and "kept" in listed.stdout
    assert json.loads(hermes_peer.run_script(SEARCH, home=home).stdout) == []

    (export,) = (home / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    back = invoke("--root", str(home), "restore", str(export), "--yes")
    assert back.exit_code == 0, back.stderr
    assert digest(db) == before  # byte for byte, ids included
    assert store_health(db) == []  # integrity_check, foreign_key_check, both FTS integrity-checks
    listed = hermes_peer.hermes(home, "sessions", "list")
    assert listed.returncode == 0 and "long-old" in listed.stdout and "short-old" in listed.stdout
    assert json.loads(hermes_peer.run_script(SEARCH, home=home).stdout) == ["long-old"]

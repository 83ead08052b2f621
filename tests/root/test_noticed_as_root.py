"""Issue 46, as root: a session the user deleted outside hermes-admin (as Hermes does, firing nothing)
reaches her plugins through root's next run, once, heard as her; the look at her store is kept in
her home, as her."""

from __future__ import annotations

import json
from collections import Counter

from tests.helpers import row_ids
from tests.root.conftest import as_user, build_user_root, root_owned
from tests.root.test_privsep import with_plugin

# What Hermes' own delete does to the rows (children orphaned, messages and the row gone), run as her.
HER_DELETE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
with conn:
    conn.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", (sys.argv[2],))
    conn.execute("DELETE FROM messages WHERE session_id = ?", (sys.argv[2],))
    conn.execute("DELETE FROM sessions WHERE id = ?", (sys.argv[2],))
"""


def test_her_own_deletes_reach_her_plugins_through_roots_run(make_user, admin):
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    with_plugin(alice.root, alice, policy={"auto_prune": False, "auto_archive": False})
    db = alice.root / "state.db"
    first = admin("--root", str(alice.root), "run", "--json")
    assert first.returncode in (0, 1), first.stderr
    calls = alice.root / "whoami.jsonl"
    heard_first = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    victim = sorted(row_ids(db))[0]
    done = as_user(alice, ["/usr/bin/python3", "-c", HER_DELETE, str(db), victim])
    assert done.returncode == 0, done.stderr

    second = admin("--root", str(alice.root), "run", "--json")
    assert second.returncode in (0, 1), second.stderr
    noticed = [r for r in json.loads(second.stdout)["results"] if r["action"] == "noticed"]
    assert [d["session_id"] for r in noticed for d in r["done"]] == [victim]
    heard = [json.loads(line) for line in calls.read_text().splitlines()]
    new = heard[len(heard_first):]
    assert Counter(c["session_id"] for c in new)[victim] == 1
    assert all((c["uid"], c["euid"]) == (alice.uid, alice.uid) for c in heard)
    third = admin("--root", str(alice.root), "run", "--json")
    assert third.returncode in (0, 1), third.stderr
    assert len(calls.read_text().splitlines()) == len(heard)  # once
    assert root_owned(alice.root) == [], "the look and the outbox are hers"

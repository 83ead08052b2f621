"""Against the real Hermes 0.22.2: its turn-lease keys and write guards agree with store/guards.py,
its index-rebuild admission reads our holder record, and its resume un-hides what our inactivity
sweep archived (auto_archived) but not what a deliberate archive hid.

0.22.2 runs in its own cached venv (tests/peer.py), driven through a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from hermes_admin.profile.store.connect import open_readonly
from hermes_admin.profile.state_folder import RecordedFlock
from hermes_admin.profile.store import guards
from hermes_admin.profile.store.schema import read_schema
from tests import peer
from tests.helpers import row_ids


@pytest.fixture(scope="module")
def hermes22():
    if os.environ.get("HERMES_ADMIN_SKIP_COMPAT") == "1":
        pytest.skip("HERMES_ADMIN_SKIP_COMPAT=1: compat tier left out of this run")
    return peer.python("0.22.2")


def run22(python: str, home: Path, code: str, **values) -> object:
    """Run `code` in 0.22.2's interpreter with HERMES_HOME and HOME at `home`; `values` as JSON in
    `ARGS`; what it prints last is read back as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HERMES_HOME=str(home), HOME=str(home), NO_COLOR="1")
    script = "import json, sys\nARGS = json.loads(sys.argv[1])\n" + textwrap.dedent(code)
    done = subprocess.run([python, "-c", script, json.dumps(values)], capture_output=True, text=True, env=env,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


BUILD = """
from hermes_state import SessionDB
db = SessionDB()
def new(sid, parent=None, end=None, source="cli", **markers):
    db.create_session(sid, source, parent_session_id=parent, model_config=markers or None)
    db.append_message(sid, "user", f"hello from {sid}")
    if end:
        db.end_session(sid, end)
new("root", end="compression")
new("mid", "root", end="compression")
new("tip", "mid")
new("sibling", "mid", end="user_exit")
new("branch", "mid", end="user_exit", _branched_from="mid")
new("reset", "mid", end="user_exit", _reset_from="mid")
new("tool", "mid", end="user_exit", source="tool")
new("helper", "tip", end="user_exit", _delegate_from="tip")
new("copied", "mid", end="user_exit", _delegate_from="elsewhere")
new("other", end="user_exit")
ids = ["root", "mid", "tip", "sibling", "branch", "reset", "tool", "helper", "copied", "other"]
keys = {sid: db._session_turn_lease_key(sid) for sid in ids}
held = db.try_acquire_session_turn_lease("tip", ARGS["holder"], ttl_seconds=3600)
lease = db._read_one("SELECT conversation_id FROM session_turn_leases")[0]
guarded = db._execute_write(lambda conn: sorted(db._guarded_ids(conn, ids)))
db.close()
print(json.dumps({"keys": keys, "held": held, "lease": lease, "guarded": guarded}))
"""


def _live(path: Path) -> dict[str, str]:
    db = open_readonly(path)
    try:
        return guards.live_sessions(db, read_schema(db), __import__("time").time())
    finally:
        db.close()


def _conversations(path: Path, keys) -> dict[str, set[str]]:
    db = open_readonly(path)
    try:
        return guards.conversations(db, keys)
    finally:
        db.close()


@pytest.fixture
def home22(hermes22, tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    holder = f"pid={os.getpid()}:pidns={guards.own_pid_namespace()}:turn=compat"  # a live process: this one
    built = run22(hermes22, home, BUILD, holder=holder)
    return home, built


def test_lease_keys_and_guards_agree_with_hermes(home22):
    home, built = home22
    keys = built["keys"]
    assert built["held"] and built["lease"] == "root" == keys["tip"]  # keyed by the chain's root
    conversations = _conversations(home / "state.db", set(keys.values()))
    for sid, key in keys.items():  # every session is in the conversation of the key Hermes gives it
        assert sid in conversations[key], (sid, key)
    for key, members in conversations.items():  # and no more, but for a reset child (0.20.1's rule)
        if key == "reset":
            continue  # a conversation of its own to 0.22.2; we guard it with its parent's
        assert members - {"reset"} == {sid for sid, k in keys.items() if k == key} - {"reset"}, key
    live = _live(home / "state.db")
    assert set(built["guarded"]) <= set(live)  # what Hermes' guarded delete refuses, we keep
    assert set(live) == {"root", "mid", "tip", "sibling", "copied", "reset"}


def test_hermes_rebuild_admission_reads_our_holder_record(hermes22, tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    run22(hermes22, home, "from hermes_state import SessionDB\nSessionDB().close()\nprint('null')")
    probe = """
    import contextlib
    from hermes_state_common import fts_rebuild_admission, _read_lock_holder_record, _lock_holder_provably_dead
    path = ARGS["db"]
    with fts_rebuild_admission(path, timeout_seconds=0) as admitted:
        pass
    with open(path + ".fts_rebuild.lock", "rb") as handle:
        record = _read_lock_holder_record(handle)
    print(json.dumps({"admitted": admitted, "record": record,
                      "dead": _lock_holder_provably_dead(record) if record else None}))
    """
    db = str(home / "state.db")
    with RecordedFlock(Path(db + ".fts_rebuild.lock"), "rebuilding", wait_s=1):
        held = run22(hermes22, home, probe, db=db)
    assert held["admitted"] is False and held["record"]["pid"] == os.getpid() and held["dead"] is False
    free = run22(hermes22, home, probe, db=db)
    assert free["admitted"] is True and free["record"] is None  # released: no record left behind


def test_delete_of_a_leased_chain_tip_is_refused(home22, invoke):
    home, _ = home22
    result = invoke("--root", str(home), "sessions", "delete", "tip", "other", "--yes", "--json")
    doc = json.loads(result.stdout)
    assert [s["session_id"] for s in doc["results"][0]["skipped"]] == ["tip"]
    assert "tip" in row_ids(home / "state.db") and "other" not in row_ids(home / "state.db")


def test_hermes_unhides_what_our_sweep_archived_only(hermes22, tmp_path, invoke):
    home = tmp_path / "h"
    home.mkdir()
    run22(hermes22, home, """
    from hermes_state import SessionDB
    db = SessionDB()
    for sid in ("swept", "kept"):
        db.create_session(sid, "cli")
        db.append_message(sid, "user", "hi")
        db.end_session(sid, "user_exit")
        db._execute_write(lambda conn: conn.execute(
            "UPDATE sessions SET started_at = started_at - 864000, last_activity_at = NULL WHERE id = ?", (sid,)))
        db._execute_write(lambda conn: conn.execute(
            "UPDATE messages SET timestamp = timestamp - 864000 WHERE session_id = ?", (sid,)))
    db.close()
    print("null")
    """)
    assert invoke("--root", str(home), "archive-inactive", "--days", "3", "--yes").exit_code == 0
    assert invoke("--root", str(home), "sessions", "archive", "kept", "--yes").exit_code == 0
    unhidden = run22(hermes22, home, """
    from hermes_state import SessionDB
    db = SessionDB()
    for sid in ("swept", "kept"):  # what resuming a chat does (its return value is not to be trusted:
        # Python's sqlite3 gives no rowcount for a WITH ... UPDATE)
        db._execute_write(lambda conn: db._unarchive_auto_archived_lineage(conn, sid))
    found = db._execute_write(lambda conn: {r[0]: r[1] for r in conn.execute("SELECT id, archived FROM sessions")})
    db.close()
    print(json.dumps(found))
    """)
    assert unhidden == {"swept": 0, "kept": 1}  # the sweep's archive un-hidden on resume, the user's kept

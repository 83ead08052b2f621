"""Hermes' turn leases and compression locks: keyed and aged as Hermes 0.22.2 does it (store/guards.py),
and kept to on every path that changes a session (deletes, purge, archive, close, repair)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from hermes_admin.profile.store.connect import open_readonly
from hermes_admin.profile.store import guards
from hermes_admin.profile.store.schema import read_schema
from hermes_admin.synth.builder import SynthStore
from tests.helpers import row_ids

DAY = 86400.0
NS = "4026531836"
ME = 1000


def dead(pid: int) -> bool:
    return pid == 4242


# -- the rule: a table of cases -------------------------------------------------------------

STALE_CASES = [
    # (case, holder, expires_at, own_pidns, namespaces, stale?)
    ("expired", "pid=77:pidns=4026531836:turn=x", 99.0, NS, True, True),
    ("expires right now (Hermes: <= now)", "pid=77:pidns=4026531836", 100.0, NS, True, True),
    ("unexpired, holder alive", "pid=77:pidns=4026531836:turn=x", 200.0, NS, True, False),
    ("unexpired, holder dead in our namespace", "pid=4242:pidns=4026531836:turn=x", 200.0, NS, True, True),
    ("holder dead, pidns first", "pidns=4026531836:pid=4242", 200.0, NS, True, True),
    ("holder dead in another namespace: waits", "pid=4242:pidns=4026532999:turn=x", 200.0, NS, True, False),
    ("holder dead, unstamped: waits for its TTL", "pid=4242:turn=x", 200.0, NS, True, False),
    ("our own namespace unknown: waits", "pid=4242:pidns=4026531836", 200.0, None, True, False),
    ("no namespaces on this platform: the pid is enough", "pid=4242:turn=x", 200.0, None, False, True),
    ("our own pid is never dead", f"pid={ME}:pidns=4026531836", 200.0, NS, True, False),
    ("pid 0", "pid=0:pidns=4026531836", 200.0, NS, True, False),
    ("unstructured holder", "synth:1", 200.0, NS, True, False),
    ("pid= inside another token does not count", "xpid=4242:pidns=4026531836", 200.0, NS, True, False),
    ("no holder", None, 200.0, NS, True, False),
    ("expiry unreadable: never expires", "pid=77:pidns=4026531836", "soon", NS, True, False),
    ("expiry NULL", "pid=77", None, NS, True, False),
    ("expiry as text number", "pid=77", "50", NS, True, True),
]


@pytest.mark.parametrize("case, holder, expires, own_ns, namespaces, expected", STALE_CASES,
                         ids=[c[0] for c in STALE_CASES])
def test_stale(case, holder, expires, own_ns, namespaces, expected):
    assert guards.stale(holder, expires, 100.0, own_pidns=own_ns, own_pid=ME, gone=dead,
                        namespaces=namespaces) is expected


def row(sid, parent=None, source="cli", end_reason=None, **markers):
    return {"id": sid, "parent_session_id": parent, "source": source, "end_reason": end_reason,
            "model_config": json.dumps(markers) if markers else None}


P = row("p", end_reason="compression")
CONTINUES_CASES = [
    # (case, child, parent, resets_split, continues?)
    ("plain continuation", row("c", "p"), P, True, True),
    ("parent not ended by compression", row("c", "p"), row("p", end_reason="user_exit"), True, False),
    ("parent still open", row("c", "p"), row("p"), True, False),
    ("no parent row", row("c", "p"), None, True, False),
    ("parent row of another id", row("c", "q"), P, True, False),
    ("a tool session is a fork", row("c", "p", source="tool"), P, True, False),
    ("delegate of the parent", row("c", "p", _delegate_from="p"), P, True, False),
    ("delegate marker copied from elsewhere", row("c", "p", _delegate_from="x"), P, True, True),
    ("branch of the parent", row("c", "p", _branched_from="p"), P, True, False),
    ("reset of the parent (0.22.2)", row("c", "p", _reset_from="p"), P, True, False),
    ("reset of the parent (0.20.1 rule)", row("c", "p", _reset_from="p"), P, False, True),
    ("model_config not JSON", dict(row("c", "p"), model_config="{oops"), P, True, True),
    ("model_config a JSON list", dict(row("c", "p"), model_config='["p"]'), P, True, True),
]


@pytest.mark.parametrize("case, child, parent, resets_split, expected", CONTINUES_CASES,
                         ids=[c[0] for c in CONTINUES_CASES])
def test_continues(case, child, parent, resets_split, expected):
    assert guards.continues(child, parent, resets_split=resets_split) is expected


def test_holder_parts():
    assert guards.holder_pid("pid=12:pidns=34:turn=5") == 12 and guards.holder_pidns("pid=12:pidns=34:turn=5") == "34"
    assert guards.holder_pid("turn=5") is None and guards.holder_pidns("pid=12") is None
    assert guards.own_pid_namespace() == os.readlink("/proc/self/ns/pid").strip("pid:[]")


# -- on a store -------------------------------------------------------------------------------

def chain_store(path, now, markers: dict[str, dict] | None = None):
    """root -> mid -> tip by compression; off mid a branch, a reset, a tool child; off tip a delegate."""
    store = SynthStore(path, version=30)
    old = now - 200 * DAY
    store.session("root", started=old, ended=old + 10, end_reason="compression")
    store.session("mid", started=old + 10, ended=old + 20, end_reason="compression", parent="root")
    store.session("tip", started=old + 20, ended=old + 30, end_reason="user_exit", parent="mid")
    store.session("sibling", started=old + 20, ended=old + 25, end_reason="user_exit", parent="mid")
    store.session("branch", started=old + 21, ended=old + 31, end_reason="user_exit", parent="mid")
    store.session("reset", started=old + 22, ended=old + 32, end_reason="user_exit", parent="mid")
    store.session("tool", started=old + 23, ended=old + 33, end_reason="user_exit", parent="mid", source="tool")
    store.session("helper", started=old + 24, ended=old + 34, end_reason="user_exit", parent="tip",
                  delegate_from="tip")
    store.session("other", started=old, ended=old + 5, end_reason="user_exit")
    for sid, config in {"branch": {"_branched_from": "mid"}, "reset": {"_reset_from": "mid"},
                        **(markers or {})}.items():
        store.conn.execute("UPDATE sessions SET model_config = ? WHERE id = ?", [json.dumps(config), sid])
    for sid in ("root", "mid", "tip", "sibling", "branch", "reset", "tool", "helper", "other"):
        store.messages(sid, 2, old)
    return store


def live_of(path, now):
    db = open_readonly(path)
    try:
        return guards.live_sessions(db, read_schema(db), now)
    finally:
        db.close()


def own_ns_holder(pid: int) -> str:
    return f"pid={pid}:pidns={guards.own_pid_namespace()}:turn=t1"


def finished_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


CONVERSATION = {"root", "mid", "tip", "sibling", "reset"}  # reset: a continuation by 0.20.1's rule, kept too


@pytest.mark.parametrize("key", ["root", "mid", "tip"])
def test_a_live_lease_holds_its_whole_conversation(tmp_path, now, key):
    path = tmp_path / "state.db"
    store = chain_store(path, now)
    store.turn_lease(key, expires=now + 300)
    store.close()
    live = live_of(path, now)
    assert set(live) == CONVERSATION
    assert live[key] == "held by a live turn lease (session_turn_leases)"
    assert "its conversation is held by a live turn lease" in live["tip" if key != "tip" else "root"]


def test_a_compression_lock_holds_its_conversation_too(tmp_path, now):
    path = tmp_path / "state.db"
    store = chain_store(path, now)
    store.compression_lock("tip", expires=now + 300)
    store.close()
    assert set(live_of(path, now)) == CONVERSATION


@pytest.mark.parametrize("holder, expires, held", [
    ("synth:1", -1, False),  # expired
    ("dead-stamped", 300, False),  # its process is gone, in our pid namespace
    ("dead-unstamped", 300, True),  # gone, but unstamped: waits for its TTL
    ("dead-foreign", 300, True),  # gone in another namespace (as far as we can tell): waits
    ("alive", 300, True),
])
def test_staleness_on_a_store(tmp_path, now, holder, expires, held):
    pid = finished_pid()
    holders = {"synth:1": "synth:1", "dead-stamped": own_ns_holder(pid), "dead-unstamped": f"pid={pid}:turn=t",
               "dead-foreign": f"pid={pid}:pidns=1:turn=t", "alive": own_ns_holder(os.getppid())}
    path = tmp_path / "state.db"
    store = chain_store(path, now)
    store.turn_lease("root", expires=now + expires, holder=holders[holder])
    store.close()
    assert bool(live_of(path, now)) is held


def test_a_branch_or_a_tool_child_is_a_conversation_of_its_own(tmp_path, now):
    path = tmp_path / "state.db"
    store = chain_store(path, now)
    store.turn_lease("branch", expires=now + 300)
    store.turn_lease("tool", expires=now + 300)
    store.close()
    assert set(live_of(path, now)) == {"branch", "tool"}


def test_a_cycle_of_parents_ends(tmp_path, now):
    path = tmp_path / "state.db"
    store = SynthStore(path, version=30)
    store.conn.execute("COMMIT")
    store.conn.execute("PRAGMA foreign_keys=OFF")
    store.conn.execute("BEGIN")
    store.session("a", started=now, ended=now, end_reason="compression", parent="b")
    store.session("b", started=now, ended=now, end_reason="compression", parent="a")
    store.session("c", started=now, ended=now, end_reason="x", parent="b")
    store.turn_lease("a", expires=now + 300)
    store.close()
    assert set(live_of(path, now)) == {"a", "b", "c"}


def test_no_live_row_reads_nothing_else(tmp_path, now):
    path = tmp_path / "state.db"
    chain_store(path, now).close()
    db = open_readonly(path)
    statements = []
    original = db.execute_sql
    db.execute_sql = lambda sql, *a, **k: statements.append(sql) or original(sql, *a, **k)
    assert guards.live_sessions(db, read_schema(db), now) == {}
    assert all("sessions " not in s for s in statements)
    db.close()


# -- every path keeps to them -----------------------------------------------------------------

def test_sessions_delete_of_a_chain_tip_whose_root_holds_the_lease(tmp_path, now, invoke):
    """Hermes' guarded delete refuses it: the lease is keyed by the chain's root, not the tip."""
    path = tmp_path / "h" / "state.db"
    store = chain_store(path, now)
    store.turn_lease("root", expires=now + 3600, holder=own_ns_holder(os.getppid()))
    store.close()
    result = invoke("--root", str(tmp_path / "h"), "sessions", "delete", "tip", "helper", "branch", "--yes", "--json")
    doc = json.loads(result.stdout)
    (skipped,) = doc["results"][0]["skipped"]
    assert skipped["session_id"] == "tip" and "live turn lease" in skipped["why"]
    assert [d["session_id"] for d in doc["results"][0]["done"]] == ["branch"]  # a conversation of its own
    assert {"tip", "helper"} <= row_ids(path) and "branch" not in row_ids(path)


def test_purge_keeps_a_leased_conversation_and_takes_it_once_the_holder_is_dead(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    store = chain_store(path, now)
    store.turn_lease("root", expires=now + 3600, holder=own_ns_holder(finished_pid()))
    store.compression_lock("other", expires=now + 3600, holder="synth:unstamped")
    store.close()
    result = invoke("--root", str(tmp_path / "h"), "purge", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert row_ids(path) == {"other"}  # the lease's holder is gone: the conversation went; the lock waits


def test_purge_keeps_a_conversation_under_a_live_lease(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    store = chain_store(path, now)
    store.turn_lease("root", expires=now + 3600)
    store.close()
    result = invoke("--root", str(tmp_path / "h"), "purge", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert CONVERSATION <= row_ids(path) and "other" not in row_ids(path)
    kept = json.loads(result.stdout)["results"][0]["kept"]
    assert "live" in kept["tip"]


def test_the_transaction_checks_again(tmp_path, now):
    """A lease taken between selection and the delete: the engine's own re-check keeps the unit."""
    from hermes_admin.profile.engine.engine import Engine
    from hermes_admin.profile.lineage import Unit
    from hermes_admin.model import Profile

    path = tmp_path / "h" / "state.db"
    chain_store(path, now).close()
    profile = Profile(tmp_path / "h", "default", tmp_path / "h")
    with Engine(profile) as engine:
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO session_turn_leases VALUES ('root', 'synth:1', ?, ?)", (now, now + 3600))
        conn.commit(), conn.close()
        result = engine.delete([Unit("tip", ["tip", "helper"])], "delete")
    (skipped,) = list(result.skipped)
    assert list(result.done) == [] and "live turn lease" in skipped["why"]
    assert "tip" in row_ids(path)


def with_auto_archived(path):
    """Hermes 0.22.2's `sessions.auto_archived` (schema 31), on a synthetic v30 store."""
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE sessions ADD COLUMN auto_archived INTEGER NOT NULL DEFAULT 0")
    conn.commit(), conn.close()


def flags(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {sid: (a, auto) for sid, a, auto in conn.execute("SELECT id, archived, auto_archived FROM sessions")}
    finally:
        conn.close()


def test_auto_archived_is_written_as_hermes_writes_it(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    store = chain_store(path, now)
    store.session("hand", started=now - 90 * DAY, ended=now - 90 * DAY, end_reason="x", archived=True)
    store.close()
    with_auto_archived(path)
    root = str(tmp_path / "h")
    assert invoke("--root", root, "archive-inactive", "--days", "30", "--yes").exit_code == 0
    swept = flags(path)
    assert swept["tip"] == (1, 1) and swept["root"] == (1, 1) and swept["other"] == (1, 1)
    assert swept["hand"] == (1, 0)  # archived before, by hand: its provenance stays
    # a deliberate archive claims an archived lineage: nothing un-hides it on resume any more
    assert invoke("--root", root, "sessions", "archive", "tip", "--yes").exit_code == 0
    assert {sid: flags(path)[sid] for sid in ("root", "mid", "tip")} == dict.fromkeys(("root", "mid", "tip"), (1, 0))
    assert flags(path)["other"] == (1, 1)
    assert invoke("--root", root, "sessions", "unarchive", "other", "--yes").exit_code == 0
    assert flags(path)["other"] == (0, 0)


def test_archive_inactive_leaves_a_live_conversation(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    store = chain_store(path, now)
    store.turn_lease("root", expires=now + 3600)
    store.close()
    with_auto_archived(path)
    result = invoke("--root", str(tmp_path / "h"), "archive-inactive", "--days", "30", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    after = flags(path)
    assert all(after[sid] == (0, 0) for sid in CONVERSATION) and after["other"] == (1, 1)
    assert "live" in json.loads(result.stdout)["results"][0]["kept"]["tip"]


def test_a_store_without_the_column_archives_as_before(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    chain_store(path, now).close()
    assert invoke("--root", str(tmp_path / "h"), "archive-inactive", "--days", "30", "--yes").exit_code == 0
    assert row_ids(path, "SELECT id FROM sessions WHERE archived = 1") == row_ids(path) - {"helper"}  # a delegate


def test_close_stale_leaves_an_open_row_of_a_leased_conversation(tmp_path, now, invoke):
    path = tmp_path / "h" / "state.db"
    store = SynthStore(path, version=30)
    old = now - 200 * DAY
    store.session("root", started=old, ended=old + 10, end_reason="compression", source="cron")
    store.session("tip", started=old + 10, parent="root", source="cron")
    store.session("lone", started=old, source="cron")
    store.turn_lease("root", expires=now + 3600)
    store.close()
    (tmp_path / "h" / "config.yaml").write_text("sessions: {auto_prune: true}\n")
    result = invoke("--root", str(tmp_path / "h"), "run", "--yes", "--json")
    assert result.exit_code in (0, 1), result.stderr
    assert row_ids(path, "SELECT id FROM sessions WHERE ended_at IS NULL") == {"tip"}

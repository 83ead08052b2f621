"""The deletion engine and the hook bus, through the CLI, on both schema versions."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time

import pytest

from hermes_admin.synth.builder import SynthStore
from hermes_admin.synth.scenario import build_profile_home
from tests.conftest import fk_rows, fts_problems, store_digest
from tests.helpers import events, install_plugins, row_ids


@pytest.fixture(params=[22, 30], ids=["v22", "v30"])
def home(request, tmp_path, now):
    """A single-profile root (the default profile) with the standard scenario and the recorder."""
    root = tmp_path / "hermes"
    kinds = build_profile_home(root, request.param, "default", now)
    install_plugins(root, ["recorder", "raiser", "never"], enabled=["recorder", "raiser"], timeout=10)
    return root, kinds


def healthy(root, fk_before):
    db = root / "state.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    assert fk_rows(db) <= fk_before  # no new foreign-key violation (the scenario plants orphans)
    assert fts_problems(db) == []


def test_delete_parent_with_delegates_is_one_unit_one_event(home, invoke):
    root, kinds = home
    fk_before = fk_rows(root / "state.db")
    parent, children = kinds["delegate_parent"][0], kinds["delegate_child"]
    result = invoke("--root", str(root), "sessions", "delete", parent, "--json")
    assert result.exit_code == 1  # the raising plugin is a warning
    doc = json.loads(result.stdout)
    (done,) = doc["results"][0]["done"]
    assert sorted(done["ids"]) == sorted([parent, *children])
    assert not row_ids(root / "state.db") & {parent, *children}
    assert not row_ids(root / "state.db", "SELECT DISTINCT session_id FROM messages") & {parent, *children}
    left = set(os.listdir(root / "sessions"))
    assert not any(parent in name or children[0] in name or children[1] in name for name in left)
    (event,) = events(root)
    assert event["session_id"] == parent and event["reason"] == "delete" and event["profile"] == "default"
    assert sorted(event["deleted_ids"]) == sorted([parent, *children])
    assert event["sessions_dir"] == str(root / "sessions") and event["sessions_dir_type"] == "PosixPath"
    assert events(root, "recorded-narrow.jsonl") == [{"session_id": parent}]
    assert any(f["plugin"] == "raiser" and "plugin failure on purpose" in f["text"]
               for f in doc["results"][0]["hook_failures"])
    assert not (root / "never-imported-marker").exists()  # present, not enabled: never imported
    healthy(root, fk_before)

    again = invoke("--root", str(root), "sessions", "delete", parent)
    assert again.exit_code == 1 and "no session matches" in again.stderr
    assert len(events(root)) == 1


def test_deleting_a_compression_link_orphans_the_tip(home, invoke):
    root, kinds = home
    first, mid, tip = kinds["lineage"]
    result = invoke("--root", str(root), "sessions", "delete", mid, "--yes")
    assert result.exit_code in (0, 1)
    ids = row_ids(root / "state.db")
    assert first in ids and tip in ids and mid not in ids
    conn = sqlite3.connect(root / "state.db")
    assert conn.execute("SELECT parent_session_id FROM sessions WHERE id=?", (tip,)).fetchone() == (None,)
    conn.close()
    (event,) = events(root)
    assert event["session_id"] == mid and event["deleted_ids"] is None


def test_archive_fires_once_and_unarchive_never(home, invoke):
    root, kinds = home
    first, mid, tip = kinds["lineage"]
    result = invoke("--root", str(root), "sessions", "archive", mid, "--json")
    assert sorted(json.loads(result.stdout)["results"][0]["done"][0]["ids"]) == sorted([mid, first, tip])
    (event,) = events(root)
    assert event["reason"] == "archive" and event["session_id"] == mid
    assert sorted(event["deleted_ids"]) == sorted([first, mid, tip])
    assert row_ids(root / "state.db", "SELECT id FROM sessions WHERE archived=1") >= {first, mid, tip}
    invoke("--root", str(root), "sessions", "archive", tip)
    invoke("--root", str(root), "sessions", "unarchive", tip)
    assert len(events(root)) == 1
    assert not row_ids(root / "state.db", "SELECT id FROM sessions WHERE archived=1") & {first, mid, tip}
    plain = kinds["recent"][0]
    invoke("--root", str(root), "sessions", "archive", plain)
    assert events(root)[-1] == dict(events(root)[-1], session_id=plain, deleted_ids=None)


def test_dry_run_changes_nothing_and_fires_nothing(home, invoke):
    root, kinds = home
    before = store_digest(root)
    listing = sorted(os.listdir(root / "sessions"))
    result = invoke("--root", str(root), "sessions", "delete", kinds["delegate_parent"][0], "--dry-run", "--json")
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True and len(doc["results"][0]["done"][0]["ids"]) == 3
    assert doc["results"][0]["files_removed"]
    assert store_digest(root) == before and sorted(os.listdir(root / "sessions")) == listing
    assert events(root) == [] and not (root / ".hermes-admin").exists()


def test_traversal_id_rows_go_files_outside_stay(tmp_path, now, invoke):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("../victim", started=now - 10, ended=now - 5, end_reason="x")
    store.messages("../victim", 2, now - 10)
    store.close()
    (root / "sessions").mkdir(exist_ok=True)
    (root / "victim.json").write_text("must survive\n")
    result = invoke("--root", str(root), "sessions", "delete", "../victim", "--json")
    assert result.exit_code == 1
    assert row_ids(root / "state.db") == set()
    assert (root / "victim.json").read_text() == "must survive\n"
    assert "cannot name a file" in json.loads(result.stdout)["results"][0]["files_skipped"][0]


def test_symlinked_transcript_is_unlinked_target_kept(tmp_path, now, invoke):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=22)
    store.session("s1", started=now - 10, ended=now - 5, end_reason="x")
    store.close()
    (root / "sessions").mkdir(exist_ok=True)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    os.symlink(target, root / "sessions" / "s1.jsonl")
    assert invoke("--root", str(root), "sessions", "delete", "s1").exit_code == 0
    assert not os.path.lexists(root / "sessions" / "s1.jsonl")
    assert target.read_text() == "keep me\n"


def test_cjk_triggers_without_tokenizer_refuse_deletes(tmp_path, now, invoke, monkeypatch):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("s1", started=now - 10, ended=now - 5, end_reason="x")
    store.messages("s1", 2, now - 10)
    store.conn.execute("CREATE TABLE cjk_probe(x)")
    store.conn.execute("CREATE TRIGGER messages_fts_cjk_delete AFTER DELETE ON messages BEGIN "
                       "INSERT INTO cjk_probe VALUES (old.id); END")
    store.close()
    monkeypatch.delenv("HERMES_FTS5_CJK_SO", raising=False)
    result = invoke("--root", str(root), "sessions", "delete", "s1")
    assert result.exit_code == 2
    assert "cjk_unicode61" in result.stderr and "refusing to delete" in result.stderr
    assert row_ids(root / "state.db") == {"s1"}


def test_cjk_triggers_without_tokenizer_refuse_a_restore(tmp_path, now, invoke, monkeypatch):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("s1", started=now - 10, ended=now - 5, end_reason="x")
    store.messages("s1", 2, now - 10)
    store.close()
    assert invoke("--root", str(root), "sessions", "delete", "s1", "--yes").exit_code == 0
    (export,) = (root / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    conn = sqlite3.connect(root / "state.db")
    conn.execute("CREATE TABLE cjk_probe(x)")
    conn.execute("CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages BEGIN "
                 "INSERT INTO cjk_probe VALUES (new.id); END")
    conn.commit()
    conn.close()
    monkeypatch.delenv("HERMES_FTS5_CJK_SO", raising=False)
    result = invoke("--root", str(root), "restore", str(export), "--yes")
    assert result.exit_code == 2
    assert "cjk_unicode61" in result.stderr and "refusing to restore into" in result.stderr
    assert row_ids(root / "state.db") == set()


def test_guarded_and_unknown_referenced_sessions_are_skipped(home, invoke):
    root, kinds = home
    locked = kinds["locked_old"][0]
    recent = kinds["recent"][0]
    conn = sqlite3.connect(root / "state.db")
    conn.execute("CREATE TABLE worker_executions (execution_id TEXT PRIMARY KEY, "
                 "session_id TEXT REFERENCES sessions(id) ON DELETE RESTRICT, status TEXT)")
    conn.execute("INSERT INTO worker_executions VALUES ('e1', ?, 'running')", (recent,))
    conn.commit(), conn.close()
    result = invoke("--root", str(root), "sessions", "delete", locked, recent, "--json")
    assert result.exit_code == 1
    skipped = {s["session_id"]: s["why"] for s in json.loads(result.stdout)["results"][0]["skipped"]}
    assert "compression lock" in skipped[locked] and "worker_executions" in skipped[recent]
    assert {locked, recent} <= row_ids(root / "state.db")
    assert events(root) == []


def test_a_failed_transaction_fires_nothing(home, invoke):
    root, kinds = home
    victim = kinds["recent"][0]
    conn = sqlite3.connect(root / "state.db")
    conn.execute("CREATE TRIGGER refuse BEFORE DELETE ON sessions BEGIN SELECT RAISE(ABORT, 'refused'); END")
    conn.commit(), conn.close()
    result = invoke("--root", str(root), "sessions", "delete", victim)
    assert result.exit_code == 2 and "refused" in result.stderr
    assert victim in row_ids(root / "state.db")
    assert events(root) == []
    outbox = sqlite3.connect(root / ".hermes-admin" / "outbox.db")
    assert outbox.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    outbox.close()


def test_profile_locks(home, invoke):
    root, kinds = home
    victim = kinds["recent"][0]
    for lock_path, says in ((root / ".hermes-admin" / "lock", "another hermes-admin"),
                            (root / "state.db.auto-maintenance.lock", "Hermes is running")):
        lock_path.parent.mkdir(exist_ok=True)
        with open(lock_path, "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            result = invoke("--root", str(root), "sessions", "delete", victim)
        assert result.exit_code == 3 and says in result.stderr
        assert victim in row_ids(root / "state.db")


def test_timeouts_kill_and_others_still_receive(tmp_path, now, invoke):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    for sid in ("a", "b"):
        store.session(sid, started=now - 10, ended=now - 5, end_reason="x")
    store.close()
    install_plugins(root, ["sleeper", "recorder"], enabled=["sleeper", "recorder"], timeout=2)
    started = time.monotonic()
    result = invoke("--root", str(root), "sessions", "delete", "a", "b", "--json")
    elapsed = time.monotonic() - started
    # Two 2 s timeouts and two worker restarts: a few seconds. Without the timeouts it would be
    # the sleeper's 300 s twice; the bound sits far from both, whatever the machine's load.
    assert elapsed < 60, elapsed
    failures = json.loads(result.stdout)["results"][0]["hook_failures"]
    # one line per plugin and kind of failure, then how often it came back
    assert len([f for f in failures if "timed out after 2 s" in f["text"]]) == 1
    assert any("plugin sleeper: timed out 1 more time(s)" in f["text"] for f in failures)
    assert any(f["plugin"] == "sleeper" and f["kind"] == "timed out" and f["repeats"] == 1 for f in failures)
    assert sorted(e["session_id"] for e in events(root)) == ["a", "b"]


def test_many_units_are_chunked_into_short_transactions(tmp_path, now, invoke):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    ids = [f"s{i:04d}" for i in range(600)]
    for sid in ids:
        store.session(sid, started=now - 100, ended=now - 50, end_reason="x")
        store.messages(sid, 5, now - 100)
    store.close()
    result = invoke("--root", str(root), "sessions", "delete", *ids, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["results"][0]["rows"] == 600 and doc["results"][0]["transactions"] >= 2
    assert doc["longest_write_ms"] < 100
    assert row_ids(root / "state.db") == set()
    assert fts_problems(root / "state.db") == []

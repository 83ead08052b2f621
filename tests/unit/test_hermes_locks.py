"""Hermes 0.22.2's lock files beside the store (the index-rebuild lock with its holder record, the
maintenance lock), its rebuild markers, and the store file itself never replaced or relabelled."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time

import pytest

from hermes_admin.plain_files import UnsafePath
from hermes_admin.profile import repair
from hermes_admin.profile.state_folder import LockHeld, RecordedFlock, start_ticks
from hermes_admin.profile.store import guards
from hermes_admin.synth.builder import SynthStore
from tests.conftest import fts_problems
from tests.helpers import SleepClock, needs_host_pids, row_ids


def test_the_rebuild_lock_carries_hermes_holder_record_and_leaves_none(tmp_path):
    path = tmp_path / "state.db.fts_rebuild.lock"
    before = time.time()
    with RecordedFlock(path, "rebuilding", wait_s=1):
        after = time.time()
        record = json.loads(path.read_bytes())
        assert set(record) == {"pid", "pidns", "start_ticks", "acquired_at"}
        assert record["pid"] == os.getpid() and record["pidns"] == guards.own_pid_namespace()
        assert record["start_ticks"] == start_ticks(os.getpid()) and before <= record["acquired_at"] <= after
        assert path.read_bytes().decode() == json.dumps(record, sort_keys=True)  # Hermes' own layout
        with open(path, "rb") as other:  # held: another taker is refused
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert path.read_bytes() == b""  # a normal release leaves no record behind
    with open(path, "rb") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_rebuild_lock_waits_a_bounded_time_then_fails_closed(tmp_path):
    path = tmp_path / "state.db.fts_rebuild.lock"
    path.write_text(json.dumps({"pid": os.getpid(), "pidns": None, "start_ticks": None, "acquired_at": 1.0}))
    with open(path, "rb") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        clock = SleepClock()
        with pytest.raises(LockHeld, match="waited 0.3 s"):
            RecordedFlock(path, "Hermes is rebuilding its FTS index", wait_s=0.3, clock=clock,
                          sleep=clock.sleep).acquire()
        assert 0.3 <= clock.slept <= 0.3 + 0.1 + 1e-9  # the wait, and at most one poll more

        def let_go_at_the_third_poll(seconds):
            clock.sleep(seconds)
            if len(clock.sleeps) == 3:
                fcntl.flock(holder, fcntl.LOCK_UN)

        clock.sleeps.clear()
        with RecordedFlock(path, "rebuilding", wait_s=5, clock=clock, sleep=let_go_at_the_third_poll):
            assert json.loads(path.read_bytes())["pid"] == os.getpid()  # let go within the wait: taken
        assert len(clock.sleeps) == 3


def test_a_lock_file_made_anew_by_a_breaker_is_the_one_taken(tmp_path):
    """Hermes breaks a dead holder's lock by making a new file: a lock on the old one excludes nobody."""
    path = tmp_path / "state.db.fts_rebuild.lock"
    path.write_bytes(b"")
    old = open(path, "rb")
    fcntl.flock(old, fcntl.LOCK_EX)

    clock = SleepClock()

    def broken_while_we_wait(seconds):  # by the time of our first poll, the breaker made a new file
        clock.sleep(seconds)
        os.unlink(path)
        path.write_bytes(b"")

    lock = RecordedFlock(path, "rebuilding", wait_s=5, clock=clock, sleep=broken_while_we_wait)
    lock.acquire()
    try:
        assert os.fstat(lock.fd).st_ino == os.stat(path).st_ino
    finally:
        lock.release()
        old.close()


def test_a_link_at_the_lock_path_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "state.db.fts_rebuild.lock").symlink_to(target)
    with pytest.raises(UnsafePath):
        RecordedFlock(tmp_path / "state.db.fts_rebuild.lock", "rebuilding", wait_s=0).acquire()
    assert target.read_text() == ""


def broken_index(root, now, **meta):
    store = SynthStore(root / "state.db", version=30)
    store.session("s", started=now)
    store.messages("s", 3, now)
    store.conn.execute("INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (999, 'ghost', NULL, NULL)")
    for key, value in meta.items():
        store.conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (key, value))
    store.close()
    assert fts_problems(root / "state.db")


def fts_finding(invoke, root) -> dict:
    doc = json.loads(invoke("--root", str(root), "repair", "--check-fts", "--apply", "--yes", "--json").stdout)
    (finding,) = [f for f in doc["findings"] if f["kind"] == "broken_fts"]
    return finding


@pytest.mark.parametrize("marker", ["fts_rebuild_high_water", "fts_rebuild_progress", "fts_stale"])
def test_no_rebuild_while_hermes_rebuild_markers_are_set(tmp_path, now, invoke, marker):
    root = tmp_path / "h"
    broken_index(root, now, **{marker: "3"})
    finding = fts_finding(invoke, root)
    assert not finding["applied"] and marker in finding["error"] and "not rebuilt here" in finding["error"]
    assert fts_problems(root / "state.db")  # left for Hermes
    assert not (root / "state-snapshots").exists() or not list((root / "state-snapshots").iterdir())


@needs_host_pids
def test_the_rebuild_runs_under_hermes_lock_with_its_record(tmp_path, now, invoke, monkeypatch):
    root = tmp_path / "h"
    broken_index(root, now)
    lock = root / "state.db.fts_rebuild.lock"
    seen = []
    from hermes_admin.profile.engine import engine as engine_module  # each rebuild is Engine.transaction's

    original = engine_module.write_transaction
    monkeypatch.setattr(engine_module, "write_transaction",
                        lambda db, work, *a, **k: seen.append(json.loads(lock.read_bytes())) or original(db, work, *a, **k))
    finding = fts_finding(invoke, root)
    assert finding["applied"], finding
    assert seen and all(r["pid"] == os.getpid() for r in seen)
    assert lock.read_bytes() == b"" and fts_problems(root / "state.db") == []


@needs_host_pids
def test_no_rebuild_while_another_process_holds_the_rebuild_lock(tmp_path, now, invoke, monkeypatch):
    root = tmp_path / "h"
    broken_index(root, now)
    monkeypatch.setattr(repair, "REBUILD_LOCK_WAIT_S", 0.3)
    with open(root / "state.db.fts_rebuild.lock", "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        finding = fts_finding(invoke, root)
    assert not finding["applied"] and "Hermes is rebuilding its FTS index" in finding["error"]
    assert fts_problems(root / "state.db")


def test_a_row_a_live_hermes_holds_is_not_moved(tmp_path, now, invoke):
    root = tmp_path / "h"
    SynthStore(root / "profiles" / "work" / "state.db", version=30, profile="work").close()
    default = SynthStore(root / "state.db", version=30, profile="default")
    for sid in ("busy", "idle"):  # rows of the work profile, found in the default one's store
        default.session(sid, started=now - 100, ended=now - 50, end_reason="idle", source="telegram",
                        session_key=f"agent:work:telegram:dm:{sid}")
        default.messages(sid, 2, now - 100)
    default.turn_lease("busy", expires=now + 3600)
    default.close()
    doc = json.loads(invoke("--root", str(root), "repair", "--apply", "--yes", "--json").stdout)
    (busy,) = [f for f in doc["findings"] if f["subject"] == "busy"]
    assert not busy["applied"] and "live turn lease" in busy["error"]
    here, work = root / "state.db", root / "profiles" / "work" / "state.db"
    assert "busy" in row_ids(here) and "busy" not in row_ids(work)
    assert "idle" in row_ids(work) and "idle" not in row_ids(here)


def test_the_store_file_and_its_application_id_stay(tmp_path, now, invoke):
    """Hermes 0.22.2 halts for good on a store whose file was replaced or whose application_id changed."""
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    for n in range(30):
        store.session(f"s{n}", started=now - 200 * 86400, ended=now - 199 * 86400, end_reason="x")
        store.messages(f"s{n}", 5, now - 200 * 86400)
    store.conn.execute("COMMIT")
    store.conn.execute("PRAGMA application_id = 1212")
    store.conn.execute("BEGIN")
    store.close()
    before = os.stat(root / "state.db")
    for args in (("purge", "--vacuum"), ("archive-inactive", "--days", "1"), ("repair", "--apply"), ("run",)):
        assert invoke("--root", str(root), *args, "--yes").exit_code in (0, 1), args
    after = os.stat(root / "state.db")
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    conn = sqlite3.connect(f"file:{root / 'state.db'}?mode=ro", uri=True)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == 1212
    conn.close()


def test_a_profile_hermes_maintains_is_skipped_and_the_others_go_on(tmp_path, now, invoke):
    root = tmp_path / "h"
    for home in (root, root / "profiles" / "work"):
        store = SynthStore(home / "state.db", version=30)
        store.session("old", started=now - 200 * 86400, ended=now - 199 * 86400, end_reason="x")
        store.close()
    with open(root / "profiles" / "work" / "state.db.auto-maintenance.lock", "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as Hermes' startup maintenance holds it
        result = invoke("--root", str(root), "purge", "--yes")
    assert result.exit_code == 3 and "work" in result.stderr and "Hermes is running its own maintenance" in result.stderr
    assert row_ids(root / "state.db") == set() and row_ids(root / "profiles" / "work" / "state.db") == {"old"}

"""`run` and the single-task commands through the CLI, on the synthetic scenario."""

from __future__ import annotations

import json
import os
import sqlite3

import yaml
from freezegun import freeze_time

from hermes_admin.synth.builder import SynthStore
from tests.conftest import fk_rows, fts_problems, store_digest
from tests.helpers import (events, expected_after_run, home_of, install_plugins, needs_host_pids, row_ids,
                           untouched_by_dry_run, vacuum_worthy_store)

POLICY = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}


def set_policy(home, sessions=POLICY):
    path = home / "config.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    data["sessions"] = sessions
    path.write_text(yaml.safe_dump(data))


def tasks_of(doc, profile):
    return {r["task"]: r for r in doc["results"] if r["profile"] == profile}


def test_run_dry_run_then_run(synth_root, invoke):
    root, kinds = synth_root
    for name in ("default", "work", "legacy"):
        install_plugins(home_of(root, name), ["recorder"], enabled=["recorder"])
        set_policy(home_of(root, name))
    garbage = root / "profiles" / "broken"
    garbage.mkdir()
    (garbage / "state.db").write_bytes(b"garbage" * 300)
    dry = untouched_by_dry_run(invoke, root, ["default", "work", "legacy"], store_digest)

    real = invoke("--root", str(root), "run", "--json")
    assert real.exit_code == 2  # the garbage profile; every other profile was maintained
    doc = json.loads(real.stdout)
    assert any("broken" in e for e in doc["errors"])
    planned = {(r["profile"], r["task"]): sorted(d["session_id"] for d in r["done"])
               for r in dry["results"]}
    assert all(r["dry_run"] and r["transactions"] == 0 for r in dry["results"])
    # The dry run listed exactly what the real run then did, task by task.
    assert planned == {(r["profile"], r["task"]): sorted(d["session_id"] for d in r["done"]) for r in doc["results"]}
    for name in ("default", "work", "legacy"):
        home, k = home_of(root, name), kinds[name]
        db = home / "state.db"
        ids = row_ids(db)
        expected = expected_after_run(k)
        gone = expected["gone"]
        assert not ids & gone
        assert ids == expected["kept"]
        assert row_ids(db, "SELECT id FROM sessions WHERE archived = 1") == expected["archived"]
        assert not row_ids(db, "SELECT session_id FROM messages") - ids  # orphan rows went too
        assert fk_rows(db) == set() and fts_problems(db) == []
        files = set(os.listdir(home / "sessions"))
        assert not any(sid in f for sid in gone | set(k["orphan_file_old"]) for f in files)
        assert {"sessions.json", "notes.txt"} <= files and any(k["orphan_file_fresh"][0] in f for f in files)
        got = events(home)
        by_reason = {}
        for e in got:
            by_reason.setdefault(e["reason"], []).append(e)
        assert sorted(e["session_id"] for e in by_reason["prune"]) == sorted(k["old_ended"] + k["old_archived"] + k["delegate_parent"])
        (parent_event,) = [e for e in by_reason["prune"] if e["session_id"] == k["delegate_parent"][0]]
        assert sorted(parent_event["deleted_ids"]) == sorted(k["delegate_parent"] + k["delegate_child"])
        assert [e["session_id"] for e in by_reason["empty_sweep"]] == k["empty_ended"]
        assert sorted(e["session_id"] for e in by_reason["ghost_prune"]) == sorted(k["tui_ghost"] + k["orphan_rows"])
        assert set(by_reason) == {"prune", "empty_sweep", "ghost_prune"}  # auto-archive is silent
        announced = [i for e in got for i in (e["deleted_ids"] or [e["session_id"]])]
        assert sorted(announced) == sorted(gone | set(k["orphan_rows"]))  # each deleted row exactly once
        tasks = tasks_of(doc, name)
        assert tasks["repair"]["action"] == "repair" and tasks["repair"]["done"] == []  # report only
        assert tasks["purge"]["status"] == "done"


def test_disabled_tasks_are_reported_as_skipped(synth_root, invoke):
    root, kinds = synth_root
    result = invoke("--root", str(root), "run", "-p", "work", "--json")
    tasks = tasks_of(json.loads(result.stdout), "work")
    assert tasks["purge"]["status"] == "skipped" and "auto_prune is off" in tasks["purge"]["why"]
    assert tasks["auto_archive"]["status"] == "skipped"
    assert set(kinds["work"]["old_ended"]) <= row_ids(root / "profiles" / "work" / "state.db")


def test_purge_runs_regardless_of_policy_and_takes_older_than(synth_root, invoke):
    root, kinds = synth_root
    db = root / "profiles" / "work" / "state.db"
    result = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "150", "--json")
    assert result.exit_code == 0, result.stderr
    gone = set(kinds["work"]["old_ended"]) - row_ids(db)
    assert len(gone) == 1  # only the 200-day one is older than 150 days


def test_purge_filters_and_the_everything_guard(synth_root, invoke):
    root, kinds = synth_root
    db = root / "profiles" / "work" / "state.db"
    refused = invoke("--root", str(root), "purge", "-p", "work", "--min-messages", "0", "--json")
    assert refused.exit_code == 2 and "the filters match all 13 candidate sessions" in \
        json.loads(refused.stdout)["errors"][0]
    result = invoke("--root", str(root), "purge", "-p", "work", "--source", "telegram", "--json")
    assert result.exit_code == 0
    done = [d["session_id"] for d in json.loads(result.stdout)["results"][0]["done"]]
    assert set(done) == set(kinds["work"]["old_archived"] + kinds["work"]["keyed"])  # all ended telegram ones
    assert not set(done) & row_ids(db)
    bad = invoke("--root", str(root), "purge", "--before", "someday")
    assert bad.exit_code == 2 and "neither a duration" in bad.stderr


def test_retention_boundary_at_the_cli_edge(tmp_path, invoke):
    root = tmp_path / "h"
    with freeze_time("2026-06-01 12:00:00"):
        import time
        now = time.time()
        store = SynthStore(root / "state.db", version=30)
        for sid, age in (("inside", 30 * 86400 - 1), ("exactly", 30 * 86400), ("outside", 30 * 86400 + 1)):
            store.session(sid, started=now - age - 10, ended=now - age, end_reason="x")
            store.messages(sid, 1, now - age)
        # Started a year ago, but its last message is an hour old: not inactive.
        store.session("revived", started=now - 365 * 86400, ended=now - 3600, end_reason="x")
        store.messages("revived", 1, now - 365 * 86400)
        store.messages("revived", 1, now - 3600)
        store.close()
        result = invoke("--root", str(root), "purge", "--older-than", "30", "--json")
    assert result.exit_code == 0, result.stderr
    assert row_ids(root / "state.db") == {"inside", "exactly", "revived"}


def test_single_tasks(synth_root, invoke):
    root, kinds = synth_root
    k = kinds["legacy"]
    db = root / "profiles" / "legacy" / "state.db"
    invoke("--root", str(root), "sweep-empty", "-p", "legacy")
    # Run alone, the sweep also takes the TUI ghost: it is an ended row without messages too.
    assert not row_ids(db) & set(k["empty_ended"] + k["tui_ghost"])
    assert set(k["just_ended_empty"] + k["empty_open"]) <= row_ids(db)
    invoke("--root", str(root), "prune-ghosts", "-p", "legacy")
    assert not row_ids(db, "SELECT DISTINCT session_id FROM messages") - row_ids(db)
    assert not any(k["orphan_file_old"][0] in f for f in os.listdir(root / "profiles" / "legacy" / "sessions"))
    result = invoke("--root", str(root), "archive-inactive", "-p", "legacy", "--days", "60", "--json")
    archived = {i for d in json.loads(result.stdout)["results"][0]["done"] for i in d["ids"]}
    # Idle over 60 days and not archived yet: the 70-day one, the old open one, and the old sessions a
    # purge would have taken; the 45-day one stays, the archived one does not flip again, and the one
    # under a live compression lock stays (a conversation a Hermes process is at work on is not idle).
    idle_over_60 = {k["inactive"][1], *k["old_open"], *k["old_ended"], *k["delegate_parent"]}
    assert archived == idle_over_60
    assert "live" in json.loads(result.stdout)["results"][0]["kept"][k["locked_old"][0]]


def test_bad_profile_config_skips_that_profile_only(synth_root, invoke):
    root, kinds = synth_root
    (root / "profiles" / "work" / "config.yaml").write_text("sessions: [unclosed\n")
    set_policy(home_of(root, "legacy"), {"retention_days": 0})
    result = invoke("--root", str(root), "run", "--json")
    assert result.exit_code == 2
    errors = json.loads(result.stdout)["errors"]
    assert any("work" in e and "config.yaml" in e and "not valid YAML" in e for e in errors)
    assert any("legacy" in e and "retention_days: 0 is under its minimum" in e for e in errors)
    assert not row_ids(root / "state.db") & set(kinds["default"]["tui_ghost"])  # default still maintained


def test_locked_profile_exit_code(synth_root, invoke):
    import fcntl
    root, _ = synth_root
    lock = root / ".hermes-admin" / "lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = invoke("--root", str(root), "run", "-p", "default")
    assert result.exit_code == 3


@needs_host_pids
def test_vacuum_only_when_worth_it(tmp_path, now, invoke):
    root = tmp_path / "h"
    vacuum_worthy_store(root / "state.db", now)
    # A WAL store (as Hermes leaves it): any other connection to it would show by its locks, where
    # on a rollback-journal store a process whose open files cannot be looked into counts as
    # holding it (some sandboxes keep even root from pid 1's).
    result = invoke("--root", str(root), "purge", "--vacuum", "--json")
    doc = json.loads(result.stdout)
    assert doc["results"][0]["rows"] == 300 and doc["results"][0]["vacuumed"] is True
    conn = sqlite3.connect(f"file:{root / 'state.db'}?mode=ro", uri=True)
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # never changed
    conn.close()


def test_sessions_delete_and_archive_by_filters_and_ids_from(synth_root, invoke, tmp_path):
    root, kinds = synth_root
    k = kinds["work"]
    db = root / "profiles" / "work" / "state.db"
    result = invoke("--root", str(root), "sessions", "delete", "-p", "work", "--source", "discord", "--json")
    assert result.exit_code == 0, result.stderr
    assert not row_ids(db) & set(k["inactive"])  # both discord sessions, ended
    everything = invoke("--root", str(root), "sessions", "archive", "-p", "work", "--min-messages", "0")
    assert everything.exit_code == 2 and "match all" in everything.stderr
    aged = invoke("--root", str(root), "sessions", "archive", "-p", "work", "--title", "old chat", "--before", "100d",
                  "--json")
    archived = {i for d in json.loads(aged.stdout)["results"][0]["done"] for i in d["ids"]}
    assert archived == set(k["old_ended"])
    listing = tmp_path / "ids.txt"
    listing.write_text(f"# to go\n{k['recent'][0]}\n\n{k['keyed'][0]}\n")
    invoke("--root", str(root), "sessions", "delete", "--ids-from", str(listing))
    assert not row_ids(db) & {k["recent"][0], k["keyed"][0]}
    piped = invoke("--root", str(root), "sessions", "delete", "--ids-from", "-", "--json", input=k["revived"][0] + "\n")
    assert piped.exit_code == 0 and k["revived"][0] not in row_ids(db)
    nothing = invoke("--root", str(root), "sessions", "delete")
    assert nothing.exit_code == 2 and "at least one session id" in nothing.stderr


def test_a_source_hermes_never_writes_is_said_with_the_nearest(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "purge", "--source", "crn", "--older-than", "30", "--dry-run", "--json")
    assert result.exit_code == 1, result.stderr
    [problem] = [p for p in json.loads(result.stdout)["problems"] if p["kind"] == "unknown_source"]
    assert "(did you mean 'cron'?)" in problem["message"]
    assert "did you mean 'cron'" in invoke("--root", str(root), "sessions", "delete", "--source", "crn",
                                           "--before", "30d", "--dry-run").stderr
    known = invoke("--root", str(root), "purge", "--source", "cron", "--older-than", "30", "--dry-run")
    assert "not a source Hermes writes" not in known.stderr

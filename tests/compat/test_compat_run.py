"""Issue: maintenance tasks and `run`, on a root the real Hermes 0.19.0 wrote."""

from __future__ import annotations

import json
import os

from tests.conftest import fk_rows, store_digest, store_health
from tests.helpers import events, expected_after_run, home_of, install_plugins, row_ids, untouched_by_dry_run

POLICY = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}
PROFILES = ["default", "alpha", "beta"]


def test_run_on_a_real_root(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, PROFILES, now, plugins_enabled=["recorder"], sessions=POLICY)
    for name in PROFILES:
        install_plugins(home_of(root, name), ["recorder"], enabled=["recorder"])
        (home_of(root, name) / "sessions" / "notes.txt").write_text("not a session file\n")
    garbage = root / "profiles" / "broken"
    garbage.mkdir()
    (garbage / "state.db").write_bytes(b"not a database at all" * 50)
    garbage_bytes = (garbage / "state.db").read_bytes()
    untouched_by_dry_run(invoke, root, PROFILES, store_digest)

    real = invoke("--root", str(root), "run", "--json")
    assert real.exit_code == 2, real.stderr  # the garbage profile
    doc = json.loads(real.stdout)
    assert any(str(garbage / "state.db") in e for e in doc["errors"])
    assert (garbage / "state.db").read_bytes() == garbage_bytes
    for name in PROFILES:
        home, k = home_of(root, name), kinds[name]
        db = home / "state.db"
        expected = expected_after_run(k)
        gone = expected["gone"]
        assert row_ids(db) == expected["kept"], name
        assert row_ids(db, "SELECT id FROM sessions WHERE archived = 1") == expected["archived"]
        files = set(os.listdir(home / "sessions"))
        assert not any(sid in f for sid in gone | set(k["orphan_file_old"]) for f in files)
        assert {"sessions.json", "notes.txt"} <= files
        assert any(k["recent"][0] in f for f in files) and any(k["orphan_file_fresh"][0] in f for f in files)
        got = events(home)
        announced = sorted(i for e in got for i in (e["deleted_ids"] or [e["session_id"]]))
        assert announced == sorted(gone | set(k["orphan_rows"]))  # every deleted row exactly once
        reasons = {e["session_id"]: e["reason"] for e in got}
        assert {reasons[s] for s in k["old_ended"] + k["old_archived"] + k["delegate_parent"]} == {"prune"}
        assert reasons[k["empty_ended"][0]] == "empty_sweep"
        assert reasons[k["tui_ghost"][0]] == reasons[k["orphan_rows"][0]] == "ghost_prune"
        (parent,) = [e for e in got if e["session_id"] == k["delegate_parent"][0]]
        assert sorted(parent["deleted_ids"]) == sorted(k["delegate_parent"] + k["delegate_child"])
        assert all(e["profile"] == name and e["sessions_dir"] == str(home / "sessions") for e in got)
        assert store_health(db) == [] and fk_rows(db) == set()
        assert hermes_peer.hermes(home, "sessions", "list").returncode == 0

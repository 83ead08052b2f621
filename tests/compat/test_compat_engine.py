"""Issue: engine and hook bus. On roots the real Hermes 0.19.0 wrote, with plugins enabled."""

from __future__ import annotations

import json
import os
import sqlite3
import time

from tests.conftest import fk_rows, store_health
from tests.helpers import events, home_of, install_plugins, row_ids

LOAD_IN_HERMES = """
import json
from hermes_cli.plugins import PluginManager
manager = PluginManager()
manager.discover_and_load(force=True)
print(json.dumps({"plugins": manager.list_plugins(), "has_hook": manager.has_hook("on_session_delete")}))
"""


def test_delete_archive_and_plugins_on_a_real_root(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, ["default", "alpha"], now)
    for name in ("default", "alpha"):
        install_plugins(home_of(root, name), ["recorder", "raiser", "never", "deletion-audit"],
                        enabled=["recorder", "raiser", "deletion-audit"])
    home, k = home_of(root, "alpha"), kinds["alpha"]
    db = home / "state.db"
    fk_before = fk_rows(db)

    # A session with two delegate children: three rows, their messages and files, one event.
    parent, children = k["delegate_parent"][0], k["delegate_child"]
    assert invoke("--root", str(root), "sessions", "delete", parent, "--yes").exit_code == 1  # raiser warns
    assert not row_ids(db) & {parent, *children}
    assert not row_ids(db, "SELECT session_id FROM messages") & {parent, *children}
    assert not [n for n in os.listdir(home / "sessions") if any(s in n for s in (parent, *children))]
    (event,) = events(home)
    assert (event["session_id"], event["reason"], event["profile"]) == (parent, "delete", "alpha")
    assert sorted(event["deleted_ids"]) == sorted([parent, *children])
    assert event["sessions_dir"] == str(home / "sessions")
    assert events(home_of(root, "default")) == []
    again = invoke("--root", str(root), "sessions", "delete", parent)
    assert again.exit_code != 0 and len(events(home)) == 1

    # A compression link: root and tip stay, the tip loses its parent, one event.
    first, mid, tip = k["lineage"]
    invoke("--root", str(root), "sessions", "delete", mid, "--yes")
    assert {first, tip} <= row_ids(db) and mid not in row_ids(db)
    assert row_ids(db, f"SELECT id FROM sessions WHERE id = '{tip}' AND parent_session_id IS NULL") == {tip}
    assert [e["session_id"] for e in events(home)] == [parent, mid]

    # Archive fires once; archiving again and unarchiving fire nothing.
    recent = k["recent"][0]
    invoke("--root", str(root), "sessions", "archive", recent)
    invoke("--root", str(root), "sessions", "archive", recent)
    invoke("--root", str(root), "sessions", "unarchive", recent)
    assert [e["reason"] for e in events(home)] == ["delete", "delete", "archive"]

    # A traversal id and a symlinked transcript.
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO sessions(id, source, started_at, ended_at) VALUES ('../../escape', 'cli', ?, ?)",
                 (now - 10, now - 5))
    conn.commit(), conn.close()
    (root / "escape.json").write_text("outside sessions/\n")
    invoke("--root", str(root), "sessions", "delete", "../../escape")
    assert "../../escape" not in row_ids(db) and (root / "escape.json").exists()
    victim = k["old_ended"][0]
    target = tmp_path / "target.jsonl"
    target.write_text("keep\n")
    link = home / "sessions" / f"{victim}.jsonl"
    link.unlink()
    os.symlink(target, link)
    invoke("--root", str(root), "sessions", "delete", victim)
    assert not os.path.lexists(link) and target.read_text() == "keep\n"

    # The never-enabled plugin was never imported; the audit plugin logged every event.
    assert not (home / "never-imported-marker").exists()
    audit = (home / "logs" / "session-deletions.jsonl").read_text().splitlines()
    assert len(audit) == len(events(home)) == 5

    # SQLite and Hermes are content.
    assert store_health(db, foreign_keys=False) == []
    assert fk_rows(db) <= fk_before  # only the orphan rows Hermes' crash left behind
    assert hermes_peer.hermes(home, "sessions", "list").returncode == 0


def test_a_hanging_plugin_is_cut_short(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    k = hermes_peer.build_root(root, ["default"], now)["default"]
    install_plugins(root, ["sleeper", "recorder"], enabled=["sleeper", "recorder"], timeout=2)
    two = [k["recent"][0], k["old_ended"][0]]
    started = time.monotonic()
    result = invoke("--root", str(root), "sessions", "delete", *two, "--json")
    assert time.monotonic() - started < 60  # far from the sleeper's 300 s, whatever the load
    assert sum("timed out" in f["text"] for f in json.loads(result.stdout)["results"][0]["hook_failures"]) == 2
    assert sorted(e["session_id"] for e in events(root)) == sorted(two)
    assert store_health(root / "state.db", foreign_keys=False) == []


def test_shipped_plugin_loads_in_hermes(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default"], now)
    install_plugins(root, ["deletion-audit"], enabled=["deletion-audit"])
    done = hermes_peer.run_script(LOAD_IN_HERMES, home=root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (plugin,) = [p for p in report["plugins"] if p.get("name") == "deletion-audit"]
    assert plugin.get("enabled", True) and not plugin.get("error")
    assert report["has_hook"] is True

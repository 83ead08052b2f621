"""Issue: profile repair, on a root the real Hermes 0.19.0 wrote, with plugins enabled."""

from __future__ import annotations

import json
import os
import stat

from tests.conftest import fk_rows, store_digest, store_health
from tests.helpers import events, home_of, install_plugins, row_ids

BREAK_ALPHA = """
from hermes_state import SessionDB
db = SessionDB(__import__('pathlib').Path({store!r}))
db.create_session("moved-1", "telegram", session_key="agent:beta:telegram:dm:42", profile_name="beta")
for i in range(3):
    db.append_message("moved-1", "user" if i % 2 == 0 else "assistant", f"hello {{i}}")
db.end_session("moved-1", "idle")
db.create_session("labelled-1", "cli", profile_name="default")
db.end_session("labelled-1", "user_exit")
db._conn.execute("PRAGMA foreign_keys=OFF")
db.create_session("dangling-1", "cli", parent_session_id="no-such-parent")
db._conn.execute("PRAGMA foreign_keys=ON")
db.close()
"""


def test_repair_on_a_real_root(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default", "alpha", "beta"], now, orphans=False)
    for name in ("default", "alpha", "beta"):
        install_plugins(home_of(root, name), ["recorder"], enabled=["recorder"])
    alpha, beta = home_of(root, "alpha"), home_of(root, "beta")
    done = hermes_peer.run_script(BREAK_ALPHA.format(store=str(alpha / "state.db")), home=alpha)
    assert done.returncode == 0, done.stderr
    os.chmod(beta / "state.db", 0o644)
    garbage = root / "profiles" / "broken"
    garbage.mkdir()
    (garbage / "state.db").write_bytes(b"this is no database" * 40)
    garbage_bytes = (garbage / "state.db").read_bytes()
    before = store_digest(root)

    report = invoke("--root", str(root), "repair", "--json")
    doc = json.loads(report.stdout)
    kinds = {(f["profile"], f["kind"], f["subject"]) for f in doc["findings"]}
    assert ("alpha", "wrong_store", "moved-1") in kinds and ("alpha", "dangling_parent", "dangling-1") in kinds
    assert ("alpha", "mislabelled", "labelled-1") in kinds
    assert ("beta", "loose_permissions", str(beta / "state.db")) in kinds
    assert any(f["profile"] == "broken" and f["kind"] == "unusable_store" for f in doc["findings"])
    assert report.exit_code == 2
    assert store_digest(root) == before
    assert stat.S_IMODE(os.stat(beta / "state.db").st_mode) == 0o644
    assert all(events(home_of(root, n)) == [] for n in ("default", "alpha", "beta"))

    fixed = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    doc = json.loads(fixed.stdout)
    assert fixed.exit_code == 2  # the garbage store: named, untouched; every other profile repaired
    assert any(str(garbage / "state.db") in e for e in doc["errors"])
    assert (garbage / "state.db").read_bytes() == garbage_bytes
    assert "moved-1" not in row_ids(alpha / "state.db") and "moved-1" in row_ids(beta / "state.db")
    assert row_ids(beta / "state.db", "SELECT id FROM messages WHERE session_id = 'moved-1'").__len__() == 3
    assert row_ids(alpha / "state.db", "SELECT id FROM sessions WHERE profile_name = 'alpha' AND id = 'labelled-1'")
    assert row_ids(alpha / "state.db", "SELECT id FROM sessions WHERE id = 'dangling-1' AND parent_session_id IS NULL")
    assert stat.S_IMODE(os.stat(beta / "state.db").st_mode) == 0o600
    (event,) = events(alpha)
    assert (event["session_id"], event["reason"], event["profile"]) == ("moved-1", "profile_repair", "alpha")
    assert events(beta) == [] and events(root) == []
    for name in ("default", "alpha", "beta"):
        db = home_of(root, name) / "state.db"
        assert store_health(db) == [] and fk_rows(db) == set()
        assert hermes_peer.hermes(home_of(root, name), "sessions", "list").returncode == 0

    again = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert [f for f in json.loads(again.stdout)["findings"] if f["profile"] != "broken"] == []
    assert len(events(alpha)) == 1

"""Issue 46: the deletions each Hermes release makes itself (`hermes sessions delete`, its SessionDB's
delete and prune) reach the profile's plugins through hermes-admin's next run, once, with the
hook's arguments; the plugins run in the release's own interpreter, whose plugin manager does not
know `on_session_delete` (the probe says so)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests import peer
from tests.conftest import NOW
from tests.helpers import events, install_plugins, row_ids

RELEASES = list(peer.RELEASES)
OK = (0, 1)

# The release's own deletes, on its own connection: one session by id, then its prune (90 days).
HERMES_DELETES = r"""
import json, sys
from pathlib import Path
from hermes_state import SessionDB
home = Path(sys.argv[1])
db = SessionDB(home / "state.db")
try:
    deleted = db.delete_session(sys.argv[2], sessions_dir=home / "sessions")
    pruned = db.prune_sessions(older_than_days=90, sessions_dir=home / "sessions")
finally:
    db.close()
print(json.dumps([deleted, pruned]))
"""


@pytest.fixture(params=RELEASES)
def release_home(request, tmp_path, hermes_peer):
    """A default profile written by the release, the recorder plugin enabled, no retention of ours
    (auto_prune off: Hermes' prune is the one that runs), and an admin config naming the release's
    interpreter (where its plugin manager loads the plugins)."""
    release = request.param
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, ["default"], NOW, sessions={"auto_prune": False}, orphans=False,
                                   release=release)
    install_plugins(root, ["recorder"], enabled=["recorder"])
    admin = tmp_path / "admin.yaml"
    admin.write_text(f"hermes_python: {hermes_peer.python(release)}\n")
    return release, root, kinds, ["--config", str(admin), "--root", str(root)]


def announced(home: Path) -> Counter:
    """How often each session was in an event the recorder heard."""
    return Counter(sid for e in events(home) for sid in (e["deleted_ids"] or [e["session_id"]]))


def test_hermes_own_deletes_are_announced_once(release_home, invoke):
    release, root, kinds, given = release_home
    built = row_ids(root / "state.db")
    first = invoke(*given, "run", "--yes", "--json")
    assert first.exit_code in OK, first.output
    document = json.loads(first.stdout)
    assert document["policies"][str(root)]["hermes"]["installation"]["delete_hook"] is False, release
    ours = built - row_ids(root / "state.db")  # the sweeps of our own first run (empty, ghosts)
    assert set(announced(root)) == ours  # the first look announced nothing of its own

    # Hermes deletes: its CLI, then its SessionDB's delete and prune.
    recent = kinds["default"]["recent"][0]
    done = peer.hermes(root, "sessions", "delete", recent, "--yes", release=release)
    assert done.returncode == 0, done.stderr
    inactive = kinds["default"]["inactive"][0]
    done = peer.run_script(HERMES_DELETES, home=root, release=release, args=[str(root), inactive])
    assert done.returncode == 0, done.stderr
    before_second = row_ids(root / "state.db")
    hermes_took = (built - ours) - before_second
    assert {recent, inactive} <= hermes_took and set(kinds["default"]["old_ended"]) <= hermes_took, release

    second = invoke(*given, "run", "--yes", "--json")
    assert second.exit_code in OK, second.output
    results = json.loads(second.stdout)["results"]
    noticed = [r for r in results if r["action"] == "noticed"]
    assert noticed and {i for r in noticed for d in r["done"] for i in d["ids"]} == hermes_took, release
    ours |= before_second - row_ids(root / "state.db")
    heard = announced(root)
    assert set(heard) == ours | hermes_took and set(heard.values()) == {1}, release  # each once
    reasons = {e["session_id"]: e["reason"] for e in events(root)}
    assert reasons[recent] == "delete" and reasons[inactive] == "delete"
    assert all(reasons[sid] == "prune" for sid in kinds["default"]["old_ended"]), reasons
    parent, children = kinds["default"]["delegate_parent"][0], set(kinds["default"]["delegate_child"])
    if parent in hermes_took:  # (pruned with its delegates: one event of them all, headed by the parent)
        (event,) = [e for e in events(root) if e["session_id"] == parent]
        assert set(event["deleted_ids"]) == {parent} | (children & hermes_took), (release, event)
    assert {e["profile"] for e in events(root)} == {"default"}
    assert {e["sessions_dir"] for e in events(root)} == {str(root / "sessions")}

    third = invoke(*given, "run", "--yes")
    assert third.exit_code in OK, third.output
    assert announced(root) == heard  # nothing twice

    shown = invoke(*given, "sessions", "show", recent)
    assert "deleted outside hermes-admin" in shown.output and "reason delete" in shown.output, shown.output


# A new store the release makes where the old one was (the user moved it away): one session, then
# the release deletes it.
NEW_STORE = r"""
import sys, time
from pathlib import Path
from hermes_state import SessionDB
home = Path(sys.argv[1])
db = SessionDB(home / "state.db")
try:
    if sys.argv[2] == "make":
        db.create_session("fresh-one", "cli", model="peer/model")
        db.append_message("fresh-one", "user", "hello")
        db.end_session("fresh-one", "user_exit")
    else:
        db.delete_session("fresh-one", sessions_dir=home / "sessions")
finally:
    db.close()
"""


def test_a_store_the_release_made_anew_starts_a_new_memory(release_home, invoke):
    release, root, kinds, given = release_home
    assert invoke(*given, "run", "--yes").exit_code in OK
    heard = announced(root)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        if (root / name).exists():
            (root / name).rename(root.parent / name)  # moved away while nothing holds it
    done = peer.run_script(NEW_STORE, home=root, release=release, args=[str(root), "make"])
    assert done.returncode == 0, done.stderr
    second = invoke(*given, "run", "--yes", "-v")
    assert second.exit_code in OK, second.output
    assert announced(root) == heard, release  # none of the old store's sessions announced
    assert "another file than at the last look" in second.output
    done = peer.run_script(NEW_STORE, home=root, release=release, args=[str(root), "delete"])
    assert done.returncode == 0, done.stderr
    assert invoke(*given, "run", "--yes").exit_code in OK
    assert announced(root) - heard == Counter({"fresh-one": 1}), release

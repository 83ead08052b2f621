"""Issue 36: every command on homes written by each Hermes release users run (0.19.0, 0.20.1, 0.22.2).

Each release's own SessionDB writes the homes (tests/compat/peer_build.py, scenario "releases"),
once per release; every test works on a copy. After each command of ours, tests/compat/checks.py
must find nothing (SQLite and both FTS checks, orphans by Hermes' rules, the release reading,
searching and writing the store), no session whose conversation holds a live turn lease or
compression lock is gone, and `purge` with 90 days keeps exactly what 0.22.2's own
auto-maintenance keeps on an identical copy.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests import peer
from tests.compat import checks
from tests.conftest import NOW
from tests.helpers import home_of, row_ids

RELEASES = list(peer.RELEASES)
PROFILES = ["default", "work"]
POLICY = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}
OK = (0, 1)  # done; done with warnings (README, exit codes)

# 0.22.2's own startup auto-maintenance (hermes_cli/cli_auto_maintenance.py calls this with the
# `sessions:` config; auto_prune is on by default there, 90 days): prune of ended, unpinned whole
# lineages that skips live leases and locks, then the reap of stale open rows, then VACUUM.
HERMES_MAINTENANCE = r"""
import json, sys
from pathlib import Path
home = Path(sys.argv[1])
from hermes_state import SessionDB
db = SessionDB(home / "state.db")
try:
    result = db.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=24, vacuum=True,
                                            sessions_dir=home / "sessions")
finally:
    db.close()
print(json.dumps(result))
"""

# Rows of a session that is gone, as a crash of an old build left them (foreign keys off), written
# on the release's own connection.
LEFTOVERS = r"""
import sys
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(Path(sys.argv[1]))
db._conn.execute("PRAGMA foreign_keys=OFF")
def work(conn):
    for i in range(3):
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                     (sys.argv[2], f"leftover {i}", float(sys.argv[3]) + i))
    conn.execute("INSERT INTO session_model_usage(session_id, model, input_tokens) VALUES (?, 'peer/model', 5)",
                 (sys.argv[2],))
db._execute_write(work)
db._conn.execute("PRAGMA foreign_keys=ON")
db.close()
"""


@pytest.fixture(scope="module", params=RELEASES)
def built(request, tmp_path_factory, hermes_peer):
    """A root written once per release: (release, root, kinds, guarded ids per profile)."""
    release = request.param
    root = tmp_path_factory.mktemp(f"hermes-{release}") / "hermes"
    kinds = hermes_peer.build_root(root, PROFILES, NOW, sessions=POLICY, orphans=False, release=release,
                                   scenario="releases")
    guarded = {name: checks.guarded_sessions(home_of(root, name) / "state.db", NOW) for name in PROFILES}
    return release, root, kinds, guarded


def copy_of(built, folder: Path) -> Path:
    _, root, _, _ = built
    shutil.copytree(root, folder, symlinks=True)
    return folder


def assert_clean(root: Path, release: str, guarded: dict, step: str) -> None:
    for name in PROFILES:
        home = home_of(root, name)
        assert checks.store_problems(home, release) == [], f"{release} {name} after {step}"
        missing = guarded[name] - row_ids(home / "state.db")
        assert not missing, f"{release} {name}: {step} deleted sessions under a live lease or lock: {sorted(missing)}"


def rows_of(db: Path, ids: set[str]) -> tuple[list, list]:
    """Every column of the sessions and message rows of `ids`: what a restore must put back as it was."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(ids))
        sessions = conn.execute(f"SELECT * FROM sessions WHERE id IN ({marks}) ORDER BY id", sorted(ids)).fetchall()
        messages = conn.execute(f"SELECT * FROM messages WHERE session_id IN ({marks}) ORDER BY id", sorted(ids)).fetchall()
        return sessions, messages
    finally:
        conn.close()


def test_purge_keeps_what_hermes_keeps_and_restore_puts_it_back(built, tmp_path, invoke):
    release, _, kinds, guarded = built
    ours = copy_of(built, tmp_path / "ours")
    theirs = copy_of(built, tmp_path / "theirs")
    before = {name: row_ids(home_of(ours, name) / "state.db") for name in PROFILES}

    for name in PROFILES:  # 0.22.2's own maintenance on the identical copy (newer than 0.19/0.20 stores: it upgrades them)
        done = peer.run_script(HERMES_MAINTENANCE, home=home_of(theirs, name), release=peer.NEWEST,
                               args=[str(home_of(theirs, name))], timeout=300)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert "error" not in result and result["pruned"] > 0, result

    purge = invoke("--root", str(ours), "purge", "--older-than", "90", "--yes", "--json")
    assert purge.exit_code in OK, purge.stdout + purge.stderr

    for name in PROFILES:
        k = kinds[name]
        kept = row_ids(home_of(ours, name) / "state.db")
        hermes_kept = row_ids(home_of(theirs, name) / "state.db")
        # What the scenario means, before the comparison (it names the kind that went astray).
        for kind in ("old_ended", "old_archived", "old_chain", "search_old", "big_tool_old", "routed_old",
                     "delegate_parent", "delegate_child"):
            assert not set(k[kind]) & hermes_kept, f"0.22.2 kept {kind}"
        for kind in ("recent", "lineage", "revived", "locked_old", "pinned_old", "leased_chain", "leased_old",
                     "search_recent", "big_tool_recent", "routed_recent", "open_recent", "old_open"):
            assert set(k.get(kind, [])) <= hermes_kept, f"0.22.2 deleted {kind}"
        assert guarded[name] <= kept, f"{name}: purge deleted sessions under a live lease or lock: " \
                                      f"{sorted(guarded[name] - kept)}"
        assert kept == hermes_kept, (f"{name}: kept by us only {sorted(kept - hermes_kept)}, "
                                     f"by Hermes 0.22.2 only {sorted(hermes_kept - kept)}")
    assert_clean(ours, release, guarded, "purge")

    # restore everything the purge exported: the rows come back as they were, every column
    for name in PROFILES:
        home = home_of(ours, name)
        gone = before[name] - row_ids(home / "state.db")
        assert gone
        exports = sorted((home / ".hermes-admin" / "exports").glob("*.jsonl.gz"))
        assert exports, f"{name}: the purge exported nothing"
        original = rows_of(home_of(built[1], name) / "state.db", gone)
        for export in exports:
            back = invoke("--root", str(ours), "restore", str(export), "-p", name, "--yes", "--json")
            assert back.exit_code in OK, back.stdout + back.stderr
        assert row_ids(home / "state.db") == before[name]
        assert rows_of(home / "state.db", gone) == original, f"{name}: restored rows differ from the originals"
    assert_clean(ours, release, guarded, "restore")


def test_every_command_leaves_a_store_the_release_uses(built, tmp_path, invoke):
    release, _, kinds, guarded = built
    root = copy_of(built, tmp_path / "hermes")
    for name in PROFILES:  # leftovers of a session that is gone, for prune-ghosts
        home = home_of(root, name)
        done = peer.run_script(LEFTOVERS, home=home, release=release,
                               args=[str(home / "state.db"), f"gone-{name}", str(NOW - 95 * 86400)])
        assert done.returncode == 0, done.stderr

    steps = [
        ("prune-ghosts", ["prune-ghosts", "--yes", "--json"]),
        ("sweep-empty", ["sweep-empty", "--yes", "--json"]),
        ("archive-inactive", ["archive-inactive", "--days", "30", "--yes", "--json"]),
        ("repair", ["repair", "--apply", "--yes", "--json"]),
        ("usage", ["usage", "--json"]),
    ]
    for step, args in steps:
        result = invoke("--root", str(root), *args)
        assert result.exit_code in OK, f"{release} {step}: {result.stdout}{result.stderr}"
        assert_clean(root, release, guarded, step)

    for name in PROFILES:
        db = home_of(root, name) / "state.db"
        k = kinds[name]
        ids = row_ids(db)
        assert not set(k["tui_ghost"] + k["empty_ended"]) & ids  # prune-ghosts, sweep-empty
        assert set(k["inactive"]) <= row_ids(db, "SELECT id FROM sessions WHERE archived = 1")
        if k.get("pinned_old"):
            assert set(k["pinned_old"]) <= row_ids(db, "SELECT id FROM sessions WHERE archived = 0")


def test_run_on_homes_of_the_release(built, tmp_path, invoke):
    release, _, kinds, guarded = built
    root = copy_of(built, tmp_path / "hermes")
    result = invoke("--root", str(root), "run", "--yes", "--json")
    assert result.exit_code in OK, f"{release} run: {result.stdout}{result.stderr}"
    assert_clean(root, release, guarded, "run")
    for name in PROFILES:
        k, ids = kinds[name], row_ids(home_of(root, name) / "state.db")
        assert not set(k["old_ended"] + k["old_chain"] + k["big_tool_old"]) & ids
        assert set(k["recent"] + k["lineage"] + k["open_recent"] + k.get("pinned_old", [])) <= ids
    listed = peer.hermes(root, "sessions", "list", release=release)
    assert listed.returncode == 0, listed.stderr


@pytest.mark.parametrize("target", ["locked_old", "leased_old", "leased_chain_root", "leased_chain_tip"])
def test_an_explicit_delete_spares_a_conversation_under_a_live_lease_or_lock(built, tmp_path, invoke, target):
    release, _, kinds, guarded = built
    k = kinds["default"]
    kind, _, end = target.rpartition("_") if target.startswith("leased_chain") else (target, "", "")
    if not k.get(kind):
        pytest.skip(f"Hermes {release} has no turn leases")
    sid = k[kind][-1 if end == "tip" else 0]
    root = copy_of(built, tmp_path / "hermes")
    result = invoke("--root", str(root), "sessions", "delete", sid, "-p", "default", "--yes", "--json")
    assert sid in row_ids(root / "state.db"), f"{release}: {target} deleted: {result.stdout}"
    assert result.exit_code in (1, 2), result.stdout + result.stderr  # refused, and said so
    assert_clean(root, release, guarded, "sessions delete")


RESUME = r"""
import json, sys
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(Path(sys.argv[1]))
try:
    db.reopen_session(sys.argv[2])  # what resuming the chat does
    print(json.dumps(bool(db.get_session(sys.argv[2])["archived"])))
finally:
    db.close()
"""


def test_a_chat_our_sweep_archived_comes_back_when_hermes_resumes_it(built, tmp_path, invoke):
    release, _, kinds, _ = built
    if release != peer.NEWEST:
        pytest.skip("auto_archived is 0.22.2's")
    root = copy_of(built, tmp_path / "hermes")
    sid = kinds["default"]["inactive"][0]
    result = invoke("--root", str(root), "archive-inactive", "--days", "30", "-p", "default", "--yes", "--json")
    assert result.exit_code in OK, result.stdout + result.stderr
    assert row_ids(root / "state.db", f"SELECT id FROM sessions WHERE archived = 1 AND id = '{sid}'") == {sid}
    done = peer.run_script(RESUME, home=root, release=release, args=[str(root / "state.db"), sid])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) is False, "Hermes left the resumed chat archived"

"""Hermes' managed scope (`hermes_cli/managed_scope.py`): what hermes-admin shows and applies is what the
release's own `load_config()` gives, run in its venv with HERMES_HOME, HOME and HERMES_MANAGED_DIR set.

Every release users run reads the scope (0.19.0 and 0.20.1 as 0.22.2 do: their own load_config is
the oracle, and each merges the managed file over the profile's), in both directions: a managed
3650 days without auto-archive over a user's 30 days with it deletes and archives nothing the
managed policy keeps; a managed 30 days over a user's 365 is shown and applied, and the purge keeps
exactly what 0.22.2's own auto-maintenance keeps with the retention its load_config gives.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import peer
from tests.conftest import NOW
from tests.helpers import home_of, row_ids

OK = (0, 1)
KEYS = ("auto_prune", "retention_days", "auto_archive", "auto_archive_days", "vacuum_after_prune")

# The release's own view of the profile's config: DEFAULT_CONFIG, the user's file, the managed one.
ORACLE = r"""
import json
from hermes_cli.config import load_config
print(json.dumps(load_config()["sessions"]))
"""

# 0.22.2's own auto-maintenance with the retention its own load_config() gives (the managed scope merged).
HERMES_MAINTENANCE = r"""
import json, sys
from pathlib import Path
from hermes_cli.config import load_config
from hermes_state import SessionDB
home = Path(sys.argv[1])
days = load_config()["sessions"]["retention_days"]
db = SessionDB(home / "state.db")
try:
    result = db.maybe_auto_prune_and_vacuum(retention_days=days, min_interval_hours=24, vacuum=False,
                                            sessions_dir=home / "sessions")
finally:
    db.close()
print(json.dumps({"days": days, "result": result}))
"""


def _in_release(code: str, home: Path, managed: Path, release: str, *args: str) -> str:
    env = dict(peer._env(home), HERMES_MANAGED_DIR=str(managed))
    done = subprocess.run([peer.python(release), "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _oracle(config_text: str, managed: Path, release: str, tmp_path: Path) -> dict:
    """The release's own load_config()["sessions"] for a home holding `config_text` (a home of its own:
    load_config writes backups beside the file)."""
    home = tmp_path / f"oracle-{release}"
    home.mkdir()
    (home / "config.yaml").write_text(config_text)
    return json.loads(_in_release(ORACLE, home, managed, release))


def _setup(tmp_path: Path, root: Path, release: str, user: str, managed_text: str) -> tuple[Path, Path]:
    (root / "config.yaml").write_text(user)
    managed = tmp_path / "managed"
    managed.mkdir(mode=0o755)
    (managed / "config.yaml").write_text(managed_text)
    admin = tmp_path / "admin.yaml"
    admin.write_text(f"hermes_python: {peer.python(release)}\n")  # the release's installation serves the root
    return managed, admin


@pytest.fixture(scope="module")
def built_022(tmp_path_factory, hermes_peer):
    root = tmp_path_factory.mktemp("hermes-0.22.2") / "hermes"
    kinds = hermes_peer.build_root(root, ["default"], NOW, orphans=False, release=peer.NEWEST, scenario="releases")
    return root, kinds["default"]


@pytest.mark.parametrize("release", list(peer.RELEASES))
def test_each_release_merges_the_managed_file_and_so_do_we(release, tmp_path, invoke, monkeypatch, hermes_peer):
    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "hermes"
    SynthStore(root / "state.db", version=30).close()
    user = "sessions:\n  auto_prune: true\n  retention_days: 30\n  auto_archive: true\n  auto_archive_days: 9\n"
    managed, admin = _setup(tmp_path, root, release, user,
                            "sessions:\n  retention_days: 3650\n  auto_archive: false\n")
    theirs = _oracle(user, managed, release, tmp_path)
    assert theirs["retention_days"] == 3650 and theirs["auto_archive"] is False  # the release merges it

    monkeypatch.setenv("HERMES_MANAGED_DIR", str(managed))
    shown = invoke("--root", str(root), "--config", str(admin), "config", "show", "--origin", "--json")
    assert shown.exit_code == 0, shown.stdout + shown.stderr
    row = json.loads(shown.stdout)["profiles"][0]
    for key in KEYS:
        if key in theirs:
            assert row["values"][key] == theirs[key], (key, row["values"][key], theirs[key])
    managed_file = str(managed / "config.yaml")
    assert row["origins"]["retention_days"] == f"{managed_file}: sessions.retention_days"
    assert row["origins"]["auto_archive"] == f"{managed_file}: sessions.auto_archive"
    assert row["origins"]["auto_archive_days"] == f"{root / 'config.yaml'}: sessions.auto_archive_days"

    listed = invoke("--root", str(root), "--config", str(admin), "profiles", "--json")
    assert listed.exit_code in OK, listed.stdout + listed.stderr
    policy = json.loads(listed.stdout)["profiles"][0]["policy"]
    assert policy["retention_days"] == 3650 and policy["auto_archive"] is False
    assert policy["origins"]["retention_days"] == f"{managed_file}: sessions.retention_days"
    assert json.loads(listed.stdout)["profiles"][0]["hermes"]["installation"]["managed_scope"] is True


def test_a_managed_ten_years_keeps_what_the_user_s_thirty_days_would_delete(built_022, tmp_path, invoke,
                                                                           monkeypatch):
    built, kinds = built_022
    root = shutil.copytree(built, tmp_path / "hermes", symlinks=True)
    user = "sessions:\n  auto_prune: true\n  retention_days: 30\n  auto_archive: true\n  auto_archive_days: 3\n"
    managed, admin = _setup(tmp_path, root, peer.NEWEST, user,
                            "sessions:\n  retention_days: 3650\n  auto_archive: false\n")
    theirs = _oracle(user, managed, peer.NEWEST, tmp_path)
    assert (theirs["retention_days"], theirs["auto_archive"]) == (3650, False)
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(managed))
    db = home_of(root, "default") / "state.db"
    archived_before = row_ids(db, "SELECT id FROM sessions WHERE archived = 1")

    dry = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run", "--json")
    assert dry.exit_code in OK, dry.stdout + dry.stderr
    policy = json.loads(dry.stdout)["policies"][str(root)]
    assert (policy["retention_days"], policy["auto_archive"]) == (3650, False)
    assert policy["origins"]["retention_days"] == f"{managed / 'config.yaml'}: sessions.retention_days"

    done = invoke("--root", str(root), "--config", str(admin), "run", "--yes", "--json")
    assert done.exit_code in OK, done.stdout + done.stderr
    results = {r["task"]: r for r in json.loads(done.stdout)["results"]}
    assert results["purge"]["done"] == [] and results["purge"]["rows"] == 0, results["purge"]
    assert results["auto_archive"]["status"] == "skipped", results["auto_archive"]
    kept = row_ids(db)
    for kind in ("old_ended", "old_archived", "inactive", "old_chain", "delegate_parent", "delegate_child",
                 "big_tool_old", "search_old", "routed_old"):
        assert set(kinds.get(kind, [])) <= kept, f"the run deleted {kind}, which the managed policy keeps"
    assert row_ids(db, "SELECT id FROM sessions WHERE archived = 1") == archived_before


def test_a_managed_thirty_days_over_the_user_s_year_is_shown_and_applied(built_022, tmp_path, invoke,
                                                                         monkeypatch):
    built, kinds = built_022
    ours = shutil.copytree(built, tmp_path / "ours", symlinks=True)
    hermes = shutil.copytree(built, tmp_path / "theirs", symlinks=True)
    user = "sessions:\n  auto_prune: true\n  retention_days: 365\n"
    managed, admin = _setup(tmp_path, ours, peer.NEWEST, user, "sessions:\n  retention_days: 30\n")
    (hermes / "config.yaml").write_text(user)
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(managed))

    dry = invoke("--root", str(ours), "--config", str(admin), "run", "--dry-run", "--json")
    assert dry.exit_code in OK, dry.stdout + dry.stderr
    policy = json.loads(dry.stdout)["policies"][str(ours)]
    assert policy["retention_days"] == 30
    assert policy["origins"]["retention_days"] == f"{managed / 'config.yaml'}: sessions.retention_days"

    said = json.loads(_in_release(HERMES_MAINTENANCE, hermes, managed, peer.NEWEST, str(hermes)))
    assert said["days"] == 30 and said["result"]["pruned"] > 0, said
    purge = invoke("--root", str(ours), "--config", str(admin), "purge", "--yes", "--json")
    assert purge.exit_code in OK, purge.stdout + purge.stderr
    kept, hermes_kept = row_ids(ours / "state.db"), row_ids(hermes / "state.db")
    assert set(kinds["old_ended"]) & row_ids(built / "state.db") and not set(kinds["old_ended"]) & kept
    assert kept == hermes_kept, (f"kept by us only {sorted(kept - hermes_kept)}, "
                                 f"by Hermes 0.22.2 only {sorted(hermes_kept - kept)}")

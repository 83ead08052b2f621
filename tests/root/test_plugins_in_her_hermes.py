"""Issue #28, as root: a user's own Hermes install under her home (`~/.hermes/hermes-agent/venv`)
serves her profiles' plugins; root maintains her root, and her plugins run as her, in her Hermes'
interpreter, never as root. Hermes' own plugin manager, run as her, is the oracle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.compat.test_compat_installation import KINDS, ORACLE, _write_plugin, heard
from tests.helpers import home_of, row_ids
from tests.root.conftest import as_user, build_user_root, chown_tree, root_owned

ENABLED = {"default": ["constants", "ep-plugin", "flat"], "work": ["httpx-user"]}
RECORD_UID = '\n_real_register = register\ndef register(ctx):\n    import os\n    _real_register(ctx)\n' \
             '    open(os.path.join(os.environ["HERMES_HOME"], "loaded-as-" + str(os.getuid())), "a").close()\n'


def her_hermes(user, user_hermes: Path) -> Path:
    """Her own install: a venv in her root (made as her), reaching the shared Hermes 0.19.0, with an
    entry-point plugin installed into it."""
    venv = user.root / "hermes-agent" / "venv"
    made = as_user(user, [str(user_hermes / "bin" / "python"), "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    mine = Path(as_user(user, [str(python), "-c", where]).stdout.strip())
    theirs = subprocess.run([str(user_hermes / "bin" / "python"), "-c", where], capture_output=True, text=True).stdout
    (mine / "hermes-peer.pth").write_text(theirs.strip() + "\n")
    _, imports, home = KINDS["ep-plugin"]
    _write_plugin(mine / "ep_plugin", "ep-plugin", imports, home)
    with open(mine / "ep_plugin" / "__init__.py", "a") as f:
        f.write(RECORD_UID)
    info = mine / "ep_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hermes_agent.plugins]\nep-plugin = ep_plugin\n")
    chown_tree(venv.parent, user)
    return python


def test_her_plugins_run_as_her_in_her_hermes(make_user, admin, user_hermes):
    alice = make_user("alice")
    build_user_root(alice, {"default": 30, "work": 30})
    python = her_hermes(alice, user_hermes)
    for profile, enabled in ENABLED.items():
        home = home_of(alice.root, profile)
        for key in ("constants", "httpx-user", "flat"):
            _, imports, how = KINDS[key]
            _write_plugin(home / "plugins" / key, key, imports, how)
            (home / "plugins" / key / "plugin.yaml").write_text(f"name: {key}\n")
            with open(home / "plugins" / key / "__init__.py", "a") as f:
                f.write(RECORD_UID)
        config = yaml.safe_load((home / "config.yaml").read_text()) if (home / "config.yaml").exists() else {}
        (config := config or {})["plugins"] = {"enabled": enabled}
        (home / "config.yaml").write_text(yaml.safe_dump(config))
        chown_tree(home / "plugins", alice)
        chown_tree(home / "config.yaml", alice)

    expected = {}
    for profile in ENABLED:  # what her Hermes registers on_session_delete for, asked as her
        done = as_user(alice, [str(python), "-c", ORACLE], env={"HERMES_HOME": str(home_of(alice.root, profile))})
        assert done.returncode == 0, done.stderr[-2000:]
        expected[profile] = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert expected == {"default": {"constants", "ep-plugin", "flat"}, "work": {"httpx-user"}}

    before = {p: row_ids(home_of(alice.root, p) / "state.db") for p in ENABLED}
    done = admin("--root", str(alice.root), "purge", "--older-than", "90", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    for profile in ENABLED:
        home = home_of(alice.root, profile)
        gone = before[profile] - row_ids(home / "state.db")
        assert gone, profile
        got = heard(home)
        assert set(got) == expected[profile], profile
        for plugin, events in got.items():
            assert sorted(i for e in events for i in e["ids"]) == sorted(gone), (profile, plugin)
            assert {(e["profile"], e["home"]) for e in events} == {(profile, str(home))}
        assert [p.name for p in home.glob("loaded-as-*")] == [f"loaded-as-{alice.uid}"]  # as her, never root
    listed = admin("--root", str(alice.root), "plugins", "list", "--json")
    for row in json.loads(listed.stdout)["installations"]:
        assert row["installation"]["python"] == str(python) and row["installation"]["hermes"] == "0.19.0"
    assert root_owned(alice.home) == []  # her probe cache included: written as her

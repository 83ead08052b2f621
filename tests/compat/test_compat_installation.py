"""Issue #28: plugins run where Hermes runs them. The real Hermes 0.19.0 in the installer's layout
(`<root>/hermes-agent/venv`), plugins of every kind real users have, and Hermes' own plugin manager
as the oracle of which plugins hear a profile's deletions."""

from __future__ import annotations

import json
import os
import subprocess
import time
import sys
from pathlib import Path

import yaml

from tests.helpers import home_of, row_ids

# One plugin per kind; each records what it heard, with the home Hermes' own code says it runs for.
PLUGIN = '''
import json, os
{imports}

def register(ctx):
    def on_session_delete(session_id, reason, profile, deleted_ids, sessions_dir, **rest):
        home = {home}
        with open(os.path.join(home, "heard-{name}.jsonl"), "a") as f:
            f.write(json.dumps({{"session_id": session_id, "ids": deleted_ids or [session_id], "profile": profile,
                                "sessions_dir": str(sessions_dir), "home": str(home)}}) + "\\n")
    ctx.register_hook("on_session_delete", on_session_delete)
'''
FROM_ENV = 'os.environ["HERMES_HOME"]'
KINDS = {  # key -> (where it lives, its imports, how it finds its home)
    "flat": ("user", "", FROM_ENV),
    "cat/nested": ("user", "", FROM_ENV),
    "constants": ("user", "from hermes_constants import get_hermes_home", "get_hermes_home()"),
    "httpx-user": ("user", "import httpx", FROM_ENV),
    "ep-plugin": ("entry point", "from hermes_constants import get_hermes_home", "get_hermes_home()"),
    "shipped": ("bundled", "from hermes_constants import get_hermes_home", "get_hermes_home()"),
    "broken": ("user", "import no_such_module_anywhere", FROM_ENV),
}
ENABLED = {
    "default": list(KINDS),
    "alpha": ["flat", "httpx-user", "ep-plugin", "shipped"],  # ep-plugin is disabled below: disabled wins
    "beta": [],
}
DISABLED = {"alpha": ["ep-plugin"]}

ORACLE = """
import json
from hermes_cli.plugins import PluginManager
manager = PluginManager()
manager.discover_and_load(force=True)
print(json.dumps(sorted(key for key, p in manager._plugins.items() if "on_session_delete" in p.hooks_registered)))
"""


def _write_plugin(folder: Path, name: str, imports: str, home: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "__init__.py").write_text(PLUGIN.format(imports=imports, home=home, name=name.replace("/", "-")))


def install_hermes(root: Path, peer_python: str, bundled: Path) -> Path:
    """Hermes 0.19.0 in the installer's layout: a venv of its own at <root>/hermes-agent/venv, whose
    site-packages reach the cached peer's (a .pth: seconds, not a reinstall), plus an entry-point plugin
    installed into it and the plugins of the bundled folder."""
    venv = root / "hermes-agent" / "venv"
    subprocess.run([peer_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    mine = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    theirs = subprocess.run([peer_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                            check=True, capture_output=True, text=True).stdout.strip()
    (mine / "hermes-peer.pth").write_text(theirs + "\n")
    place, imports, home = KINDS["ep-plugin"]
    _write_plugin(mine / "ep_plugin", "ep-plugin", imports, home)
    info = mine / "ep_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hermes_agent.plugins]\nep-plugin = ep_plugin\n")
    _, imports, home = KINDS["shipped"]
    _write_plugin(bundled / "shipped", "shipped", imports, home)
    (bundled / "shipped" / "plugin.yaml").write_text("name: shipped\n")
    return python


def setup_profiles(root: Path) -> None:
    for profile, enabled in ENABLED.items():
        home = home_of(root, profile)
        for key, (place, imports, how) in KINDS.items():
            if place == "user":
                _write_plugin(home / "plugins" / key, key, imports, how)
                (home / "plugins" / key / "plugin.yaml").write_text(f"name: {key.split('/')[-1]}\n")
        config = yaml.safe_load((home / "config.yaml").read_text()) if (home / "config.yaml").exists() else None
        config = config or {}
        config["plugins"] = {"enabled": enabled, "disabled": DISABLED.get(profile, [])}
        (home / "config.yaml").write_text(yaml.safe_dump(config))


def heard(home: Path) -> dict[str, list[dict]]:
    return {p.name[len("heard-"):-len(".jsonl")]: [json.loads(line) for line in p.read_text().splitlines()]
            for p in home.glob("heard-*.jsonl")}


def test_every_plugin_hermes_would_call_hears_every_row_once(hermes_peer, tmp_path, now, invoke, monkeypatch):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, list(ENABLED), now)
    bundled = tmp_path / "bundled-plugins"
    python = install_hermes(root, hermes_peer.python(), bundled)
    monkeypatch.setenv("HERMES_BUNDLED_PLUGINS", str(bundled))
    setup_profiles(root)

    # The oracle: what Hermes' own plugin manager registers on_session_delete for, per profile.
    expected = {}
    for profile in ENABLED:
        home = home_of(root, profile)
        done = subprocess.run([str(python), "-c", ORACLE], capture_output=True, text=True, timeout=120,
                              env={"HOME": str(tmp_path), "HERMES_HOME": str(home), "PATH": "/usr/bin:/bin",
                                   "HERMES_BUNDLED_PLUGINS": str(bundled)})
        assert done.returncode == 0, done.stderr
        expected[profile] = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert expected["default"] == {"flat", "cat/nested", "constants", "httpx-user", "ep-plugin", "shipped"}
    assert expected["alpha"] == {"flat", "httpx-user", "shipped"} and expected["beta"] == set()

    # plugins list: the installation, and Hermes' own view of which plugins exist and are enabled.
    listed = invoke("--root", str(root), "plugins", "list", "--json")
    doc = json.loads(listed.stdout)
    for row in doc["installations"]:
        found = row["installation"]
        assert found["python"] == str(python) and found["hermes"] == "0.19.0", row
        assert "hermes-agent/venv" in found["found_by"]
    for profile in ENABLED:
        shown = subprocess.run([str(python), "-m", "hermes_cli.main", "plugins", "list", "--json"],
                               capture_output=True, text=True, timeout=120,
                               env={"HOME": str(tmp_path), "HERMES_HOME": str(home_of(root, profile)),
                                    "PATH": "/usr/bin:/bin", "HERMES_BUNDLED_PLUGINS": str(bundled)})
        theirs = {p["name"]: p["status"] == "enabled" for p in json.loads(shown.stdout[shown.stdout.index("["):])}
        ours = {r["name"]: r["enabled"] for r in doc["plugins"] if r["profile"] == profile}
        assert ours == theirs, profile

    # Deletions: one named unit in two profiles, then a purge everywhere.
    before = {p: row_ids(home_of(root, p) / "state.db") for p in ENABLED}
    entries = {p: set(os.listdir(home_of(root, p))) for p in ENABLED}
    for profile in ("default", "alpha"):
        result = invoke("--root", str(root), "sessions", "delete", kinds[profile]["delegate_parent"][0], "--yes")
        assert result.exit_code == (1 if profile == "default" else 0), result.stderr  # `default`'s broken plugin
    result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes")
    assert result.exit_code == 1
    assert result.stderr.count("plugin broken: failed to load in") <= 1
    failed = [line for line in result.stderr.splitlines() if "plugin broken" in line]
    assert failed and str(python) in failed[0] and "no_such_module_anywhere" in failed[0]

    for profile in ENABLED:
        home = home_of(root, profile)
        gone = before[profile] - row_ids(home / "state.db")
        assert gone, profile
        got = heard(home)
        assert set(got) == {key.replace("/", "-") for key in expected[profile]}, profile
        for plugin, events in got.items():
            ids = [i for e in events for i in e["ids"]]
            assert sorted(ids) == sorted(gone), (profile, plugin)  # every row, exactly once
            assert {(e["profile"], e["sessions_dir"], e["home"]) for e in events} == {
                (profile, str(home / "sessions"), str(home))}, (profile, plugin)
        # Hermes' config reader makes a first-run home wherever it looks (SOUL.md, skills/, cron/...):
        # not when hermes-admin runs its plugin manager
        assert {e for e in set(os.listdir(home)) - entries[profile] if not e.startswith("heard-")} <= {
            ".hermes-admin", "state.db.auto-maintenance.lock"}, profile
    # Hermes' defaults were read from the installation: 0.19.0 ships vacuum_after_prune: true.
    dry = invoke("--root", str(root), "run", "--dry-run", "--json")
    policies = json.loads(dry.stdout)["policies"]
    policy = next(iter(policies.values()))
    assert policy["vacuum_after_prune"] is True and "Hermes 0.19.0" in policy["origins"]["vacuum_after_prune"]
    assert policy["hermes"]["installation"]["hermes"] == "0.19.0"


def test_without_an_installation_one_line_says_how_to_set_one(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default"], now)
    listed = invoke("--root", str(root), "profiles", "--json")
    (row,) = json.loads(listed.stdout)["profiles"]
    assert row["hermes"]["installation"] is None
    assert "hermes_python" in row["hermes"]["notes"][-1]
    assert row["policy"]["origins"]["retention_days"].startswith("built-in")
    # set through the admin config, it is used (and said where it came from)
    config = tmp_path / "admin.yaml"
    config.write_text(yaml.safe_dump({"hermes_python": hermes_peer.python()}))
    listed = invoke("--config", str(config), "--root", str(root), "profiles", "--json")
    (row,) = json.loads(listed.stdout)["profiles"]
    assert row["hermes"]["installation"]["found_by"] == f"hermes_python ({config}: hermes_python)"
    # and an interpreter that is not Hermes is refused with a line saying why
    config.write_text(yaml.safe_dump({"hermes_python": sys.executable}))
    listed = invoke("--config", str(config), "--root", str(root), "profiles", "--json")
    (row,) = json.loads(listed.stdout)["profiles"]
    assert row["hermes"]["installation"] is None and "hermes_cli" in row["hermes"]["notes"][0]


def test_a_hanging_plugin_in_hermes_interpreter_is_cut_short(hermes_peer, tmp_path, now, invoke):
    """The timeout holds in Hermes' interpreter as in ours: the plugin process is killed and
    restarted, the other plugin still hears every row."""
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, ["default"], now)["default"]
    install_hermes(root, hermes_peer.python(), tmp_path / "bundled")
    _write_plugin(root / "plugins" / "flat", "flat", "", FROM_ENV)
    (root / "plugins" / "flat" / "plugin.yaml").write_text("name: flat\n")
    (root / "plugins" / "sleeper").mkdir(parents=True)
    (root / "plugins" / "sleeper" / "plugin.yaml").write_text("name: sleeper\n")
    (root / "plugins" / "sleeper" / "__init__.py").write_text(
        "import time\ndef register(ctx):\n    ctx.register_hook('on_session_delete', lambda **kw: time.sleep(60))\n")
    config = yaml.safe_load((root / "config.yaml").read_text()) if (root / "config.yaml").exists() else None
    (config := config or {})["plugins"] = {"enabled": ["sleeper", "flat"], "hook_callback_timeout": 2}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    two = [kinds["recent"][0], kinds["old_ended"][0]]
    started = time.monotonic()
    result = invoke("--root", str(root), "sessions", "delete", *two, "--json", "--yes")
    assert time.monotonic() - started < 50  # cut short: each callback uncut sleeps 60 s
    failures = json.loads(result.stdout)["results"][0]["hook_failures"]
    assert sum("timed out" in f["text"] for f in failures) == 2 and result.exit_code == 1  # as in our interpreter
    assert sorted(i for e in heard(root)["flat"] for i in e["ids"]) == sorted(two)

"""Issue #28: finding a profile's Hermes installation, without Hermes (the compat and root tiers use
the real one). Candidates are probed, never trusted; the search order; shebangs; what root refuses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hermes_admin.layers import HermesPython, Origin, PolicyLayers
from hermes_admin.model import HERMES_SESSIONS_KEYS, Profile
from hermes_admin.profile import in_hermes, installation
from hermes_admin.profile.hooks import listing


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """No cache of the machine's and no `hermes` command (lookups and probes live in each finder).
    Root's cache is in root's home by the password database, whatever HOME says: a test's own, so
    that no other test writing root's cache at the same moment (another worker's) changes it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(installation, "own_home", lambda: tmp_path / "home")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))


def fake_hermes(folder: Path, version: str = "9.9.9", auto_prune=True, timeout=12, sessions=None,
                hooks: list[str] | None = None) -> Path:
    """A venv-less stand-in that answers the probe: our interpreter, with a `hermes_cli` on its path.
    `sessions`: its whole DEFAULT_CONFIG["sessions"] (else a small one with a key of its own);
    `hooks`: its plugin manager's VALID_HOOKS (else it has no `hermes_cli.plugins`)."""
    package = folder / "site" / "hermes_cli"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    if hooks is not None:
        (package / "plugins.py").write_text(f"VALID_HOOKS = set({sorted(hooks)!r})\n")
    sessions = sessions if sessions is not None else {"auto_prune": auto_prune, "retention_days": 30, "junk": "x"}
    (package / "config.py").write_text(
        f"DEFAULT_CONFIG = {{'sessions': {sessions!r}, 'plugins': {{'hook_callback_timeout': {timeout!r}}}}}\n")
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    # -I drops PYTHONPATH: the stand-in puts its site on the path the way a venv's python would; past
    # -I -B -c (shift 3) come the file, the mode and its arguments
    python.write_text(f"#!/bin/sh\nshift 3\nexec {sys.executable} -c 'import sys; sys.path.insert(0, \"{folder / 'site'}\"); "
                      f"sys.argv = sys.argv[1:]; exec(sys.argv[0])' \"$@\"\n")
    python.chmod(0o755)
    return python


def profile(root: Path) -> Profile:
    root.mkdir(parents=True, exist_ok=True)
    return Profile(root, "default", root)


def test_nothing_found_says_how_to_set_it(tmp_path):
    lookup = installation.Installations().for_profile(profile(tmp_path / "r"))
    assert lookup.installation is None
    assert "hermes_python" in lookup.notes[-1] and str(tmp_path / "r") in lookup.notes[-1]
    assert installation.defaults_layer(lookup) is None


def test_the_installers_layout_is_found_and_its_defaults_read(tmp_path):
    root = tmp_path / "r"
    python = fake_hermes(root / "hermes-agent" / "venv")
    lookup = installation.Installations().for_profile(profile(root))
    found = lookup.installation
    assert found is not None and found.python == str(python) and found.hermes == "9.9.9"
    assert "hermes-agent/venv" in found.found_by
    assert found.sessions == {"auto_prune": True, "retention_days": 30}  # unknown keys never cross
    assert found.hook_callback_timeout == 12
    layer, origin = installation.defaults_layer(lookup)
    assert layer["auto_prune"] is True and "9.9.9" in origin


def test_configured_python_wins_and_a_broken_one_is_told(tmp_path):
    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv", version="1.0")
    other = fake_hermes(tmp_path / "elsewhere", version="2.0")
    home = str(root)
    finder = installation.Installations.of(
        {home: PolicyLayers(hermes_python=HermesPython(str(other), Origin("a.yaml", "hermes_python")))}, False)
    assert finder.for_profile(profile(root)).installation.hermes == "2.0"
    finder = installation.Installations.of(
        {home: PolicyLayers(hermes_python=HermesPython(sys.executable, Origin("a.yaml")))}, False)
    lookup = finder.for_profile(profile(root))
    assert lookup.installation.hermes == "1.0"  # the next candidate, and a line about the refused one
    assert "hermes_cli" in lookup.notes[0] and sys.executable in lookup.notes[0]


def test_own_interpreter_by_choice_searches_nothing_and_warns_nothing(tmp_path):
    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv")
    finder = installation.Installations.of(
        {str(root): PolicyLayers(hermes_python=HermesPython("hermes-admin", Origin("a.yaml")))}, False)
    lookup = finder.for_profile(profile(root))
    assert lookup.installation is None and lookup.notes == () and lookup.own_by_choice == "a.yaml"


def test_each_job_has_a_finder_of_its_own(tmp_path):
    """A job's finder knows only its own homes' settings and probes: what an earlier job of the same
    process (the daemon's, an in-process worker's) configured or found never leaks into the next."""
    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv", version="1.0")
    other = fake_hermes(tmp_path / "elsewhere", version="2.0")
    first = installation.Installations.of(
        {str(root): PolicyLayers(hermes_python=HermesPython(str(other), Origin("admin config")))}, False)
    assert first.for_profile(profile(root)).installation.hermes == "2.0"
    assert installation.Installations.of({}, False).for_profile(profile(root)).installation.hermes == "1.0"
    assert first.for_profile(profile(root)).installation.found_by == "hermes_python (admin config)"


def test_the_hermes_command_names_its_interpreter(tmp_path):
    python = fake_hermes(tmp_path / "pipx" / "venvs" / "hermes-agent")
    command = tmp_path / "bin" / "hermes"
    command.parent.mkdir()
    command.write_text(f"#!{python}\nimport sys\n")
    found = installation.Installations().for_profile(profile(tmp_path / "r")).installation
    assert found.python == str(python) and str(command) in found.found_by
    long = tmp_path / "long"  # pip's form for a path too long for a shebang
    long.write_text(f"#!/bin/sh\n'''exec' {python} \"$0\" \"$@\"\n' '''\n")
    assert installation.shebang_python(str(long)) == str(python)
    assert installation.shebang_python(str(tmp_path / "missing")) is None


def test_a_probe_is_kept_until_what_it_read_changes(tmp_path):
    root = tmp_path / "r"
    python = fake_hermes(root / "hermes-agent" / "venv")
    assert installation.Installations(remember=True).for_profile(profile(root)).installation.hermes == "9.9.9"
    cache = installation._cache_path()
    assert json.loads(cache.read_text())[str(python)]["probe"]["hermes"] == "9.9.9"
    # a later job (a finder of its own) reads the cache: a probe that would now fail is not run
    assert installation.Installations(remember=True).for_profile(profile(root)).installation.hermes == "9.9.9"
    (python.parent.parent / "site" / "hermes_cli" / "__init__.py").write_text("raise ImportError('gone')\n")
    os.utime(python.parent.parent / "site" / "hermes_cli" / "__init__.py", ns=(1, 1))
    assert installation.Installations(remember=True).for_profile(profile(root)).installation is None  # probed again


def test_a_python_others_may_change_is_refused(tmp_path):
    python = fake_hermes(tmp_path / "shared")
    os.chmod(tmp_path / "shared" / "bin", 0o777)
    assert "writable by others" in installation.runnable(str(python))
    assert installation.runnable("python3") == "not an absolute path"


@pytest.mark.skipif(os.geteuid() != 0, reason="root's rule")
def test_root_runs_no_python_of_a_users(tmp_path):
    python = fake_hermes(tmp_path / "hers")
    os.chown(tmp_path / "hers" / "bin", 1234, 1234)
    assert "root runs nothing of a user's" in installation.runnable(str(python))


def test_the_script_run_in_hermes_interpreter_imports_nothing_of_ours(tmp_path):
    """It runs in Hermes' venv, which has no hermes-admin, click or peewee: the standard library only."""
    source = Path(in_hermes.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.strip().startswith(("import ", "from ")) and not line.strip().startswith("from __future__")}
    assert imports <= {"json", "os", "sys", "sqlite3", "pathlib", "importlib", "re", "inspect", "asyncio", "traceback",
                       "logging", "hermes_cli"}, imports


@pytest.mark.parametrize("raw", [b"", b"not json\n", b'{"plugins": "x", "errors": []}\n',
                                 b'{"plugins": [{"key": 1}], "errors": []}\n', b"[" * 100000 + b"\n"])
def test_a_listing_that_is_not_the_protocol_is_one_problem(raw):
    rows, problems = listing.read_answer(raw)
    assert rows == [] and problems == ["Hermes' plugin discovery gave no usable answer"]


# -- the installed release's own `sessions:` keys and defaults (issue #36) ---------------------

# DEFAULT_CONFIG["sessions"] as 0.20.1 and 0.22.2 ship it (the compat tier reads the real ones),
# each with a key no release hermes-admin knows, as a newer release would add one.
RELEASE_0201 = {"auto_prune": False, "retention_days": 90, "auto_archive": False, "auto_archive_days": 3,
                "vacuum_after_prune": True, "min_vacuum_interval_days": 30, "min_interval_hours": 24,
                "write_json_snapshots": False, "fts_optimize_notice": "advise", "cjk_fts": True,
                "search_slow_ms": 1000, "max_resume_messages": 20000, "max_export_messages": 20000,
                "brand_new_key": 1}
RELEASE_0222 = dict({k: v for k, v in RELEASE_0201.items() if k != "write_json_snapshots"},
                    auto_prune=True, show_subagents=False)


def test_the_probe_keeps_the_name_of_every_sessions_key_of_the_release(tmp_path):
    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv", sessions=RELEASE_0222)
    lookup = installation.Installations().for_profile(profile(root))
    assert lookup.installation.sessions_keys == set(RELEASE_0222)
    assert installation.sessions_keys(lookup) == set(RELEASE_0222)
    assert lookup.as_dict()["installation"]["sessions_keys"] == sorted(RELEASE_0222)
    # values: policy's only
    assert lookup.installation.sessions == {k: RELEASE_0222[k] for k in HERMES_SESSIONS_KEYS if k in RELEASE_0222}
    assert installation.sessions_keys(installation.Installations().for_profile(profile(tmp_path / "none"))) == frozenset()


@pytest.mark.parametrize("keys, known", [
    (["a", "b"], {"a", "b"}), (None, None), ("a", None), (["a", 1], None), (["x" * 65], None),
    ([f"k{i}" for i in range(installation.MAX_KEYS + 1)], None), (["bad\nname"], None),
])
def test_a_probe_s_key_names_are_checked(keys, known):
    import subprocess

    answer = {"hermes": "1.0", "sessions": {}, "sessions_keys": keys, "watch": []}
    done = subprocess.CompletedProcess([], 0, json.dumps(answer).encode() + b"\n", b"")
    found, _ = installation._read_probe(done)
    assert found.sessions_keys == known


def test_a_cached_answer_without_the_key_names_is_probed_again(tmp_path):
    """A cache written before probes named the release's keys would hide them until Hermes changes."""
    root = tmp_path / "r"
    python = fake_hermes(root / "hermes-agent" / "venv", sessions=RELEASE_0222)
    installation.Installations(remember=True).for_profile(profile(root))
    cache = installation._cache_path()
    data = json.loads(cache.read_text())
    data[str(python)]["probe"]["hermes"] = "from the cache"
    cache.write_text(json.dumps(data))
    assert installation.Installations(remember=True).for_profile(profile(root)).installation.hermes == "from the cache"  # the cache serves
    del data[str(python)]["probe"]["sessions_keys"]
    cache.write_text(json.dumps(data))
    found = installation.Installations(remember=True).for_profile(profile(root)).installation
    assert found.hermes == "9.9.9" and found.sessions_keys == set(RELEASE_0222)  # probed again
    assert json.loads(cache.read_text())[str(python)]["probe"]["sessions_keys"] == sorted(RELEASE_0222)


def _admin(tmp_path: Path, python) -> list[str]:
    path = tmp_path / "admin.yaml"
    path.write_text(f"hermes_python: {python}\n")
    return ["--config", str(path)]


def _home_with_config(tmp_path: Path, sessions: str) -> Path:
    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "h"
    SynthStore(root / "state.db", version=30).close()
    (root / "config.yaml").write_text(f"sessions:\n{sessions}")
    return root


def test_a_key_of_the_installed_release_is_never_unknown(tmp_path, invoke):
    """A key the installed Hermes defines, even one no release hermes-admin knows, draws no
    warning (and `run` exits 0); a typo still does; without the installation, the releases
    hermes-admin knows are the measure."""
    root = _home_with_config(tmp_path, "  show_subagents: true\n  brand_new_key: 2\n")
    python = fake_hermes(tmp_path / "venv", sessions=RELEASE_0222)
    done = invoke("--root", str(root), *_admin(tmp_path, python), "run", "--dry-run", "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    assert "unknown key" not in done.stdout + done.stderr
    checked = invoke("--root", str(root), *_admin(tmp_path, python), "config", "check", "--json")
    assert checked.exit_code == 0 and json.loads(checked.stdout)["warnings"] == []

    (root / "config.yaml").write_text("sessions:\n  show_subagents: true\n  brand_new_key: 2\n  auto_prun: true\n")
    doc = json.loads(invoke("--root", str(root), *_admin(tmp_path, python), "run", "--dry-run", "--json").stdout)
    assert [w for w in doc["warnings"] if "unknown key" in w] == [
        f"profile 'default': {root / 'config.yaml'}:4: sessions: unknown key(s) auto_prun (did you mean "
        "'auto_prune'?); not used"]

    alone = invoke("--root", str(root), *_admin(tmp_path, "hermes-admin"), "run", "--dry-run", "--json")
    (warning,) = [w for w in json.loads(alone.stdout)["warnings"] if "unknown key" in w]
    assert "auto_prun, brand_new_key" in warning and "show_subagents" not in warning  # 0.22.2's: known
    assert alone.exit_code == 1


@pytest.mark.parametrize("release, auto_prune", [(RELEASE_0201, False), (RELEASE_0222, True)], ids=["0.20.1", "0.22.2"])
def test_the_installed_release_s_defaults_apply_where_the_profile_sets_none(tmp_path, invoke, release, auto_prune):
    """0.22.2 prunes by default and 0.20.1 does not: `run` follows the release installed, and
    `config show --origin` says so, as `run --dry-run` does."""
    root = _home_with_config(tmp_path, "  retention_days: 60\n")
    python = fake_hermes(tmp_path / "venv", version="0.x", sessions=release)
    doc = json.loads(invoke("--root", str(root), *_admin(tmp_path, python), "run", "--dry-run", "--json").stdout)
    policy = doc["policies"][str(root)]
    assert (policy["auto_prune"], policy["vacuum_after_prune"], policy["retention_days"]) == (auto_prune, True, 60)
    assert policy["origins"]["auto_prune"] == f"defaults of Hermes 0.x at {python}: auto_prune"
    assert policy["origins"]["retention_days"] == f"{root / 'config.yaml'}: sessions.retention_days"
    purge = [r for r in doc["results"] if r["task"] == "purge"]
    assert (purge[0]["status"] == "skipped") is (not auto_prune)
    shown = json.loads(invoke("--root", str(root), *_admin(tmp_path, python), "config", "show", "--origin",
                              "--json").stdout)
    (row,) = shown["profiles"]
    assert row["values"]["auto_prune"] is auto_prune and row["values"]["vacuum_after_prune"] is True
    assert row["origins"]["auto_prune"] == policy["origins"]["auto_prune"]


def test_without_an_installation_every_key_of_the_releases_we_know_is_known(tmp_path):
    from hermes_admin.profile import hermes_config

    assert set(RELEASE_0222) - {"brand_new_key"} <= hermes_config.KNOWN_SESSIONS_KEYS
    assert set(RELEASE_0201) - {"brand_new_key"} <= hermes_config.KNOWN_SESSIONS_KEYS
    for keys in hermes_config.RELEASE_SESSIONS_KEYS.values():
        (tmp_path / "config.yaml").write_text("sessions:\n" + "".join(f"  {k}: 1\n" for k in sorted(keys)))
        assert hermes_config.load(tmp_path).warnings == []
    (tmp_path / "config.yaml").write_text("sessions:\n  brand_new_key: 1\n  retention_dayz: 3\n")
    assert len(hermes_config.load(tmp_path).warnings) == 1 and "brand_new_key, retention_dayz" in \
        hermes_config.load(tmp_path).warnings[0].text()
    assert "brand_new_key" not in hermes_config.load(tmp_path, {"brand_new_key"}).warnings[0].text()


def test_a_command_that_reads_no_policy_knows_the_release_s_keys_too(tmp_path, invoke, now):
    """`sessions archive` builds no policy: the installation is looked up only for a key no release
    hermes-admin knows, and then that key is known as `run` knows it."""
    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("s1", started=now - 100, ended=now - 50, end_reason="idle")
    store.close()
    (root / "config.yaml").write_text("sessions:\n  show_subagents: true\n  brand_new_key: 2\n")
    python = fake_hermes(tmp_path / "venv", sessions=RELEASE_0222)
    done = invoke("--root", str(root), *_admin(tmp_path, python), "sessions", "archive", "s1", "--yes", "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    assert "unknown key" not in done.stdout + done.stderr
    alone = invoke("--root", str(root), *_admin(tmp_path, "hermes-admin"), "sessions", "unarchive", "s1", "--yes",
                   "--json")
    (warning,) = [w for w in json.loads(alone.stdout)["warnings"] if "unknown key" in w]
    assert "brand_new_key" in warning and "show_subagents" not in warning


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_profiles_and_usage_name_both_sqlites_and_warn_of_hermes_wal_reset_bug_on_a_wal_store(tmp_path, invoke,
                                                                                              journal):
    import json
    import sqlite3

    from hermes_admin.profile.store.keep_wal import FIXED, has_wal_reset_bug
    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv")  # our own interpreter: the system's SQLite (3.40.1 here)
    SynthStore(root / "state.db", version=30, journal=journal).close()
    buggy = has_wal_reset_bug(sqlite3.sqlite_version)
    for command in ("profiles", "usage"):
        done = invoke("--root", str(root), command, "--json")
        doc = json.loads(done.stdout)
        (row,) = doc["profiles"]
        ours = tuple(int(p) for p in row["sqlite"]["ours"].split("."))
        assert ours >= FIXED  # what every connection of ours runs on
        assert row["sqlite"]["hermes"] == sqlite3.sqlite_version
        warned = [w for w in doc.get("warnings", []) if "WAL-reset bug" in w]
        assert bool(warned) is (buggy and journal == "wal"), doc.get("warnings")
        assert done.exit_code == 0, done.stdout  # a listing: its warnings are said, the code stays 0

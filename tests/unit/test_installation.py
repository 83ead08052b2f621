"""Issue #28: finding a profile's Hermes installation, without Hermes (the compat and root tiers use
the real one). Candidates are probed, never trusted; the search order; shebangs; what root refuses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hermes_admin.profile import installation
from hermes_admin.profile.hooks import listing, worker
from hermes_admin.protocol import Profile


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """No lookups or probes of another test, no cache of the machine's, and no `hermes` command."""
    monkeypatch.setattr(installation, "_lookups", {})
    monkeypatch.setattr(installation, "_probes", {})
    monkeypatch.setattr(installation, "_configured", {})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))


def fake_hermes(folder: Path, version: str = "9.9.9", auto_prune=True, timeout=12) -> Path:
    """A venv-less stand-in that answers the probe: our interpreter, with a `hermes_cli` on its path."""
    package = folder / "site" / "hermes_cli"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "config.py").write_text(
        f"DEFAULT_CONFIG = {{'sessions': {{'auto_prune': {auto_prune!r}, 'retention_days': 30, 'junk': 'x'}},"
        f" 'plugins': {{'hook_callback_timeout': {timeout!r}}}}}\n")
    python = folder / "bin" / "python"
    python.parent.mkdir(parents=True)
    # -I drops PYTHONPATH: the stand-in puts its site on the path the way a venv's python would
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.path.insert(0, \"{folder / 'site'}\"); "
                      f"sys.argv = sys.argv[1:]; exec(sys.argv[0])' \"$4\" \"$5\" \"$6\"\n")
    python.chmod(0o755)
    return python


def profile(root: Path) -> Profile:
    root.mkdir(parents=True, exist_ok=True)
    return Profile(root, "default", root)


def test_nothing_found_says_how_to_set_it(tmp_path):
    lookup = installation.for_profile(profile(tmp_path / "r"))
    assert lookup.installation is None
    assert "hermes_python" in lookup.notes[-1] and str(tmp_path / "r") in lookup.notes[-1]
    assert installation.defaults_layer(lookup) is None


def test_the_installers_layout_is_found_and_its_defaults_read(tmp_path):
    root = tmp_path / "r"
    python = fake_hermes(root / "hermes-agent" / "venv")
    lookup = installation.for_profile(profile(root))
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
    installation.configure({home: {"hermes_python": str(other), "hermes_python_where": "a.yaml: hermes_python"}}, False)
    assert installation.for_profile(profile(root)).installation.hermes == "2.0"
    installation._lookups.clear()
    installation.configure({home: {"hermes_python": sys.executable, "hermes_python_where": "a.yaml"}}, False)
    lookup = installation.for_profile(profile(root))
    assert lookup.installation.hermes == "1.0"  # the next candidate, and a line about the refused one
    assert "hermes_cli" in lookup.notes[0] and sys.executable in lookup.notes[0]


def test_own_interpreter_by_choice_searches_nothing_and_warns_nothing(tmp_path):
    root = tmp_path / "r"
    fake_hermes(root / "hermes-agent" / "venv")
    installation.configure({str(root): {"hermes_python": "hermes-admin", "hermes_python_where": "a.yaml"}}, False)
    lookup = installation.for_profile(profile(root))
    assert lookup.installation is None and lookup.notes == () and lookup.own_by_choice == "a.yaml"


def test_the_hermes_command_names_its_interpreter(tmp_path):
    python = fake_hermes(tmp_path / "pipx" / "venvs" / "hermes-agent")
    command = tmp_path / "bin" / "hermes"
    command.parent.mkdir()
    command.write_text(f"#!{python}\nimport sys\n")
    found = installation.for_profile(profile(tmp_path / "r")).installation
    assert found.python == str(python) and str(command) in found.found_by
    long = tmp_path / "long"  # pip's form for a path too long for a shebang
    long.write_text(f"#!/bin/sh\n'''exec' {python} \"$0\" \"$@\"\n' '''\n")
    assert installation.shebang_python(str(long)) == str(python)
    assert installation.shebang_python(str(tmp_path / "missing")) is None


def test_a_probe_is_kept_until_what_it_read_changes(tmp_path):
    root = tmp_path / "r"
    python = fake_hermes(root / "hermes-agent" / "venv")
    installation.configure({}, remember=True)
    assert installation.for_profile(profile(root)).installation.hermes == "9.9.9"
    cache = installation._cache_path()
    assert json.loads(cache.read_text())[str(python)]["probe"]["hermes"] == "9.9.9"
    # a later process reads the cache: a probe that would now fail is not run
    installation._lookups.clear(), installation._probes.clear()
    (python.parent.parent / "site" / "hermes_cli" / "__init__.py").write_text("raise ImportError('gone')\n")
    os.utime(python.parent.parent / "site" / "hermes_cli" / "__init__.py", ns=(1, 1))
    assert installation.for_profile(profile(root)).installation is None  # a watched file changed: probed again


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


def test_the_worker_imports_nothing_of_ours(tmp_path):
    """It runs in Hermes' venv, which has no hermes-admin, click or peewee: the standard library only."""
    source = Path(worker.__file__).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.strip().startswith(("import ", "from ")) and not line.strip().startswith("from __future__")}
    assert imports <= {"json", "os", "sys", "pathlib", "importlib", "re", "inspect", "asyncio", "traceback",
                       "logging", "hermes_cli"}, imports


@pytest.mark.parametrize("raw", [b"", b"not json\n", b'{"plugins": "x", "errors": []}\n',
                                 b'{"plugins": [{"key": 1}], "errors": []}\n', b"[" * 100000 + b"\n"])
def test_a_listing_that_is_not_the_protocol_is_one_problem(raw):
    rows, problems = listing.read_answer(raw)
    assert rows == [] and problems == ["Hermes' plugin discovery gave no usable answer"]

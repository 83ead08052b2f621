import os
from pathlib import Path

import pytest

from hermes_admin.host.discovery import discover, discover_root, resolve_roots, root_of_home


@pytest.mark.parametrize("home, root", [
    ("/srv/h/profiles/work", "/srv/h"),
    ("/srv/h", "/srv/h"),
    ("/srv/h/profiles/.deleted", "/srv/h/profiles/.deleted"),
    ("/opt/data", "/opt/data"),
])
def test_root_of_home(home, root):
    assert root_of_home(Path(home)) == Path(root)


def test_resolve_roots_precedence(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    env = {"HERMES_HOME": str(b / "profiles" / "x")}
    assert resolve_roots([str(a)], ["/cfg"], environ=env) == [a]  # --root wins
    assert resolve_roots([], [str(a)], environ=env) == [a]  # then the config's roots
    assert resolve_roots([], [], environ=env) == [b]  # then HERMES_HOME, mapped to its root
    home_env = {"HOME": str(tmp_path)}
    default = resolve_roots([], [], environ=home_env)
    assert default[0].name.startswith(".hermes")  # else the platform default
    assert resolve_roots([str(a), str(a)], environ={}) == [a]  # no duplicates


def test_discovery_skips_what_is_not_a_profile(tmp_path):
    root = tmp_path / "h"
    prof = root / "profiles"
    for name in ("work", "b-2", "Bad", "default", ".deleted", ".x.staging-12", "gone"):
        (prof / name).mkdir(parents=True)
    (prof / ".deleted" / "gone").write_text("deleted\n")
    (prof / "afile").write_text("")
    found = discover_root(root)
    assert [p.name for p in found.profiles] == ["default", "b-2", "work"]
    assert found.profiles[0].home == root
    reasons = {s.path.name: s.reason for s in found.skipped}
    assert set(reasons) == {"Bad", "default", ".deleted", ".x.staging-12", "gone"}
    assert "marked deleted" in reasons["gone"]


def test_missing_root_and_profile_filter(tmp_path):
    (tmp_path / "h" / "profiles" / "work").mkdir(parents=True)
    found = discover([tmp_path / "h", tmp_path / "nope"], only=["work"])
    assert [p.name for p in found.profiles] == ["work"]
    assert found.missing_roots == [tmp_path / "nope"]


def test_home_without_store_is_a_profile(tmp_path):
    (tmp_path / "h").mkdir()
    (profile,) = discover_root(tmp_path / "h").profiles
    assert not profile.has_store()


def test_one_root_spelled_two_ways_is_one_root(tmp_path):
    (tmp_path / "h" / "profiles" / "work").mkdir(parents=True)
    odd = str(tmp_path / "h" / "profiles" / "..")
    assert resolve_roots([str(tmp_path / "h"), odd], environ={}) == [tmp_path / "h"]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's defaults")
def test_roots_defaults_come_from_the_password_database_never_home(tmp_path, monkeypatch):
    """Under `sudo -E` root's HOME is a user's: root's default root, config dirs and presets are
    root's own all the same (an XDG folder counts only where it is root's alone)."""
    import pwd

    from hermes_admin.host import config

    mine = Path(pwd.getpwuid(0).pw_dir)
    theirs = tmp_path / "alice"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    monkeypatch.setenv("HOME", str(theirs))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(theirs / ".config"))
    monkeypatch.delenv("HERMES_HOME", raising=False)
    assert resolve_roots([], [], environ={"HOME": str(theirs)}) == [mine / ".hermes"]
    assert resolve_roots(["~/x"], environ={}) == [mine / "x"]
    assert config.user_config_dir() == mine / ".config" / "hermes-admin"
    assert config.preset_dirs()[0] == mine / ".config" / "hermes-admin" / "profiles"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # root's alone: taken
    assert config.user_config_dir() == tmp_path / "xdg" / "hermes-admin"

"""Hermes' managed scope without Hermes (tests/compat/test_compat_managed_scope.py has each release's own
load_config as the oracle): where it is found, how it merges, a malformed file, the admin config
beside it, an installation whose release has none, and what root refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_admin.host import managed as found
from hermes_admin.layers import Layer, Managed, Origin, PolicyLayers
from hermes_admin.profile import hermes_config, installation
from hermes_admin.profile.policy import overridden_by_managed
from hermes_admin.synth.builder import SynthStore
from tests.unit.test_installation import fake_hermes, profile

USER = "sessions:\n  auto_prune: true\n  retention_days: 30\n  auto_archive: true\n"


def managed_dir(tmp_path: Path, text: str | None = "sessions:\n  retention_days: 3650\n  auto_archive: false\n") -> Path:
    folder = tmp_path / "managed"
    folder.mkdir(mode=0o755, parents=True)
    folder.chmod(0o755)
    if text is not None:
        (folder / "config.yaml").write_text(text)
        (folder / "config.yaml").chmod(0o644)
    return folder


def a_root(tmp_path: Path, config: str = USER) -> Path:
    root = tmp_path / "hermes"
    SynthStore(root / "state.db", version=30).close()
    (root / "config.yaml").write_text(config)
    return root


# -- where it is found, as Hermes' get_managed_dir() ---------------------------------------

def test_the_variable_names_the_folder_and_one_that_is_not_there_means_none(tmp_path, monkeypatch):
    folder = managed_dir(tmp_path)
    monkeypatch.setattr(found, "DEFAULT_DIR", managed_dir(tmp_path / "etc"))
    assert found.folder({"HERMES_MANAGED_DIR": str(folder)}) == folder
    assert found.folder({"HERMES_MANAGED_DIR": str(tmp_path / "gone")}) is None  # no falling back to /etc/hermes
    assert found.folder({"HERMES_MANAGED_DIR": "  "}) == found.DEFAULT_DIR  # blank: Hermes' default
    assert found.folder({}) == found.DEFAULT_DIR
    scope = found.read({"HERMES_MANAGED_DIR": str(folder)})
    assert scope == found.Scope(Managed(str(folder / "config.yaml"), {"retention_days": 3650, "auto_archive": False}))


@pytest.mark.parametrize("text", [None, "", "# nothing pinned\n", "{}\n"])
def test_no_file_or_an_empty_one_is_no_scope_and_no_warning(tmp_path, text):
    assert found.read({"HERMES_MANAGED_DIR": str(managed_dir(tmp_path, text))}) == found.Scope()


@pytest.mark.parametrize("text, why", [("sessions: [unclosed\n", "not valid YAML"),
                                       ("- a list\n", "holds list, not a mapping"),
                                       ("just text\n", "holds str, not a mapping")])
def test_a_malformed_file_is_ignored_with_a_warning_naming_it(tmp_path, text, why):
    folder = managed_dir(tmp_path, text)
    scope = found.read({"HERMES_MANAGED_DIR": str(folder)})
    assert scope.managed is None
    assert scope.warning.startswith(str(folder / "config.yaml")) and why in scope.warning


# -- how it merges, as Hermes' _deep_merge ----------------------------------------------

@pytest.mark.parametrize("own, sessions, plugins, expected", [
    ({"sessions": {"retention_days": 30, "auto_archive": True}}, {"retention_days": 3650}, None,
     {"sessions": {"retention_days": 3650, "auto_archive": True}}),
    ({}, {"retention_days": 30}, None, {"sessions": {"retention_days": 30}}),  # Hermes' defaults are a mapping
    ({"sessions": {"retention_days": 30}}, None, None, {"sessions": {"retention_days": 30}}),  # none pinned
    ({"sessions": {"source_retention_days": {"cron": 60, "telegram": 10}}}, {"source_retention_days": {"cron": 5}},
     None, {"sessions": {"source_retention_days": {"cron": 5, "telegram": 10}}}),  # per leaf
    ({"sessions": {"source_retention_days": {"cron": 60}}}, {"source_retention_days": None}, None,
     {"sessions": {"source_retention_days": {"cron": 60}}}),  # null over a mapping changes nothing
    ({"plugins": {"enabled": ["a", "b"], "hook_callback_timeout": 12}}, None, {"enabled": ["c"]},
     {"plugins": {"enabled": ["c"], "hook_callback_timeout": 12}}),  # a list is replaced, whole
])
def test_merged_as_hermes_merges(own, sessions, plugins, expected):
    assert hermes_config.merged(own, Managed("/etc/hermes/config.yaml", sessions, plugins)) == dict(own, **expected)


def test_each_value_says_which_file_it_came_from(tmp_path):
    root = a_root(tmp_path, USER + "plugins:\n  enabled: [audit]\n  hook_callback_timeout: 5\n")
    pinned = Managed("/m/config.yaml", {"retention_days": 3650}, {"hook_callback_timeout": 0, "enabled": []})
    config = hermes_config.load(root, (), pinned)
    assert config.section("sessions") == {"auto_prune": True, "retention_days": 3650, "auto_archive": True}
    assert config.own_section("sessions")["retention_days"] == 30
    assert config.plugins_enabled == [] and config.hook_timeout == 600.0  # Hermes' 0: our ceiling
    timeout, origin = installation.hook_timeout(config, installation.Lookup(None))
    assert (timeout, origin) == (600.0, "/m/config.yaml: plugins")
    assert hermes_config.load(root).plugins_enabled == ["audit"]  # without the scope: the file's own


# -- the admin config beside it --------------------------------------------------------------

def test_an_admin_value_the_managed_scope_overrides_is_named_once_per_key():
    admin = Origin("/etc/hermes-admin/config.yaml", "profiles.work")
    layers = PolicyLayers(entry=Layer({"retention_days": "120d", "auto_archive": False}, admin),
                          defaults=Layer({"retention_days": 10, "auto_prune": True},
                                         Origin("/etc/hermes-admin/config.yaml", "defaults")))
    pinned = Managed("/etc/hermes/config.yaml", {"retention_days": 3650, "auto_archive": False, "auto_prune": True})
    said = overridden_by_managed(layers, pinned)
    assert [(o.section, key) for o, key, _ in said] == [("profiles.work", "retention_days")]  # the same values: quiet
    assert said[0][2].startswith("profiles.work.retention_days ('120d') is not applied: Hermes' managed scope sets "
                                 "/etc/hermes/config.yaml: sessions.retention_days (3650)")


# -- through the commands ----------------------------------------------------------------------

def test_run_shows_and_applies_the_managed_value_with_its_file(tmp_path, invoke, monkeypatch):
    root = a_root(tmp_path)
    folder = managed_dir(tmp_path)
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(folder))
    admin = tmp_path / "admin.yaml"
    admin.write_text("defaults: {auto_archive_days: 5, retention_days: 90}\n")
    done = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run", "--json")
    doc = json.loads(done.stdout)
    policy = doc["policies"][str(root)]
    assert (policy["retention_days"], policy["auto_archive"], policy["auto_prune"]) == (3650, False, True)
    assert policy["origins"]["retention_days"] == f"{folder / 'config.yaml'}: sessions.retention_days"
    assert policy["origins"]["auto_prune"] == f"{root / 'config.yaml'}: sessions.auto_prune"
    assert policy["origins"]["auto_archive_days"] == f"{admin}: defaults.auto_archive_days"
    # the admin config's defaults.retention_days (90) is not what runs: said, with its line
    warning = [p for p in doc["problems"] if p["kind"] == "managed_scope"]
    assert len(warning) == 1 and warning[0]["path"] == str(admin) and warning[0]["line"] == 1
    assert "defaults.retention_days (90) is not applied" in warning[0]["message"]
    assert done.exit_code == 1  # a warning
    shown = invoke("--root", str(root), "--config", str(admin), "config", "show", "--origin", "--json")
    assert json.loads(shown.stdout)["profiles"][0]["origins"]["auto_archive"] == \
        f"{folder / 'config.yaml'}: sessions.auto_archive"
    listed = json.loads(invoke("--root", str(root), "--config", str(admin), "profiles", "--json").stdout)
    assert listed["profiles"][0]["policy"]["retention_days"] == 3650


def test_a_malformed_managed_file_is_a_warning_and_changes_nothing(tmp_path, invoke, monkeypatch):
    root = a_root(tmp_path)
    folder = managed_dir(tmp_path, "sessions: {retention_days: 3650\n")
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(folder))
    done = invoke("--root", str(root), "run", "--dry-run", "--json")
    doc = json.loads(done.stdout)
    policy = doc["policies"][str(root)]
    assert (policy["retention_days"], policy["auto_archive"]) == (30, True)
    assert policy["origins"]["retention_days"] == f"{root / 'config.yaml'}: sessions.retention_days"
    warning = [w for w in doc["warnings"] if str(folder / "config.yaml") in w]
    assert len(warning) == 1 and "managed scope ignored" in warning[0]
    assert done.exit_code == 1
    checked = invoke("--root", str(root), "config", "check", "--json")
    assert checked.exit_code == 1 and any("managed scope ignored" in w["message"]
                                          for w in json.loads(checked.stdout)["warnings"])


def test_a_release_without_a_managed_scope_is_not_given_one(tmp_path, invoke, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = a_root(tmp_path)
    older = fake_hermes(tmp_path / "older")  # a hermes_cli without managed_scope.py
    newer = fake_hermes(tmp_path / "newer")
    (tmp_path / "newer" / "site" / "hermes_cli" / "managed_scope.py").write_text("")
    pinned = Managed(str(managed_dir(tmp_path) / "config.yaml"), {"retention_days": 3650})
    for python, scope in ((older, None), (newer, pinned)):
        finder = installation.Installations.of(
            {str(root): PolicyLayers(hermes_python=installation.HermesPython(str(python), Origin("admin")))},
            False, pinned)
        assert finder.for_profile(profile(root)).installation.managed_scope is (scope is not None)
        assert finder.managed_for(profile(root)) == scope
    nothing = installation.Installations.of({}, False, pinned)  # none found: its defaults are 0.19.0's, which reads it
    assert nothing.for_profile(profile(tmp_path / "bare")).installation is None
    assert nothing.managed_for(profile(tmp_path / "bare")) == pinned

    admin = tmp_path / "admin.yaml"
    admin.write_text(f"hermes_python: {older}\n")
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(Path(pinned.file).parent))
    done = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run", "--json")
    policy = json.loads(done.stdout)["policies"][str(root)]
    assert policy["retention_days"] == 30 and policy["hermes"]["installation"]["managed_scope"] is False


@pytest.mark.skipif(os.geteuid() != 0, reason="root's own refusal")
@pytest.mark.parametrize("loose", ["folder", "file"])
def test_as_root_a_managed_scope_others_may_write_is_refused(tmp_path, invoke, monkeypatch, loose):
    root = a_root(tmp_path)
    folder = managed_dir(tmp_path)
    (folder if loose == "folder" else folder / "config.yaml").chmod(0o777 if loose == "folder" else 0o666)
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(folder))
    with pytest.raises(found.Refused, match="not root's alone"):
        found.read()
    done = invoke("--root", str(root), "run", "--dry-run")
    assert done.exit_code == 78 and "refusing it as root" in done.stderr
    assert invoke("--root", str(root), "config", "check").exit_code == 78
    os.chown(folder, 0, 0)
    folder.chmod(0o755)
    (folder / "config.yaml").chmod(0o644)
    os.chown(folder / "config.yaml", 1, 1)  # another uid's file: refused as well
    assert invoke("--root", str(root), "run", "--dry-run").exit_code == 78


def test_the_daemon_reads_the_managed_file_afresh_at_each_run(tmp_path, monkeypatch):
    from hermes_admin.host.config import AdminConfig
    from hermes_admin.host.daemon import Daemon

    root = a_root(tmp_path)
    folder = managed_dir(tmp_path, "sessions:\n  retention_days: 3650\n")
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(folder))
    daemon = Daemon(load_config=AdminConfig, roots_given=(str(root),))
    first = daemon.work("sweep-empty", 0.0, False)
    assert first.policies[str(root)]["retention_days"] == 3650
    (folder / "config.yaml").write_text("sessions:\n  retention_days: 45\n")  # no SIGHUP
    assert daemon.work("sweep-empty", 0.0, False).policies[str(root)]["retention_days"] == 45


@pytest.mark.parametrize("own, pinned, heard", [([], ["recorder"], True), (["recorder"], [], False)])
def test_the_plugins_a_managed_scope_enables_hear_the_deletions(synth_root, tmp_path, invoke, monkeypatch,
                                                                own, pinned, heard):
    from tests.helpers import events, install_plugins, own_interpreter

    root, _ = synth_root
    install_plugins(root, ["recorder"], enabled=own)
    folder = managed_dir(tmp_path, f"plugins:\n  enabled: {json.dumps(pinned)}\n")
    monkeypatch.setenv("HERMES_MANAGED_DIR", str(folder))
    done = invoke("--root", str(root), *own_interpreter(tmp_path), "sweep-empty", "-p", "default", "--yes", "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["results"][0]["done"]  # something was deleted
    assert bool(events(root)) is heard

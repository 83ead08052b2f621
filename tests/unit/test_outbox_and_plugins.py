"""Durable events across a kill -9, plugin discovery, and the worker's identity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_admin.model import Profile
from hermes_admin.profile.hermes_config import HermesConfig
from hermes_admin.profile.hooks.bus import HookBus
from hermes_admin.profile.hooks.discovery import discover
from hermes_admin.synth.builder import SynthStore
from tests.helpers import TEST_PLUGINS, events, install_plugins, row_ids

KILLER = """
import os, signal, sys
from hermes_admin.profile.engine import faults
where = sys.argv[1]
if where == "after-commit":
    def dying(events):
        if events:  # right after the commit, before any plugin ran
            os.kill(os.getpid(), signal.SIGKILL)
    faults.arm("before_delivery", dying)
else:  # rows deleted inside the open transaction, which never commits
    faults.arm("rows_deleted", lambda: os.kill(os.getpid(), signal.SIGKILL))
from hermes_admin.cli.main import main
sys.argv = ["hermes-admin", *sys.argv[2:]]
main()
"""


@pytest.fixture
def root(tmp_path, now):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    for sid in ("a", "b", "c"):
        store.session(sid, started=now - 100, ended=now - 50, end_reason="x")
        store.messages(sid, 3, now - 100)
    store.close()
    install_plugins(root, ["recorder"], enabled=["recorder"])
    return root


def kill_during(root: Path, where: str, sid: str) -> int:
    env = dict(os.environ, HERMES_ADMIN_CONFIG="")
    return subprocess.run([sys.executable, "-c", KILLER, where, "--root", str(root), "sessions", "delete", sid],
                          env=env, capture_output=True).returncode


def test_kill_after_commit_is_delivered_once_on_next_start(root, invoke):
    assert kill_during(root, "after-commit", "a") == -9
    assert "a" not in row_ids(root / "state.db") and events(root) == []
    invoke("--root", str(root), "sessions", "delete", "b")  # the next start replays the outbox
    assert [e["session_id"] for e in events(root)] == ["a", "b"]
    invoke("--root", str(root), "sessions", "delete", "c")
    assert [e["session_id"] for e in events(root)] == ["a", "b", "c"]  # "a" only once


def test_kill_before_commit_never_fires(root, invoke):
    assert kill_during(root, "in-transaction", "a") == -9
    assert "a" in row_ids(root / "state.db")  # rolled back by SQLite
    invoke("--root", str(root), "sessions", "delete", "b")
    assert [e["session_id"] for e in events(root)] == ["b"]
    invoke("--root", str(root), "sessions", "delete", "a")
    assert [e["session_id"] for e in events(root)] == ["b", "a"]


def test_discovery_layouts_and_opt_in(tmp_path):
    home = tmp_path
    for folder in ("flat", "cat/nested", "cat/other", "__pycache__", "broken"):
        (home / "plugins" / folder).mkdir(parents=True)
    (home / "plugins" / "flat" / "plugin.yaml").write_text("name: flat-plugin\nhooks: [on_session_delete]\n")
    (home / "plugins" / "flat" / "__init__.py").write_text("")
    (home / "plugins" / "cat" / "nested" / "plugin.yml").write_text("name: nested\n")
    (home / "plugins" / "cat" / "nested" / "__init__.py").write_text("")
    (home / "plugins" / "cat" / "other" / "plugin.yaml").write_text("name: other\n")
    (home / "plugins" / "cat" / "other" / "__init__.py").write_text("")
    (home / "plugins" / "broken" / "plugin.yaml").write_text("name: broken\n")  # no __init__.py
    config = HermesConfig(home / "config.yaml", {"plugins": {
        "enabled": ["flat-plugin", "cat/nested", "other", "broken"], "disabled": ["other"]}})
    found = {p.key: p for p in discover(home, config, environ={})}
    assert set(found) >= {"flat", "cat/nested", "cat/other", "broken"}
    assert found["flat"].enabled and found["flat"].hooks == ["on_session_delete"]  # by manifest name
    assert found["cat/nested"].enabled  # by path key
    assert not found["cat/other"].enabled and "disabled" in found["cat/other"].why  # disabled wins
    assert not found["broken"].enabled and "__init__.py" in found["broken"].why
    safe = discover(home, config, environ={"HERMES_SAFE_MODE": "1"})
    assert not any(p.enabled for p in safe)
    none = discover(home, HermesConfig(home / "config.yaml", {}), environ={})
    assert not any(p.enabled for p in none)  # opt-in


@pytest.mark.parametrize("raw, expected", [(None, 30.0), (2, 2.0), (0, 600.0), (900, 600.0), (-1, 30.0),
                                           ("x", 30.0), (float("nan"), 30.0), (float("inf"), 30.0), (True, 30.0)])
def test_hook_timeout_setting(raw, expected):
    """0 is Hermes' "no cap": here it is hermes-admin's ceiling for unattended runs (600 s)."""
    plugins = {} if raw is None else {"hook_callback_timeout": raw}
    config = HermesConfig(Path("config.yaml"), {"plugins": plugins})
    assert config.hook_timeout == expected
    assert config.hook_timeout_or(12) == expected if raw is not None else config.hook_timeout_or(12) == 12
    assert config.hook_timeout == expected  # asked again: the same value, and no second warning
    assert len(config.warnings) == (raw is not None and raw not in (2, 0, 900))


def test_plugins_list_command(root, invoke):
    install_plugins(root, ["never", "deletion-audit"], enabled=["recorder", "deletion-audit"])
    result = invoke("--root", str(root), "plugins", "list", "--json")
    assert result.exit_code == 0
    rows = {r["key"]: r for r in json.loads(result.stdout)["plugins"]}
    assert rows["recorder"]["enabled"] and rows["deletion-audit"]["enabled"]
    assert not rows["never"]["enabled"] and "opt-in" in rows["never"]["why"]
    assert rows["deletion-audit"]["hooks"] == ["on_session_delete"]
    assert not (root / "never-imported-marker").exists()


def test_shipped_audit_plugin_logs_each_event(root, invoke):
    install_plugins(root, ["deletion-audit"], enabled=["deletion-audit"])
    invoke("--root", str(root), "sessions", "delete", "a")
    (line,) = (root / "logs" / "session-deletions.jsonl").read_text().splitlines()
    entry = json.loads(line)
    assert entry["session_id"] == "a" and entry["reason"] == "delete" and entry["profile"] == "default"


def test_the_bus_never_runs_another_users_plugins_as_root(now, tmp_path):
    """Plugins run as the home's owner because the whole worker is the owner (tests/root/ proves it
    with real users); a bus that finds itself root over someone else's home refuses."""
    if os.geteuid() != 0:
        pytest.skip("only root can own a home as someone else here")  # CI runs as root
    home = tmp_path / "h"
    store = SynthStore(home / "state.db", version=30)
    store.session("a", started=now)
    store.close()
    shutil.copytree(TEST_PLUGINS / "recorder", home / "plugins" / "recorder")
    os.chown(home, 65534, 65534)
    config = HermesConfig(home / "config.yaml", {"plugins": {"enabled": ["recorder"]}})
    bus = HookBus(Profile(tmp_path, "default", home), discover(home, config, environ={}), timeout=20)
    failures = bus.fire({"session_id": "a", "reason": "delete", "profile": "default",
                         "deleted_ids": None, "sessions_dir": str(home / "sessions")})
    bus.close()
    assert len(failures) == 1 and "refusing to run another user's plugins as root" in failures[0].message
    assert failures[0].plugin == "*" and failures[0].kind == "plugins not run"
    assert events(home) == []


def recorder_bus(tmp_path, now):
    """A profile with one session and the recorder plugin enabled, and a bus for it."""
    home = tmp_path / "h"
    store = SynthStore(home / "state.db", version=30)
    store.session("a", started=now)
    store.close()
    shutil.copytree(TEST_PLUGINS / "recorder", home / "plugins" / "recorder")
    config = HermesConfig(home / "config.yaml", {"plugins": {"enabled": ["recorder"]}})
    bus = HookBus(Profile(tmp_path, "default", home), discover(home, config, environ={}), timeout=20)
    return home, bus


def test_a_stop_while_the_plugin_process_starts_leaves_nothing_marked(tmp_path, now):
    """Found by bench/signals.py: a stop during the first start must not leave a half-started plugin
    process that later "delivers" events to no callback."""
    from hermes_admin import stopping
    from hermes_admin.profile.hooks.bus import DeliveryStopped

    home, bus = recorder_bus(tmp_path, now)
    payload = {"session_id": "a", "reason": "delete", "profile": "default", "deleted_ids": None,
               "sessions_dir": str(home / "sessions")}
    stopping.request()
    stopping._at -= 60  # as if asked a minute ago: past any grace
    try:
        with pytest.raises(DeliveryStopped):
            bus.fire(payload)
        assert bus.proc is None and bus.callbacks == []
    finally:
        stopping.clear()
    assert bus.fire(payload) == [] and [e["session_id"] for e in events(home)] == ["a"]  # started anew
    bus.close()


def test_a_stop_lets_the_event_already_sent_finish_once(tmp_path, now):
    """A stop request during a quick callback: that event is delivered (and marked), never repeated."""
    from hermes_admin import stopping

    home, bus = recorder_bus(tmp_path, now)
    bus._start()
    stopping.request()  # just now: within the grace
    try:
        assert bus.fire({"session_id": "a", "reason": "delete", "profile": "default", "deleted_ids": None,
                         "sessions_dir": str(home / "sessions")}) == []
    finally:
        stopping.clear()
        bus.close()
    assert [e["session_id"] for e in events(home)] == ["a"]


def test_a_slow_plugin_start_is_said_and_a_quick_one_is_not(tmp_path, now, monkeypatch):
    """A plugin process whose plugins take long to import says so while it starts, then when it did."""
    from hermes_admin.profile.hooks import bus as bus_module

    home, bus = recorder_bus(tmp_path, now)
    # A start well within the bound is not said: the bound made far longer than this machine, however
    # loaded, takes to start a plugin process, so that no slow start is mistaken for a quick one.
    monkeypatch.setattr(bus_module, "SLOW_START_S", 60.0)
    said: list[str] = []
    bus.log = said.append
    payload = {"session_id": "a", "reason": "delete", "profile": "default", "deleted_ids": None,
               "sessions_dir": str(home / "sessions")}
    try:
        assert bus.fire(payload) == []
    finally:
        bus.close()
    assert said == []  # a quick start: nothing said
    plugin = home / "plugins" / "recorder" / "__init__.py"
    plugin.write_text("import time\ntime.sleep(1.5)\n" + plugin.read_text())
    monkeypatch.setattr(bus_module, "SLOW_START_S", 0.5)  # its plugin sleeps 1.5 s as it starts
    slow = HookBus(bus.profile, bus.plugins, timeout=20)
    slow.log = said.append
    try:
        assert slow.fire(payload) == []
    finally:
        slow.close()
    assert len(said) == 2, said
    assert said[0].startswith("profile 'default': starting plugins in hermes-admin's interpreter: over 0.5 s")
    assert said[1].startswith("profile 'default': plugins started after ")


def test_a_replayed_events_plugin_failure_is_a_hook_failure_folded_with_the_runs_own(root, invoke):
    """What an earlier run left is delivered on the next start: its plugin's failure is a value on the
    run's first result (not a warning of its own), folded with the run's own repeats into one line."""
    install_plugins(root, ["raiser"], enabled=["raiser"])
    assert kill_during(root, "after-commit", "a") == -9
    result = invoke("--root", str(root), "sessions", "delete", "b", "--yes", "--json")
    assert result.exit_code == 1, result.stderr  # done, with the plugin's failure as a warning
    doc = json.loads(result.stdout)
    (first,) = doc["results"]
    assert [(f["plugin"], f["kind"], f["repeats"]) for f in first["hook_failures"]] == [
        (None, "interpreter", 0),  # no Hermes here: said with the first start, the replay's
        ("raiser", "raised", 0), ("raiser", "raised", 1)]  # the replayed event's, then the run's own again
    assert doc["warnings"] == [] and not any(p["kind"] == "replay" for p in doc["problems"])
    said = [line for line in result.stderr.splitlines() if "plugin raiser" in line]
    assert len(said) == 1 and said[0].endswith("(and 1 more time(s) this run)"), result.stderr


def test_an_enabled_name_no_plugin_answers_to_is_said_with_the_nearest(root, invoke):
    (root / "config.yaml").write_text("plugins:\n  enabled: recordr\n")
    listed = invoke("--root", str(root), "plugins", "list", "--json")
    [warning] = [w for w in json.loads(listed.stdout)["warnings"] if "plugins.enabled" in w]
    assert "'recordr', which no plugin of this profile is (did you mean 'recorder'?)" in warning
    check = invoke("--root", str(root), "config", "check")
    assert check.exit_code == 1
    assert f"{root / 'config.yaml'}:2: plugins.enabled names 'recordr'" in check.stderr
    (root / "config.yaml").write_text("plugins:\n  enabled: [recorder]\n")
    assert "plugins.enabled" not in invoke("--root", str(root), "config", "check").stderr

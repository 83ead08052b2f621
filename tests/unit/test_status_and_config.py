"""`status` (what runs recorded, the next scheduled run) and `config check|show --origin`."""

from __future__ import annotations

import json

import yaml

from tests.conftest import store_digest
from tests.helpers import home_of


def test_status_says_what_the_last_run_did_and_changes_nothing(synth_root, invoke):
    root, _ = synth_root
    never = json.loads(invoke("--root", str(root), "status", "--json").stdout)
    assert [p["last_run"] for p in never["profiles"]] == [None, None, None]
    assert invoke("--root", str(root), "purge", "--older-than", "90d", "--yes").exit_code in (0, 1)
    before = store_digest(root)
    records = sorted((root / ".hermes-admin").iterdir())
    result = invoke("--root", str(root), "status", "--json")
    assert result.exit_code in (0, 1), result.stderr  # as the purge exited
    doc = json.loads(result.stdout)
    last = {p["profile"]: p["last_run"] for p in doc["profiles"]}
    assert set(last) == {"default", "work", "legacy"}
    assert all(r["command"] == "purge" and r["result"] in ("ok", "warnings") and r["seconds"] >= 0 for r in last.values())
    assert last["work"]["changed"]["purge"]["rows"] > 0
    assert any(item["source"].startswith("daemon schedule.run") and item["next"] for item in doc["next"])
    assert store_digest(root) == before and sorted((root / ".hermes-admin").iterdir()) == records
    table = invoke("--root", str(root), "status")
    assert "purge: " in table.stdout and "deleted" in table.stdout
    assert "next: daemon schedule.run" in table.stdout and "next: systemd" in table.stdout  # all of it on stdout
    assert "if the daemon runs" not in table.stdout


def test_a_big_run_stays_after_idle_ones_and_a_fixed_store_shows_no_error_of_its_own(synth_root, invoke):
    """`status` as `systemctl status`: the last run and the last one that changed something; an error
    is the last run's (exit 2) or dated as an older run's once the store was fixed (exit 0)."""
    root, _ = synth_root
    path = home_of(root, "work") / "config.yaml"
    good = path.read_text()
    assert invoke("--root", str(root), "-q", "run", "--yes", "-p", "work").exit_code in (0, 1)
    path.write_text("sessions: {auto_prune: maybe}\n")
    assert invoke("--root", str(root), "run", "--yes", "-p", "work").exit_code == 2
    failing = invoke("--root", str(root), "status", "-p", "work")
    assert failing.exit_code == 2
    assert "work (" in failing.stdout and "): failed" in failing.stdout
    assert "    error: profile 'work': " in failing.stdout and "auto_prune must be true or false" in failing.stdout
    quiet = invoke("--root", str(root), "status", "-q")  # only what needs a look: the failed profile
    assert quiet.exit_code == 2 and "work (" in quiet.stdout and "): failed" in quiet.stdout
    assert "default (" not in quiet.stdout and "next:" not in quiet.stdout
    path.write_text(good)
    for _ in range(12):  # idle runs: the big one is kept all the same
        assert invoke("--root", str(root), "run", "--yes", "-p", "work").exit_code in (0, 1)
    result = invoke("--root", str(root), "status", "--json", "-p", "work")
    assert result.exit_code in (0, 1)
    (work,) = json.loads(result.stdout)["profiles"]
    assert work["last_run"]["result"] in ("ok", "warnings") and not work["last_run"]["errors"]
    assert work["last_change"] is not None and work["last_change"] is not work["last_run"]
    assert work["last_change"]["changed"]["ghost_prune"]["rows"] > 0
    assert work["last_error"]["in_last_run"] is False
    assert "auto_prune must be true or false" in work["last_error"]["message"]
    shown = invoke("--root", str(root), "status", "-p", "work").stdout
    assert "  last change: " in shown and "prune-ghosts: " in shown
    assert "an older run's (the runs since had none)" in shown and "    error:" not in shown
    if work["health"] == "ok":
        assert invoke("--root", str(root), "status", "-q", "-p", "work").stdout == ""  # all well: silence


def test_status_words_what_each_task_did():
    from hermes_admin.cli.status_cmd import changed_text

    assert changed_text({"purge": {"rows": 7, "units": 3, "files": 2},
                         "close_stale": {"rows": 4, "units": 4, "files": 0, "action": "close"},
                         "auto_archive": {"rows": 23, "units": 5, "files": 0, "action": "archive"},
                         "empty_sweep": {"rows": 0, "units": 0, "files": 0}}) == \
        "purge: 7 deleted, 2 file(s); close_stale: 4 closed; archive-inactive: 23 archived"
    assert changed_text({}) == "nothing changed"


def test_a_long_error_is_never_cut_on_a_narrow_terminal(synth_root, invoke, monkeypatch):
    from hermes_admin import tables

    root, _ = synth_root
    message = "profile 'work': " + " ".join(["a long reason"] * 30)
    state = home_of(root, "work") / ".hermes-admin"
    state.mkdir(exist_ok=True)
    (state / "last-run.json").write_text(json.dumps({"format": 2, "runs": [
        {"command": "run", "started": 1.7e9, "finished": 1.7e9 + 2, "seconds": 2.0, "result": "error",
         "changed": {}, "errors": [message], "warnings": []}]}))
    monkeypatch.setattr(tables, "_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    shown = invoke("--root", str(root), "status", "-p", "work")
    assert shown.exit_code == 2
    assert message in shown.stdout and "…" not in shown.stdout


def test_a_dry_run_records_nothing(synth_root, invoke):
    root, _ = synth_root
    invoke("--root", str(root), "run", "--dry-run")
    assert not (root / ".hermes-admin" / "last-run.json").exists()


def test_config_check_names_every_problem_with_its_file_and_line(synth_root, invoke, tmp_path):
    root, _ = synth_root
    admin = tmp_path / "admin.yaml"
    admin.write_text("defaults: {retention_days: 120 parsecs}\n"
                     "profiles:\n  work:\n    retension_days: 3\n  legacy: {preset: nosuch}\n")
    path = home_of(root, "legacy") / "config.yaml"
    path.write_text(yaml.safe_dump({"sessions": {"retention_days": "120d"}}))
    result = invoke("--root", str(root), "--config", str(admin), "config", "check")
    assert result.exit_code == 78
    lines = [line.replace("hermes-admin: error: ", "") for line in result.stderr.splitlines()]
    assert any(line.startswith(f"{admin}:1: defaults: retention_days: '120 parsecs' is not a duration") for line in lines)
    assert any(line.startswith(f"{admin}:4: profiles.work: unknown key retension_days") for line in lines)
    assert any(line.startswith(f"{admin}:5: preset 'nosuch' not found") for line in lines)
    assert any(line.startswith(f"{path}:2: sessions: retention_days must be a number, not '120d'") for line in lines)
    doc = json.loads(invoke("--root", str(root), "--config", str(admin), "config", "check", "--json").stdout)
    assert doc["ok"] is False and doc["exit_code"] == 78 and len(doc["problems"]) == 4


def test_config_check_of_a_good_setup_is_0(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "config", "check")
    assert result.exit_code == 0 and "config check: ok" in result.stderr


def test_config_show_origin(synth_root, invoke, tmp_path):
    root, _ = synth_root
    admin = tmp_path / "admin.yaml"
    admin.write_text("defaults: {retention_days: 4mo}\nprofiles: {work: {preset: lean}}\n")
    (home_of(root, "legacy") / "config.yaml").write_text("sessions: {auto_prune: true}\n")
    doc = json.loads(invoke("--root", str(root), "--config", str(admin), "config", "show", "--json").stdout)
    by = {p["profile"]: p for p in doc["profiles"]}
    assert by["legacy"]["values"]["retention_days"] == 120
    assert by["legacy"]["origins"]["retention_days"] == f"{admin}: defaults.retention_days"
    assert by["legacy"]["origins"]["auto_prune"].endswith("legacy/config.yaml: sessions.auto_prune")
    assert by["work"]["origins"]["retention_days"].endswith("lean.yaml: retention_days")
    assert by["default"]["origins"]["auto_archive"] == "built-in"
    plain = invoke("--root", str(root), "--config", str(admin), "config", "show", "--origin", "-p", "legacy")
    assert f"legacy\tretention_days\t120d\t{admin}: defaults.retention_days" in plain.stdout


def test_config_check_reads_the_plugin_keys_too(synth_root, invoke):
    root, _ = synth_root
    (home_of(root, "work") / "config.yaml").write_text("plugins:\n  enabled: []\n  hook_callback_timeout: soon\n")
    result = invoke("--root", str(root), "config", "check")
    assert result.exit_code == 1  # a warning: Hermes' own default applies
    assert f"{home_of(root, 'work') / 'config.yaml'}:3: plugins.hook_callback_timeout" in result.stderr
    assert result.stderr.count("plugins.hook_callback_timeout") == 1  # said once, however often it is read
    ran = invoke("--root", str(root), "run", "-p", "work", "--yes")  # the engine and the policy both read it
    assert ran.stderr.count("plugins.hook_callback_timeout") == 1, ran.stderr


def test_the_next_run_says_whether_anything_will_run_it():
    from hermes_admin.cli.status_cmd import next_text

    daemon = {"source": "daemon schedule.run", "next": 1.8e9, "jitter_seconds": None}
    assert next_text(dict(daemon, daemon={"unit": "system", "active": "active"})).endswith(
        "(system unit hermes-admin-daemon.service active)")
    assert next_text(dict(daemon, daemon={"unit": "system", "active": "inactive"})).startswith(
        "none: the system unit hermes-admin-daemon.service is inactive (it would run ")
    assert next_text(dict(daemon, daemon={"unit": None, "active": "not loaded"})).startswith(
        "none: no hermes-admin-daemon.service is loaded")
    assert next_text(dict(daemon, daemon={"unit": None, "active": None})).endswith(
        "if a daemon runs (systemd did not answer)")
    timer = {"source": "systemd system timer hermes-admin.timer", "next": "Fri 2026-12-04 03:31:07 UTC",
             "active": "active"}
    assert next_text(timer) == "Fri 2026-12-04 03:31:07 UTC (active)"
    assert next_text(dict(timer, next=None, active="inactive")) == "none (inactive)"
    assert next_text(dict(timer, next=None, active="not loaded")) == "none (not loaded)"


def test_config_show_and_check_say_when_no_hermes_installation_is_found(synth_root, invoke):
    """Without a Hermes, the built-in defaults are not Hermes' own: both commands say so, once a root."""
    root, _ = synth_root
    for command in (["config", "show"], ["config", "check"]):
        result = invoke("--root", str(root), *command)
        assert result.exit_code == 0, result.stderr
        assert result.stderr.count(f"no Hermes installation found for {root}") == 1, result.stderr
        assert result.stderr.count("Hermes 0.19.0's as hermes-admin knows them") == 1
    doc = json.loads(invoke("--root", str(root), "config", "show", "--json").stdout)
    assert any("no Hermes installation found" in n for n in doc["notes"])
    assert all(p["hermes"]["installation"] is None for p in doc["profiles"])
    assert json.loads(invoke("--root", str(root), "config", "check", "--json").stdout)["notes"]


def test_plugins_list_says_the_installation_once_for_the_profiles_it_serves(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "plugins", "list")
    lines = [line for line in result.stderr.splitlines() if "no Hermes installation found" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hermes-admin: default, legacy, work: no Hermes installation found")


def test_a_profiles_config_warnings_carry_their_profile_and_line_in_every_json(synth_root, invoke):
    root, _ = synth_root
    config = home_of(root, "work") / "config.yaml"
    config.write_text("sessions:\n  retention_dayz: 3\n  auto_prune: false\n  auto_prune: true\n"
                      "plugins:\n  hook_callback_timeout: soon\n")
    doc = json.loads(invoke("--root", str(root), "run", "-p", "work", "--yes", "--json").stdout)
    by_key = {p["key"]: p for p in doc["problems"] if p["kind"] == "hermes_config"}
    assert by_key["sessions.retention_dayz"]["line"] == 2 and "did you mean 'retention_days'" in \
        by_key["sessions.retention_dayz"]["message"]
    assert by_key["sessions.auto_prune"]["line"] == 4 and "written twice" in by_key["sessions.auto_prune"]["message"]
    assert by_key["plugins.hook_callback_timeout"]["line"] == 6
    assert all(p["profile"] == "work" and p["path"] == str(config) for p in by_key.values())
    check = json.loads(invoke("--root", str(root), "config", "check", "--json").stdout)
    assert {(w["line"], w["message"].split()[0].rstrip(":")) for w in check["warnings"]} >= {
        (2, "sessions"), (4, "sessions.auto_prune"), (6, "plugins.hook_callback_timeout")}


def test_a_key_written_twice_in_the_admin_config_or_a_preset_is_refused_with_its_line(synth_root, invoke, tmp_path):
    root, _ = synth_root
    admin = tmp_path / "admin.yaml"
    admin.write_text("defaults:\n  retention_days: 30\n  retention_days: 40\n")
    result = invoke("--root", str(root), "--config", str(admin), "config", "check")
    assert result.exit_code == 78
    assert f"{admin}:3: defaults.retention_days is written twice" in result.stderr
    ran = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run")
    assert ran.exit_code == 78 and f"{admin}:3: defaults.retention_days is written twice" in ran.stderr


def test_an_unknown_preset_is_answered_with_the_nearest(synth_root, invoke, tmp_path):
    root, _ = synth_root
    admin = tmp_path / "admin.yaml"
    admin.write_text("profiles:\n  work:\n    preset: leen\n")
    result = invoke("--root", str(root), "--config", str(admin), "config", "check")
    assert result.exit_code == 78 and f"{admin}:3: preset 'leen' not found" in result.stderr
    assert "(did you mean 'lean'?)" in result.stderr


def test_status_lists_the_profiles_in_the_order_every_command_does(tmp_path, invoke, now):
    from hermes_admin.synth.scenario import build_root

    root = tmp_path / "h"
    build_root(root, {"work": 22, "default": 30, "alpha": 22}, now=now)
    order = [r["profile"] for r in json.loads(invoke("--root", str(root), "profiles", "--json").stdout)["profiles"]]
    assert order == ["default", "alpha", "work"]
    status = json.loads(invoke("--root", str(root), "status", "--json").stdout)
    assert [r["profile"] for r in status["profiles"]] == order


def test_a_profiles_policy_error_carries_its_file_key_and_line_in_runs_json(synth_root, invoke):
    """What `config check` says with its line, `run --json` carries as fields too (line was null)."""
    root, _ = synth_root
    config = home_of(root, "work") / "config.yaml"
    config.write_text("model: x\nsessions:\n  retention_days: 0\n")
    doc = json.loads(invoke("--root", str(root), "run", "-p", "work", "--dry-run", "--json").stdout)
    [problem] = [p for p in doc["problems"] if p["kind"] == "policy"]
    assert (problem["path"], problem["key"], problem["line"]) == (str(config), "sessions.retention_days", 3)
    assert problem["message"] == "sessions: retention_days: 0 is under its minimum, 1d" and problem["skipped"]
    assert doc["exit_code"] == 2

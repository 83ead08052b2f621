"""One duration rule (unit and minimum per key) for config and options; one check of the admin
config for `config check`, `run` and the rest; global options after the command; `config show`;
the units `systemd print` writes run the policy that was checked."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from hermes_admin.layers import Layer, Origin, PolicyLayers
from hermes_admin import durations
from hermes_admin.profile.policy import PolicyError, with_origins


@pytest.mark.parametrize("key, value", [
    ("export_keep_days", "1m"), ("retention_days", 0), ("retention_days", -5), ("retention_days", "12h"),
    ("auto_archive_days", "2h"), ("min_keep_days", "1m"), ("worker_timeout", float("inf")),
    ("source_retention_days", {"cron": "1m"}),
])
def test_a_value_under_its_keys_minimum_is_refused_naming_the_key(key, value):
    layers = PolicyLayers(defaults=Layer({key: value}, Origin("/etc/a.yaml", "defaults")))
    with pytest.raises(PolicyError, match=f"/etc/a.yaml: defaults: {key}"):
        with_origins("p", layers, None)


@pytest.mark.parametrize("key, value, read", [
    ("export_keep_days", 0, 0), ("export_keep_days", "1mo", 30), ("retention_days", "1d", 1),
    ("lock_wait", "5s", 5), ("lock_wait", "2m", 120), ("quick_check_hours", 0, 0), ("worker_idle_timeout", "3s", 3),
])
def test_values_at_or_over_the_minimum_are_read_in_the_keys_unit(key, value, read):
    assert durations.read(key, value) == read


def test_durations_are_shown_back_as_durations():
    assert [durations.shown(s) for s in (90 * 86400, 36 * 3600, 300, 0, float("inf"))] == \
        ["90d", "1d12h", "5m", "0", "forever"]


def _config(tmp_path, text):
    path = tmp_path / "admin.yaml"
    path.write_text(text)
    return str(path)


def test_config_check_and_run_refuse_the_same_value_with_file_key_and_line(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = _config(tmp_path, "defaults:\n  retention_days: 120\n  export_keep_days: 1m\n")
    check = invoke("--root", str(root), "--config", config, "config", "check")
    assert check.exit_code == 78 and f"{config}:3: defaults: export_keep_days: '1m' is under its minimum" in check.stderr
    run = invoke("--root", str(root), "--config", config, "run", "--yes")
    assert run.exit_code == 78 and f"{config}:3:" in run.stderr


def test_a_defaults_typo_exits_78_with_a_suggestion_and_the_files_read(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = _config(tmp_path, "defaults:\n  retention_dayz: 30\n")
    check = invoke("--root", str(root), "--config", config, "config", "check")
    assert check.exit_code == 78 and "did you mean 'retention_days'?" in check.stderr
    assert invoke("--root", str(root), "--config", config, "run", "--dry-run").exit_code == 78
    ok = invoke("--root", str(root), "--config", _config(tmp_path, "defaults: {retention_days: 30}\n"), "config", "check")
    assert ok.exit_code in (0, 1) and "admin.yaml" in ok.stderr and "profiles/work/config.yaml" in ok.stderr


def test_a_default_every_profile_overrides_is_a_warning(synth_root, invoke, tmp_path):
    root, _ = synth_root
    entries = "".join(f"  {n}: {{retention_days: 40}}\n" for n in ("default", "work", "legacy"))
    config = _config(tmp_path, f"defaults:\n  retention_days: 30\nprofiles:\n{entries}")
    check = invoke("--root", str(root), "--config", config, "config", "check")
    assert check.exit_code == 1 and "defaults.retention_days is overridden in every profile" in check.stderr


@pytest.mark.parametrize("args", [
    ["exports", "prune", "--older-than", "1m"], ["purge", "--older-than", "12h", "--dry-run"],
    ["archive-inactive", "--days", "1h", "--dry-run"],
])
def test_options_under_the_minimum_need_force(synth_root, invoke, args):
    root, _ = synth_root
    result = invoke("--root", str(root), *args)
    assert result.exit_code == 2 and "under its minimum" in result.stderr and "--force" in result.stderr


def test_global_options_after_the_command(synth_root, invoke):
    root, _ = synth_root
    result = invoke("run", "--root", str(root), "-q", "--lock-wait", "5s", "--dry-run", "--json")
    assert result.exit_code in (0, 1), result.stderr
    assert json.loads(result.stdout)["results"]
    assert invoke("profiles", "--root", str(root), "--plain").exit_code == 0


def test_did_you_mean_for_commands_and_profiles(synth_root, invoke):
    root, _ = synth_root
    assert "Did you mean 'purge'?" in invoke("--root", str(root), "purg").stderr
    assert "Did you mean 'list'?" in invoke("--root", str(root), "sessions", "lst").stderr
    assert "did you mean 'work'?" in invoke("--root", str(root), "profiles", "-p", "wrok").stderr


def test_config_show_says_every_value_as_run_does(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = _config(tmp_path, "defaults: {lock_wait: 5m, export_keep_days: 30d}\n")
    shown = invoke("--root", str(root), "--config", config, "--plain", "config", "show", "--origin", "-p", "work")
    rows = {line.split("\t")[1]: line.split("\t")[2:] for line in shown.stdout.splitlines()[1:]}
    assert "origins" not in rows and "description" not in rows and "hook_callback_timeout" in rows
    assert rows["lock_wait"] == ["5m", f"{config}: defaults.lock_wait"] and rows["export_keep_days"][0] == "30d"
    assert rows["export_dir"][0].endswith("work/.hermes-admin/exports")
    dry = invoke("--root", str(root), "--config", config, "run", "--dry-run", "--json", "-p", "work")
    policy = next(iter(json.loads(dry.stdout)["policies"].values()))
    assert {k: rows[k][1] for k in rows} == {k: policy["origins"][k] for k in rows}


def test_the_printed_unit_runs_the_checked_policy(synth_root, invoke, tmp_path):
    """The command line of hermes-admin.service, run with --dry-run, shows the policy that
    `--config F --root R run --dry-run` shows."""
    root, _ = synth_root
    exports, metrics = tmp_path / "exports", tmp_path / "metrics" / "h.prom"
    config = _config(tmp_path, f"defaults: {{retention_days: 3d, export_dir: {exports}}}\nmetrics_file: {metrics}\n")
    printed = invoke("--config", config, "--root", str(root), "systemd", "print")
    assert printed.exit_code == 0, printed.stderr
    service = printed.stdout.split("# ---- hermes-admin.service ----")[1].split("# ----")[0]
    line = next(l for l in service.splitlines() if l.startswith("ExecStart="))
    paths = next(l for l in service.splitlines() if l.startswith("ReadWritePaths=")).split("=", 1)[1]
    assert f"-{exports}" in paths.split() and f"-{metrics.parent}" in paths.split() and f"-{root}" in paths.split()
    words = shlex.split(line.split("=", 1)[1])
    assert words[:3] == [sys.executable, "-m", "hermes_admin"] and words[-1] == "--yes"  # this very program
    env = dict(os.environ, HOME=str(tmp_path / "home"), HERMES_HOME="", HERMES_ADMIN_CONFIG="")
    unit = subprocess.run([*words[:-1], "--dry-run", "--json"], capture_output=True, text=True, env=env)
    checked = invoke("--config", config, "--root", str(root), "run", "--dry-run", "--json")
    strip = lambda doc: {h: {k: v for k, v in p.items() if k != "hermes"} for h, p in json.loads(doc)["policies"].items()}
    assert strip(unit.stdout) == strip(checked.stdout) and strip(unit.stdout)


def test_user_units_keep_the_metrics_folder(invoke, tmp_path):
    metrics = tmp_path / "m" / "h.prom"
    config = _config(tmp_path, f"metrics_file: {metrics}\n")
    printed = invoke("--config", config, "systemd", "print", "--user")
    assert f"-{metrics.parent}" in printed.stdout and f"--config {config}" in printed.stdout


def test_exclude_leaves_a_profile_out_unless_named(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = _config(tmp_path, f"exclude: [work, '{root}:legacy']\n")
    listed = json.loads(invoke("--root", str(root), "--config", config, "profiles", "--json").stdout)
    assert {p["name"] for p in listed["profiles"]} == {"default"}
    dry = json.loads(invoke("--root", str(root), "--config", config, "run", "--dry-run", "--json").stdout)
    assert {r["profile"] for r in dry["results"]} == {"default"}
    named = json.loads(invoke("--root", str(root), "--config", config, "profiles", "-p", "work", "--json").stdout)
    assert [p["name"] for p in named["profiles"]] == ["work"]
    bad = invoke("--root", str(root), "--config", _config(tmp_path, "exclude: {work: 1}\n"), "profiles")
    assert bad.exit_code == 78 and "exclude must be a list" in bad.stderr


def test_the_daemon_refuses_a_value_under_its_minimum(synth_root, tmp_path):
    root, _ = synth_root
    config = _config(tmp_path, "defaults:\n  export_keep_days: 1m\n")
    proc = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), "--config", config, "daemon"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, HERMES_ADMIN_CONFIG=""))
    assert proc.returncode == 78 and f"{config}:2: defaults: export_keep_days" in proc.stderr


def test_all_users_with_the_configs_roots_keeps_every_users_paths(invoke, tmp_path):
    config = _config(tmp_path, "roots: [/srv/hermes-a]\n")
    printed = invoke("--config", config, "--all-users", "systemd", "print").stdout
    service = printed.split("# ---- hermes-admin.service ----")[1].split("# ----")[0]
    paths = next(l for l in service.splitlines() if l.startswith("ReadWritePaths=")).split("=", 1)[1].split()
    assert {"-/srv/hermes-a", "-/home", "-/root/.hermes"} <= set(paths)
    assert f"--all-users --config {config} -q run --yes" in service


def test_the_units_run_the_hermes_admin_that_printed_them(tmp_path, monkeypatch):
    """Not the first hermes-admin on PATH (another version, or a stale copy that fails every night
    while SuccessExitStatus=1 calls it a success): the program that is running."""
    from hermes_admin.cli import ops_cmd

    mine, other = tmp_path / "venv" / "bin" / "hermes-admin", tmp_path / "stale" / "hermes-admin"
    for path in (mine, other):
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{other.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(sys, "argv", [str(mine), "systemd", "print"])
    assert ops_cmd.executable() == str(mine)
    monkeypatch.setattr(sys, "argv", ["/usr/lib/python3/dist-packages/hermes_admin/__main__.py"])
    assert ops_cmd.executable() == f"{sys.executable} -m hermes_admin"


@pytest.mark.parametrize("entries, warned", [
    ("", False),  # every profile takes the default: no warning
    ("profiles:\n  work: {retention_days: 30d}\n", False),  # the others still take it
    ("profiles:\n  default: {retention_days: 30d}\n  work: {retention_days: 30d}\n  legacy: {retention_days: 30d}\n",
     True),  # nobody takes it
])
def test_config_check_warns_of_a_default_only_when_no_profile_takes_it(synth_root, invoke, tmp_path, entries, warned):
    root, _ = synth_root
    config = _config(tmp_path, "defaults: {retention_days: 120d}\n" + entries)
    checked = invoke("--config", config, "--root", str(root), "config", "check", "--json")
    doc = json.loads(checked.stdout)
    said = [w for w in doc["warnings"] if "defaults.retention_days" in w["message"]]
    assert bool(said) == warned, doc
    assert checked.exit_code == (1 if warned else 0), checked.stderr


@pytest.mark.parametrize("text, said", [
    ("profiles:\n  wrok: {retention_days: 1d}\n", "profiles.wrok: matches no profile"),  # `work` stays on the defaults
    ("defaults: {export_keep_days: 0}\n", "export_keep_days 0"),  # no restore copy kept past the run
])
def test_config_check_says_what_run_would_warn_of(synth_root, invoke, tmp_path, text, said):
    root, _ = synth_root
    checked = invoke("--config", _config(tmp_path, text), "--root", str(root), "config", "check", "--json")
    warnings = [w for w in json.loads(checked.stdout)["warnings"] if said in w["message"]]
    assert warnings and checked.exit_code == 1, checked.stdout
    if "wrok" in said:
        assert warnings[0]["line"] == 2


def test_a_commands_option_before_the_command_says_where_it_goes(synth_root, invoke):
    root, _ = synth_root
    said = invoke("--root", str(root), "-p", "work", "run")
    assert said.exit_code != 0  # a usage error (64 from the console script)
    assert "it is an option of 'run': write it after the command" in said.stderr
    assert "option of 'sessions list'" in invoke("--root", str(root), "-p", "work", "sessions", "list").stderr
    assert "option of 'run'" in invoke("--root", str(root), "-p", "purge", "run").stderr  # its value, not a command
    assert "Did you mean '--verbose'?" in invoke("--bogus", "run").stderr  # not a command's: as before


def test_config_check_names_the_files_it_read_a_refused_one_too(synth_root, invoke, tmp_path):
    root, _ = synth_root
    refused = _config(tmp_path, "defaultz: {retention_days: 30}\n")
    said = invoke("--root", str(root), "--config", refused, "config", "check").stderr
    assert f"read 1 file(s): {refused}" in said and "did you mean 'defaults'?" in said
    fine = _config(tmp_path, "defaults: {retention_days: 30}\n")
    said = invoke("--root", str(root), "--config", fine, "config", "check").stderr
    named = said.rsplit("file(s): ", 1)[1].strip().split(", ")
    assert named[0] == fine and all(os.path.isfile(path) for path in named)  # no config.yaml that is not there


def test_a_preset_that_is_not_yaml_is_said_at_the_preset_line_naming_its_own(synth_root, invoke, tmp_path,
                                                                            monkeypatch):
    root, _ = synth_root
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    presets = tmp_path / "xdg" / "hermes-admin" / "profiles"
    presets.mkdir(parents=True)
    (presets / "broken.yaml").write_text("a: [1\nb: 2\n")
    config = _config(tmp_path, "defaults: {retention_days: 30}\nprofiles:\n  work:\n    preset: broken\n")
    said = invoke("--root", str(root), "--config", config, "config", "check").stderr
    assert f"{config}:4: {presets / 'broken.yaml'}: not valid YAML (line 2)" in said

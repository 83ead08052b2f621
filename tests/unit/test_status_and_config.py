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
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    last = {p["profile"]: p["last_run"] for p in doc["profiles"]}
    assert set(last) == {"default", "work", "legacy"}
    assert all(r["command"] == "purge" and r["result"] in ("ok", "warnings") and r["seconds"] >= 0 for r in last.values())
    assert last["work"]["changed"]["purge"]["rows"] > 0
    assert any(item["source"].startswith("daemon schedule.run") and item["next"] for item in doc["next"])
    assert store_digest(root) == before and sorted((root / ".hermes-admin").iterdir()) == records
    table = invoke("--root", str(root), "status")
    assert table.exit_code == 0 and "purge: " in table.stdout and "next: daemon schedule.run" in table.stderr


def test_status_keeps_the_last_error(synth_root, invoke, tmp_path):
    root, _ = synth_root
    path = home_of(root, "work") / "config.yaml"
    good = path.read_text()
    path.write_text("sessions: {auto_prune: maybe}\n")
    assert invoke("--root", str(root), "run", "--yes", "-p", "work").exit_code == 2
    path.write_text(good)
    assert invoke("--root", str(root), "run", "--yes", "-p", "work").exit_code in (0, 1)
    (work,) = json.loads(invoke("--root", str(root), "status", "--json", "-p", "work").stdout)["profiles"]
    assert work["last_run"]["result"] in ("ok", "warnings")
    assert "auto_prune must be true or false" in work["last_run"]["last_error"]["message"]  # kept from the run before


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

"""The admin config's policy layers as one typed value: where each layer is written (Origin), and what
`config check`, `config show --origin` and `run --dry-run` say of them (the job's decoding of the
value is in test_jobs.py's table)."""

import json
from dataclasses import FrozenInstanceError

import pytest

from hermes_admin import yamlfile
from hermes_admin.host.config import AdminConfig, policy_layers, policy_problems
from hermes_admin.layers import Layer, Origin, PolicyLayers


def test_an_origin_names_a_key_as_the_origins_always_said_it():
    section = Origin("/etc/a.yaml", "profiles.work")
    assert str(section) == "/etc/a.yaml: profiles.work"
    assert section.of("retention_days") == "/etc/a.yaml: profiles.work.retention_days"
    assert section.path_of("retention_days") == "profiles.work.retention_days" and section.path_of(None) == "profiles.work"
    preset = Origin("/usr/share/hermes-admin/profiles/lean.yaml")  # the whole file is the layer
    assert str(preset) == "/usr/share/hermes-admin/profiles/lean.yaml"
    assert preset.of("retention_days") == "/usr/share/hermes-admin/profiles/lean.yaml: retention_days"
    assert preset.path_of("retention_days") == "retention_days"
    colon = Origin("/srv/a: b.yaml", "defaults")  # a file name with ": " in it is never split
    assert colon.of("retention_days") == "/srv/a: b.yaml: defaults.retention_days"


def test_layers_are_frozen_and_their_values_read_only():
    written = {"retention_days": 30}
    layer = Layer(written, Origin("a.yaml", "defaults"))
    written["retention_days"] = 1  # the config the host read changes nothing the job carries
    assert layer.values["retention_days"] == 30
    with pytest.raises(TypeError):
        layer.values["retention_days"] = 1  # type: ignore[index]
    with pytest.raises(FrozenInstanceError):
        PolicyLayers().entry = layer  # type: ignore[misc]
    assert PolicyLayers(defaults=layer).admin_layers() == (layer,)


def test_the_host_builds_each_layer_with_where_it_is_written(tmp_path):
    admin = AdminConfig(path=tmp_path / "a.yaml", defaults={"retention_days": 120},
                        profiles={"work": {"preset": "lean", "export_keep_days": 3}})
    layers = policy_layers(admin, "work")
    assert layers.entry.origin == Origin(str(tmp_path / "a.yaml"), "profiles.work")
    assert layers.defaults.origin == Origin(str(tmp_path / "a.yaml"), "defaults")
    assert layers.preset.origin.section is None and layers.preset.origin.file.endswith("lean.yaml")
    assert policy_layers(AdminConfig(), "work").entry.origin == Origin("admin config", "profiles.work")


def test_yaml_s_line_is_a_field_of_its_refusal():
    with pytest.raises(yamlfile.YAMLRefused) as refused:
        yamlfile.parse("defaults:\n  retention_days: 3\n profiles: [\n", "a.yaml")
    assert refused.value.line == 3 and str(refused.value) == "a.yaml: not valid YAML (line 3)"
    with pytest.raises(yamlfile.YAMLRefused) as refused:
        yamlfile.parse("[" * 500, "a.yaml")
    assert refused.value.line is None


def test_config_check_says_each_layer_s_problem_at_its_file_and_line(synth_root, invoke, tmp_path):
    root, _ = synth_root
    admin = tmp_path / "a.yaml"
    admin.write_text("defaults:\n  retention_dayz: 3\nprofiles:\n  work:\n    preset: nowhere\n"
                     "  legacy: [1, 2]\n  default:\n    hermes_python: 5\n")
    doc = json.loads(invoke("--root", str(root), "--config", str(admin), "config", "check", "--json").stdout)
    found = {p["line"]: p["message"] for p in doc["problems"] if p["file"] == str(admin)}
    assert sorted(found) == [2, 5, 6, 8]
    assert found[2].startswith(f"{admin}: defaults: unknown key retention_dayz")
    assert found[5].startswith("preset 'nowhere' not found in ")
    assert found[6] == f"{admin}: profiles.legacy must be a mapping"
    assert found[8] == f"{admin}: profiles.default: hermes_python must be the path of a python, not '5'"
    broken = tmp_path / "b.yaml"
    broken.write_text("defaults:\n  retention_days: 3\n profiles: [\n")
    doc = json.loads(invoke("--root", str(root), "--config", str(broken), "config", "check", "--json").stdout)
    assert doc["problems"] == [{"file": str(broken), "line": 3, "message": f"{broken}: not valid YAML (line 3)"}]


def test_a_preset_s_problem_is_said_at_the_preset(tmp_path, monkeypatch):
    """Every problem the host's check finds names the file it is in: a preset's at the preset."""
    preset_dir = tmp_path / "xdg" / "hermes-admin" / "profiles"
    preset_dir.mkdir(parents=True)
    (preset_dir / "odd.yaml").write_text("retention_days: 12 parsecs\n")
    admin = AdminConfig(path=tmp_path / "a.yaml", profiles={"work": {"preset": "odd"}})
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    found = policy_problems(admin)
    assert [(p.file, p.line) for p in found] == [(str(preset_dir / "odd.yaml"), 1)]
    assert "retention_days: '12 parsecs' is not a duration" in found[0].message


def test_show_and_the_dry_run_name_each_value_s_layer(synth_root, invoke, tmp_path):
    root, _ = synth_root
    preset = tmp_path / "xdg" / "hermes-admin" / "profiles" / "mine.yaml"
    preset.parent.mkdir(parents=True)
    preset.write_text("auto_archive: true\nauto_archive_days: 9\n")
    own = root / "profiles" / "work" / "config.yaml"
    own.write_text("sessions:\n  auto_prune: true\n")
    admin = tmp_path / "a.yaml"
    admin.write_text("hermes_python: hermes-admin\ndefaults:\n  retention_days: 120\n"
                     "profiles:\n  work:\n    preset: mine\n    export_keep_days: 3\n")
    args = ("--root", str(root), "--config", str(admin))
    doc = json.loads(invoke(*args, "config", "show", "--json", "-p", "work").stdout)
    origins = doc["profiles"][0]["origins"]
    assert origins["export_keep_days"] == f"{admin}: profiles.work.export_keep_days"
    assert origins["auto_archive_days"] == f"{preset}: auto_archive_days"
    assert origins["auto_prune"] == f"{own}: sessions.auto_prune"
    assert origins["retention_days"] == f"{admin}: defaults.retention_days"
    assert origins["min_keep_days"] == "built-in"
    shown = invoke(*args, "config", "show", "--origin", "-p", "work").stdout
    assert f"{admin}: profiles.work.export_keep_days" in shown and f"{preset}: auto_archive_days" in shown
    dry = invoke(*args, "run", "--dry-run", "-p", "work").stdout
    # a line per place the values were set in, each value as `config show` says it
    assert f"  set in {own}: sessions: auto_prune true\n" in dry
    assert f"  set in {admin}: defaults: retention_days 120d\n" in dry
    assert f"  set in {preset}: auto_archive true; auto_archive_days 9d\n" in dry
    assert f"  set in {admin}: profiles.work: export_keep_days 3d\n" in dry
    assert "{" not in dry and all(len(line) < 200 for line in dry.splitlines() if line.startswith("  set in "))


def test_a_dry_runs_set_lines_say_each_place_once_and_no_python_values():
    from hermes_admin.cli.mutate import set_lines

    policy = {"retention_days": 30.0, "source_retention_days": {"cron": 7.0, "telegram": 60.0}, "max_store_mb": 100,
              "auto_prune": True, "min_keep_days": 7.0}
    origins = {"retention_days": "/etc/a.yaml: defaults.retention_days",
               "source_retention_days": "/etc/a.yaml: defaults.source_retention_days",
               "max_store_mb": "/etc/a.yaml: defaults.max_store_mb", "auto_prune": "--older-than",
               "min_keep_days": "built-in"}
    assert set_lines(origins, policy, "/h") == [
        "  set in /etc/a.yaml: defaults: retention_days 30d; source_retention_days cron 7d, telegram 60d; "
        "max_store_mb 100",
        "  set in --older-than: auto_prune true"]

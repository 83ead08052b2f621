"""A fleet: several roots, each with a `default` and a `work`; metrics a collector accepts."""

from __future__ import annotations

import json
import os

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from hermes_admin.synth.scenario import build_root
from tests.conftest import NOW


@pytest.fixture
def two_roots(tmp_path):
    a, b = tmp_path / "a" / "hermes", tmp_path / "b" / "hermes"
    for root in (a, b):
        build_root(root, {"default": 30, "work": 30}, now=NOW)
    return a, b


def test_two_roots_never_merge_in_json_or_human_output(two_roots, invoke):
    a, b = two_roots
    run = invoke("--root", str(a), "--root", str(b), "run", "--dry-run", "--json")
    doc = json.loads(run.stdout)
    homes = {r["home"] for r in doc["results"]}
    assert homes == {str(a), str(b), str(a / "profiles" / "work"), str(b / "profiles" / "work")}
    assert set(doc["policies"]) == homes  # keyed by home: nothing lost
    human = invoke("--root", str(a), "--root", str(b), "run", "--dry-run")
    for root in (a, b):
        assert f"{root}:default: policy:" in human.stdout and f"{root}:work: prune-ghosts:" in human.stdout
    listing = json.loads(invoke("--root", str(a), "--root", str(b), "sessions", "list", "--json").stdout)
    assert {s["home"] for s in listing["sessions"]} <= homes and len({s["home"] for s in listing["sessions"]}) == 4


def test_profile_selection_by_root_and_name_or_home(two_roots, invoke):
    a, b = two_roots
    def homes(*selection):
        out = invoke("--root", str(a), "--root", str(b), "profiles", "--json", *selection)
        return sorted(r["home"] for r in json.loads(out.stdout)["profiles"])
    assert homes("-p", "default") == sorted([str(a), str(b)])
    assert homes("-p", f"{a}:default") == [str(a)]
    assert homes("-p", str(b / "profiles" / "work")) == [str(b / "profiles" / "work")]
    missing = invoke("--root", str(a), "profiles", "-p", f"{b}:default")
    assert missing.exit_code == 2 and "not found" in missing.stderr


def test_metrics_of_two_roots_parse_with_no_duplicate_series(two_roots, invoke, tmp_path):
    a, b = two_roots
    target = tmp_path / "m.prom"
    result = invoke("--root", str(a), "--root", str(b), "run", "--metrics-file", str(target), "--json")
    assert result.exit_code in (0, 1), result.stderr
    text = target.read_text()
    seen = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
    # The stricter model accepts the same families (OpenMetrics names a counter's family without
    # `_total`, so the file, in Prometheus' text format, is written again as OpenMetrics first).
    from prometheus_client import CollectorRegistry
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

    class Parsed:
        def collect(self):
            return text_string_to_metric_families(text)

    strict = CollectorRegistry(auto_describe=False)
    strict.register(Parsed())
    list(openmetrics_families(openmetrics_text(strict).decode()))
    homes = {labels.get("home") for _, labels in ((k[0], dict(k[1])) for k in seen) if labels.get("home")}
    assert homes == {str(a), str(b), str(a / "profiles" / "work"), str(b / "profiles" / "work")}


def test_an_unwritable_metrics_file_is_one_line_and_the_report_still_goes_out(two_roots, invoke, tmp_path):
    a, _ = two_roots
    result = invoke("--root", str(a), "run", "--metrics-file", "/proc/hermes-admin-no/m.prom", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["results"] and any("metrics file /proc/hermes-admin-no/m.prom" in e for e in doc["errors"])
    assert "Traceback" not in result.stderr


def test_systemd_print_covers_the_configs_roots_and_metrics_folder(tmp_path, invoke):
    config = tmp_path / "admin.yaml"
    config.write_text("roots: [/srv/hermes-a, /srv/hermes-b]\nmetrics_file: /var/lib/prometheus/node-exporter/h.prom\n")
    out = invoke("--config", str(config), "systemd", "print")
    assert out.exit_code == 0, out.stderr
    service = out.stdout.split("# ---- hermes-admin.service ----")[1].split("# ----")[0]
    rw = [line for line in service.splitlines() if line.startswith("ReadWritePaths=")][0]
    for path in ("/srv/hermes-a", "/srv/hermes-b", "/var/lib/prometheus/node-exporter"):
        assert f"-{path}" in rw.split("=", 1)[1].split()
    # the roots come with the config the unit names, as they did for the dry run that checked it
    assert f" --config {config} -q run --yes" in service and "--all-users" not in service


def test_shell_completion_offers_profile_names_and_root_names(two_roots, tmp_path):
    import subprocess
    import sys
    a, b = two_roots
    env = dict(os.environ, _HERMES_ADMIN_COMPLETE="bash_complete", COMP_WORDS=f"hermes-admin --root {a} profiles -p w",
               COMP_CWORD="5", HERMES_ADMIN_CONFIG="")
    done = subprocess.run([sys.executable, "-c", "from hermes_admin.cli.main import cli; cli(prog_name='hermes-admin')"],
                          capture_output=True, text=True, env=env)
    assert "plain,work" in done.stdout.splitlines(), done.stdout + done.stderr
    env["COMP_WORDS"] = f"hermes-admin --root {a} --root {b} profiles -p {b}:"
    env["COMP_CWORD"] = "7"
    done = subprocess.run([sys.executable, "-c", "from hermes_admin.cli.main import cli; cli(prog_name='hermes-admin')"],
                          capture_output=True, text=True, env=env)
    assert f"plain,{b}:work" in done.stdout.splitlines() and f"plain,{b}:default" in done.stdout.splitlines()

"""Quiet on timers: a run with nothing to change prints one line a profile, or nothing under -q;
repair findings are counted, not listed every night; a failing plugin is one line per run."""

from __future__ import annotations

import yaml

from hermes_admin.hook_failures import HookFailure
from hermes_admin.report import plugin_failures
from hermes_admin.results import Result
from tests.helpers import home_of, install_plugins

POLICY = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}


def settle(invoke, root):
    """A first run does what there is to do; the next has nothing left."""
    for name in ("default", "work", "legacy"):
        path = home_of(root, name) / "config.yaml"
        data = yaml.safe_load(path.read_text()) or {}
        data["sessions"] = POLICY
        path.write_text(yaml.safe_dump(data))
    assert invoke("--root", str(root), "run", "--yes").exit_code in (0, 1)


def test_nothing_to_do_under_q_prints_nothing_and_exits_0(synth_root, invoke):
    root, _ = synth_root
    settle(invoke, root)
    quiet = invoke("--root", str(root), "-q", "run")
    assert quiet.exit_code == 0, quiet.stderr
    assert quiet.stdout == "" and quiet.stderr == ""
    plain = invoke("--root", str(root), "run")
    assert plain.exit_code == 0
    assert sorted(line.split(":")[0] for line in plain.stdout.splitlines()) == ["default", "legacy", "work"]
    assert all("nothing to do" in line for line in plain.stdout.splitlines())


def test_q_still_says_what_changed(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "-q", "purge", "--older-than", "90d", "--yes")
    assert result.exit_code in (0, 1)
    assert result.stdout and all("purge" in line or "exported to" in line or line.startswith("  ")
                                 for line in result.stdout.splitlines())


def test_repair_findings_are_counted_not_listed(synth_root, invoke):
    root, _ = synth_root
    settle(invoke, root)
    (home_of(root, "work") / "state.db").chmod(0o644)  # looser than 0600: a finding every run
    (home_of(root, "work") / "logs").rmdir() if not any((home_of(root, "work") / "logs").iterdir()) else None
    result = invoke("--root", str(root), "run")
    work = [line for line in result.stdout.splitlines() if line.startswith("work")]
    assert len(work) == 1 and "repair:" in work[0], result.stdout
    verbose = invoke("--root", str(root), "-v", "run")
    assert "state.db" in verbose.stdout


def test_a_failing_plugin_is_one_line_per_run(synth_root, invoke):
    root, _ = synth_root
    install_plugins(home_of(root, "work"), ["raiser"], enabled=["raiser"])
    path = home_of(root, "work") / "config.yaml"
    data = yaml.safe_load(path.read_text())
    data["sessions"] = POLICY
    path.write_text(yaml.safe_dump(data))
    result = invoke("--root", str(root), "run", "-p", "work")
    plugin_lines = [line for line in result.stderr.splitlines() if "plugin raiser" in line]
    assert result.exit_code == 1 and len(plugin_lines) == 1, result.stderr


def test_plugin_failures_are_folded_per_plugin():
    """More cases: test_hook_failures.py."""
    w, v = Result("w", "delete", "prune", False, home="/w"), Result("v", "delete", "prune", False, home="/v")
    w.hook_failures += [HookFailure("a", "raised", "ValueError: x"), HookFailure("a", "raised", "ValueError: x"),
                        HookFailure("a", "raised", "ValueError: x", repeats=3), HookFailure("b", "timed out", "timed out"),
                        HookFailure(None, "stopped", "something else")]
    v.hook_failures += [HookFailure("a", "raised", "ValueError: y")]
    assert plugin_failures([w, v]) == [
        "profile 'w': something else", "profile 'w': plugin a: ValueError: x (and 4 more time(s) this run)",
        "profile 'w': plugin b: timed out", "profile 'v': plugin a: ValueError: y"]

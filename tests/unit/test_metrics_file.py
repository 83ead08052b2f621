"""The metrics file is root's when root writes it: never written into a folder another user may
write, never read through a link or a FIFO, and replaced whole (docs/design.md §12)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_admin.host import metrics
from hermes_admin.results import Run
from tests.helpers import never_blocks

SUMMARY = [{"name": "work", "home": "/h/work", "ok": True, "store": True, "sessions": 5, "messages": 9,
            "store_bytes": 1, "wal_bytes": 0}]


def test_a_fifo_at_the_path_is_never_waited_on_and_is_replaced(tmp_path):
    target = tmp_path / "m.prom"
    os.mkfifo(target)
    assert never_blocks(lambda: metrics.carried(target)) == {}  # a FIFO opened would wait forever
    assert never_blocks(lambda: metrics.write(target, Run(dry_run=False), SUMMARY)) is None
    assert target.is_file() and not target.is_symlink()
    assert "hermes_admin_last_run_timestamp_seconds" in target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.prom"]


def test_a_link_at_the_path_is_neither_read_nor_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere.prom"
    elsewhere.write_text('# TYPE hermes_admin_run_errors_total counter\n'  # a counter a plain file would carry
                         'hermes_admin_run_errors_total{profile="work",home="/h/work"} 41\n')
    before = elsewhere.read_bytes()
    target = tmp_path / "m.prom"
    target.symlink_to(elsewhere)
    assert metrics.carried(target) == {}
    assert metrics.write(target, Run(dry_run=False), SUMMARY) is None
    assert not target.is_symlink() and elsewhere.read_bytes() == before
    # nothing carried from what the link led to: the counter is not 41 (the text may well hold "41",
    # in a timestamp's digits)
    assert 41 not in metrics.carried(target).values()


def test_an_old_file_past_the_bound_carries_nothing(tmp_path, monkeypatch):
    target = tmp_path / "m.prom"
    target.write_text(metrics.render(Run(dry_run=False), SUMMARY, finished=1.0))
    assert metrics.carried(target)
    monkeypatch.setattr(metrics, "MAX_BYTES", 16)
    assert metrics.carried(target) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is root's")
@pytest.mark.parametrize("how", ["another user's folder", "a folder others may write"])
def test_as_root_a_folder_not_roots_alone_is_refused_and_nothing_is_written(tmp_path, how):
    folder = tmp_path / "textfile"
    folder.mkdir()
    if how == "another user's folder":
        os.chown(folder, 65534, 65534)
    else:
        os.chmod(folder, 0o777)
    target = folder / "deeper" / "m.prom"
    why = metrics.write(target, Run(dry_run=False), SUMMARY)
    assert why and str(folder) in why and "not root's alone" in why
    assert list(folder.iterdir()) == []
    assert metrics.refused(target) == why


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is root's")
def test_run_as_root_says_a_refused_metrics_path_with_the_config_line_and_still_runs(synth_root, tmp_path, invoke):
    root, _ = synth_root
    folder = tmp_path / "textfile"
    folder.mkdir()
    os.chmod(folder, 0o777)
    config = tmp_path / "admin.yaml"
    config.write_text(f"defaults: {{retention_days: 90}}\nmetrics_file: {folder}/m.prom\n")
    done = invoke("--config", str(config), "--root", str(root), "run", "--json")
    assert done.exit_code == 2, done.stderr
    import json
    report = json.loads(done.stdout)
    [problem] = [p for p in report["problems"] if p["kind"] == "metrics_file"]
    assert (problem["path"], problem["line"], problem["key"]) == (str(config), 2, "metrics_file")
    assert "not root's alone" in problem["message"] and "the run was done" in problem["message"]
    assert report["results"] and list(folder.iterdir()) == []
    checked = invoke("--config", str(config), "config", "check")
    assert checked.exit_code == 78 and f"{config}:2:" in checked.stdout + checked.stderr

"""A file in a home is read without ever blocking, and of any shape it never ends a command (issue 37)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_admin import report
from hermes_admin.model import Profile
from hermes_admin.plain_files import NotPlain, read_plain
from hermes_admin.profile import run_record
from hermes_admin.profile import exports
from hermes_admin.profile.state_folder import read_record
from tests.helpers import never_blocks

GOOD = {"format": 1, "command": "run", "started": 1.7e9, "finished": 1.7e9 + 3, "seconds": 3.0, "result": "ok",
        "changed": {"purge": {"rows": 2, "units": 1, "files": 0}}, "errors": [], "warnings": []}


def test_a_fifo_a_link_or_a_large_file_is_one_refusal_never_a_wait(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotPlain, match="a FIFO"):
        never_blocks(lambda: read_plain(fifo, 100))  # no writer will ever come: a blocking open waits forever
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(NotPlain, match="over 100 bytes"):
        read_plain(tmp_path / "big", 100)
    assert read_plain(tmp_path / "big", 10, head=True) == b"x" * 10
    (tmp_path / "link").symlink_to(tmp_path / "big")
    with pytest.raises(NotPlain, match="symlink"):
        read_plain(tmp_path / "link", 1000)
    assert read_plain(tmp_path / "link", 1000, follow=True) == b"x" * 101


def test_a_run_record_that_is_a_fifo_or_of_another_shape_is_one_line(tmp_path):
    profile = Profile(tmp_path, "default", tmp_path)
    (tmp_path / ".hermes-admin").mkdir()
    record = tmp_path / ".hermes-admin" / "last-run.json"
    os.mkfifo(record)
    assert run_record.read(profile) == (None, f"{record}: is not a plain file (a FIFO); not read")
    record.unlink()
    for bad, why in [({**GOOD, "started": 1e300}, "started"), ({**GOOD, "seconds": float("nan")}, "seconds"),
                     ({**GOOD, "changed": {"purge": [1]}}, "changed"), ({**GOOD, "errors": [[]]}, "errors"),
                     ({**GOOD, "last_error": {"at": "x", "message": "m"}}, "last_error"),
                     ({**GOOD, "result": ["ok"]}, "result")]:
        record.write_text(json.dumps(bad))
        runs, problem = run_record.read(profile)
        assert runs is None and why in problem and str(record) in problem
    record.write_text("[" * 100000 + "]" * 100000)
    record_read, problem = read_record(profile, "last-run.json", 1 << 20)
    assert record_read is None and problem
    record.write_text(json.dumps(GOOD))  # an earlier version's one run
    assert run_record.read(profile) == ([{k: v for k, v in GOOD.items() if k != "format"}], None)
    one = {k: v for k, v in GOOD.items() if k != "format"}
    for bad, why in [({"format": 2, "runs": [one] * 13}, "runs"), ({"format": 2, "runs": [{**one, "seconds": -1}]},
                                                                    "seconds"),
                     ({"format": 2, "runs": [], "more": 1}, "keys"), ({"format": 3, "runs": []}, "format")]:
        record.write_text(json.dumps(bad))
        runs, problem = run_record.read(profile)
        assert runs is None and why in problem and str(record) in problem
    record.write_text(json.dumps({"format": 2, "runs": [one]}))
    assert run_record.read(profile) == ([one], None)


def _run(finished: float, rows: int = 0, error: str | None = None) -> dict:
    return {"command": "run", "started": finished - 1, "finished": finished, "seconds": 1.0,
            "result": "error" if error else "ok", "changed": {"purge": {"rows": rows, "units": rows, "files": 0}},
            "errors": [error] if error else [], "warnings": []}


@pytest.mark.parametrize("history, kept", [
    # (rows changed, error) per run, oldest first -> the finished times kept
    ([(0, None)] * 3, [1, 2, 3]),
    ([(5, None)] + [(0, None)] * 12, [1] + list(range(4, 14))),  # the big run outlives the idle ones
    ([(0, "x"), (5, None)] + [(0, None)] * 12, [1, 2] + list(range(5, 15))),  # so does the newest failure
    ([(5, None), (7, None)] + [(0, None)] * 12, [2] + list(range(5, 15))),  # only the newest change
    ([(5, None)] * 14, list(range(5, 15))),  # changes among the last ten: nothing older kept
])
def test_the_history_keeps_the_last_runs_and_the_newest_change_and_failure(history, kept):
    runs = [_run(n + 1, rows, error) for n, (rows, error) in enumerate(history)]
    assert [r["finished"] for r in run_record.trimmed(runs)] == kept
    assert len(run_record.trimmed(runs)) <= run_record.MAX_RUNS


def test_an_export_manifest_of_another_shape_is_refused_naming_it(tmp_path):
    export = tmp_path / "20260101T000000Z-x.jsonl.gz"
    export.write_bytes(b"")
    manifest = Path(str(export) + exports.MANIFEST)
    os.mkfifo(manifest)
    with pytest.raises(exports.ExportError, match="FIFO"):
        exports.load_manifest(export)
    manifest.unlink()
    member = {"offset": 0, "length": 0, "bytes": 0, "sha256": "x", "units": [], "reason": None}
    for bad in [{"format": 1, "created": 1e300, "members": []}, {"format": 1, "created": "soon", "members": []},
                {"format": 1, "home": ["x"], "members": []},
                {"format": 1, "members": [dict(member, offset=-1)]},
                {"format": 1, "members": [dict(member, units=[["a", 1 << 60, 1, []]])]},
                {"format": 1, "members": [dict(member, reason=["x"])]}]:
        manifest.write_text(json.dumps(bad))
        with pytest.raises(exports.ExportError, match="not a hermes-admin export manifest"):
            exports.load_manifest(export)
    manifest.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(exports.ExportError, match="not valid JSON"):
        exports.load_manifest(export)


@pytest.mark.parametrize("value", [1e300, float("nan"), float("inf"), -1e300, "x"])
def test_a_time_no_clock_can_say_is_shown_as_none(value):
    assert report.iso(value) is None
    assert isinstance(report.local_time(value), str)

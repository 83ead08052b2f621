"""A run a stop cuts short: what its note says agrees with the next dry run, and `status` says it was
interrupted; and a dry run counts what each task keeps as the run does."""

from __future__ import annotations

import functools
import json
import re

import yaml

from hermes_admin import stopping
from hermes_admin.cli.demo_cmd import WORK_SESSIONS
from hermes_admin.profile import parts
from hermes_admin.profile.engine import faults
from tests.helpers import home_of

NOTE = re.compile(r"stopped on request: (\d+) of the (\d+) unit\(s\) selected so far not reached"
                  r"(?:; (\d+) session\(s\) of the store not yet looked at)? \(the next run selects again")


def purge_of(doc: dict, profile: str = "default") -> dict:
    (purge,) = [r for r in doc["results"] if r["task"] == "purge" and r["profile"] == profile]
    return purge


def test_a_stop_part_way_says_what_the_next_dry_run_cannot_contradict(synth_root, invoke, monkeypatch):
    """Stopped after the first commit, with the store in parts of two sessions: the task's one note
    says how many of the units it selected it did not reach and how many sessions it never looked at;
    the next dry run selects at least the first and at most both."""
    root, _ = synth_root
    monkeypatch.setattr(parts, "session_batches", functools.partial(parts.session_batches, size=2))
    args = ("--root", str(root), "purge", "-p", "default", "--older-than", "90")
    whole = purge_of(json.loads(invoke(*args, "--dry-run", "--json").stdout))
    try:
        with faults.armed("after_commit", stopping.request):
            stopped = invoke(*args, "--yes", "--json")
    finally:
        stopping.clear()
    assert stopped.exit_code == 130, stopped.stderr
    purge = purge_of(json.loads(stopped.stdout))
    notes = [n for n in purge["notes"] if n.startswith("stopped on request")]
    assert len(notes) == 1, notes  # one note for the task, not one per part or engine call
    left, selected, unseen = NOTE.match(notes[0]).groups()
    left, selected, unseen = int(left), int(selected), int(unseen or 0)
    assert selected == len(purge["done"]) + len(purge["skipped"]) + left
    assert unseen > 0 and selected < len(whole["done"])  # parts of the store never selected from
    after = purge_of(json.loads(invoke(*args, "--dry-run", "--json").stdout))
    assert left <= len(after["done"]) <= left + unseen
    assert len(after["done"]) == len(whole["done"]) - len(purge["done"])


def test_status_after_an_interrupted_run_says_so_and_is_not_0(synth_root, invoke):
    root, _ = synth_root
    try:
        with faults.armed("after_commit", stopping.request):
            assert invoke("--root", str(root), "run", "--yes", "-p", "work").exit_code == 130
    finally:
        stopping.clear()
    result = invoke("--root", str(root), "status", "--json", "-p", "work")
    assert result.exit_code == 1, result.stderr
    (work,) = json.loads(result.stdout)["profiles"]
    assert work["last_run"]["result"] == "interrupted" and work["health"] == "interrupted"
    shown = invoke("--root", str(root), "status", "-p", "work")
    assert shown.exit_code == 1 and "): interrupted" in shown.stdout and "run, interrupted, took" in shown.stdout


def test_a_dry_run_keeps_what_the_run_keeps(synth_root, invoke):
    """Rows an earlier task takes (ghosts, empty sessions) are still there in a dry run: a later task
    must not count them as kept, since in the run they are gone (the demo's `work`, 14 kept against 12)."""
    root, _ = synth_root
    config = home_of(root, "work") / "config.yaml"
    config.write_text(yaml.safe_dump(dict(yaml.safe_load(config.read_text()) or {}, sessions=WORK_SESSIONS)))
    args = ("--root", str(root), "run", "-p", "work", "--json")
    dry = json.loads(invoke(*args, "--dry-run").stdout)
    done = json.loads(invoke(*args, "--yes").stdout)
    kept = [{r["task"]: sorted(r["kept"]) for r in doc["results"] if r["task"]} for doc in (dry, done)]
    assert kept[0]["purge"] and kept[0] == kept[1]

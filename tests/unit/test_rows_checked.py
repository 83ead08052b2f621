"""Every command's rows, as a real worker process writes them, pass the host's checks of their fields
(protocol.ROWS): the checks refuse a lying worker's rows, never an honest one's."""

from __future__ import annotations

import json

import pytest

COMMANDS = [["profiles"], ["usage"], ["exports", "list"], ["status"], ["sessions", "list"], ["plugins", "list"],
            ["config", "check"], ["config", "show", "--origin"], ["run", "--yes"], ["run", "--dry-run"],
            ["exports", "prune", "--older-than", "1d", "--dry-run"], ["compact", "--dry-run"], ["compact", "--yes"]]


@pytest.fixture
def spawned(monkeypatch):
    monkeypatch.setenv("HERMES_ADMIN_WORKER", "process")  # a worker process even for our own homes


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_an_honest_workers_rows_pass_the_hosts_checks(synth_root, invoke, spawned, args):
    root, _ = synth_root
    done = invoke("--root", str(root), *args, "--json")
    assert "broke the protocol" not in done.output, done.output
    document = next(line for line in reversed(done.output.splitlines()) if line.startswith("{"))  # after stderr's
    assert json.loads(document)["exit_code"] in (0, 1), done.output


def test_sessions_show_and_delete_and_the_deleted_ones_exports(synth_root, invoke, spawned):
    root, _ = synth_root
    listed = json.loads(invoke("--root", str(root), "sessions", "list", "-p", "work", "--json").output)
    sid = listed["sessions"][-1]["id"]
    for args in (["sessions", "show", sid], ["sessions", "delete", sid, "--yes"], ["sessions", "show", sid]):
        done = invoke("--root", str(root), *args, "--json")
        assert "broke the protocol" not in done.output and json.loads(done.output)["exit_code"] in (0, 1), done.output

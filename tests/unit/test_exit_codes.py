"""One exit-code contract for every command (README "Exit codes"):

0 done; 1 done with warnings; 2 a profile, store or root could not be processed (the others were);
3 a lock is held; 64 usage error; 70 internal error; 78 the admin config cannot be used; 130 interrupted
(after printing what was done). A confirmation answered "no" is 1, not 130.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click
import pytest

from hermes_admin.host.runlock import RunLocks
from tests.conftest import store_digest
from tests.cli_commands import COMMANDS, READ_ONLY

CHANGING = [c for c in COMMANDS if c not in READ_ONLY]


def run_main(*args, env=None):
    """The console script itself (click's own usage handling included)."""
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", **(env or {}))
    return subprocess.run([sys.executable, "-m", "hermes_admin", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_ok_on_a_healthy_root(command, synth_root, invoke):
    root, kinds = synth_root
    args = [a.replace("SESSION", kinds["default"]["recent"][0]) for a in command]
    result = invoke("--root", str(root), *args)
    assert result.exit_code in (0, 1), result.stderr  # 1 where the scenario's plugins or guards warn


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_missing_root_is_2(command, tmp_path, invoke):
    result = invoke("--root", str(tmp_path / "nope"), *[a.replace("SESSION", "x") for a in command])
    assert result.exit_code == 2, (result.exit_code, result.stderr)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_a_profile_without_a_store_yet_is_nothing_to_do(command, tmp_path, invoke):
    root = tmp_path / "hermes"
    (root / "profiles" / "fresh").mkdir(parents=True)
    result = invoke("--root", str(root), *[a.replace("SESSION", "x") for a in command])
    expected = (0, 1) if command[:2] not in (["sessions", "show"],) else (1,)  # show: no such session
    assert result.exit_code in expected, (result.exit_code, result.stderr)


@pytest.mark.parametrize("command", CHANGING, ids=lambda c: " ".join(c))
def test_a_busy_root_is_3(command, synth_root, invoke):
    root, kinds = synth_root
    held = RunLocks()
    held.take([root])
    try:
        result = invoke("--root", str(root), *[a.replace("SESSION", kinds["default"]["recent"][0]) for a in command])
    finally:
        held.release()
    assert result.exit_code == 3, (result.exit_code, result.stderr)


@pytest.mark.parametrize("args", [["purge", "--older-than", "x"], ["no-such-command"], ["run", "--bogus"],
                                  ["sessions", "delete"], ["--root"]])
def test_usage_errors_are_64(args):
    done = run_main(*args)
    assert done.returncode == 64, done.stderr


def main_patched(patch: str, args: list[str], home) -> subprocess.CompletedProcess:
    """The console script's main() in a fresh interpreter, after `patch` (Python) ran there."""
    code = patch + ("from hermes_admin.cli.main import main\n"
                    f"import sys; sys.argv = ['hermes-admin', *{args!r}]\n"
                    "main()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, HERMES_ADMIN_CONFIG="", HOME=str(home)))


def test_an_internal_error_is_70_with_one_line(synth_root, tmp_path):
    root, _ = synth_root
    done = main_patched("import hermes_admin.profile.views as v\n"
                        "def boom(*a, **k): raise ZeroDivisionError('a bug')\n"
                        "v.profile_summary = boom\n", ["--root", str(root), "profiles"], tmp_path)
    assert done.returncode == 70, done.stderr
    assert "internal error" in done.stderr and "Traceback" not in done.stderr


def test_an_interrupted_purge_prints_what_it_did_and_exits_130(synth_root, tmp_path):
    """A stop request between two parts of the store: the first part's deletions are reported."""
    root, _ = synth_root
    done = main_patched("import os, signal\n"
                        "from hermes_admin.profile import parts\n"
                        "real = parts.session_batches\n"
                        "def batches(store, size=2000, **kw):\n"
                        "    for n, batch in enumerate(real(store, size=2, **kw)):\n"
                        "        if n == 1: os.kill(os.getpid(), signal.SIGTERM)\n"
                        "        yield batch\n"
                        "parts.session_batches = batches\n",
                        ["--root", str(root), "purge", "--older-than", "90", "--yes", "--json"], tmp_path)
    assert done.returncode == 130, done.stderr
    doc = json.loads(done.stdout)
    assert sum(r["rows"] for r in doc["results"]) > 0
    assert "stopping after the current transaction" in done.stderr


def bad_config(tmp_path):
    config = tmp_path / "admin.yaml"
    config.write_text("defaults: {retention_days: 90}\nretension: 3\n")  # a typo of a top-level key
    return config


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_an_unusable_admin_config_is_78_and_changes_nothing(command, synth_root, invoke, tmp_path):
    root, kinds = synth_root
    before = store_digest(root)
    args = [a.replace("SESSION", kinds["default"]["recent"][0]) for a in command]
    result = invoke("--root", str(root), "--config", str(bad_config(tmp_path)), *args)
    assert result.exit_code == 78, (result.exit_code, result.stderr)
    assert "retension" in result.stderr and store_digest(root) == before


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("case", ["missing root", "bad config", "unknown session"])
def test_json_is_one_document_with_the_error_inside(command, case, synth_root, invoke, tmp_path):
    root, kinds = synth_root
    sid = "nope" if case == "unknown session" else kinds["default"]["recent"][0]
    args = ["--root", str(tmp_path / "nope" if case == "missing root" else root)]
    if case == "bad config":
        args += ["--config", str(bad_config(tmp_path))]
    args += [a.replace("SESSION", sid) for a in command]
    without = invoke(*args)
    result = invoke(*args, "--json")
    doc = json.loads(result.stdout)  # exactly one document: json.loads refuses anything after it
    assert result.exit_code == without.exit_code == doc["exit_code"]
    if case != "unknown session" or "SESSION" in command:
        assert result.exit_code != 0 and doc["errors"] + doc.get("warnings", []), doc
        assert all(message in result.stderr for message in doc["errors"][:1])


@pytest.mark.parametrize("args, says", [(["purge", "--older-than", "soon", "--json"], "is not a duration"),
                                        (["--bogus", "profiles", "--json"], "No such option"),
                                        (["profiles", "--json", "--bogus"], "No such option")])
def test_a_usage_error_under_json_is_a_document_too(args, says):
    done = run_main(*args)
    assert done.returncode == 64
    doc = json.loads(done.stdout)
    assert doc["exit_code"] == 64 and says in doc["errors"][0]


def test_answering_no_changes_nothing_and_is_not_an_interruption(synth_root, invoke, monkeypatch):
    from hermes_admin.cli import mutate

    root, kinds = synth_root
    monkeypatch.setattr(mutate, "asks", lambda yes, dry_run: not (yes or dry_run))  # as on a terminal
    before = store_digest(root)
    result = invoke("--root", str(root), "purge", "--older-than", "1d", "--force", input="n\n")
    assert result.exit_code == 1 and "nothing was changed" in result.stderr
    assert store_digest(root) == before


def test_ctrl_c_while_the_question_is_counted_asks_nothing_and_changes_nothing(synth_root, invoke, monkeypatch):
    """The first Ctrl-C only asks to stop: if it comes while the dry run behind a prompt counts, the
    prompt is not shown, nothing is done, and the exit code is 130."""
    from hermes_admin import stopping
    from hermes_admin.cli import mutate

    root, _ = synth_root
    monkeypatch.setattr(mutate, "asks", lambda yes, dry_run: not (yes or dry_run))  # as on a terminal
    counted = mutate.counted
    monkeypatch.setattr(mutate, "counted", lambda preview: (stopping.request(), counted(preview))[1])
    before = store_digest(root)
    try:
        result = invoke("--root", str(root), "purge", "--older-than", "1d", "--force", input="y\n")
    finally:
        stopping.clear()
    assert result.exit_code == 130 and "Go on?" not in result.stderr + result.stdout
    assert "stopped while planning: nothing was changed" in result.stderr
    assert store_digest(root) == before


def test_the_prompt_names_only_what_would_happen():
    """`0 in 0 archived` is no news: the prompt's counts name what the plan does."""
    from hermes_admin.cli.mutate import counted
    from hermes_admin.results import Done, Result, Run

    purge = Result("work", "delete", "prune", True, task="purge", home="/h/work",
                   done=[Done("a", ("a", "b", "c"), "old")])
    assert counted(Run(dry_run=True, results=[purge])) == "3 session(s) in 1 profile(s) would be deleted"
    archive = Result("work", "archive", None, True, task="auto_archive", home="/h/work",
                     done=[Done("d", ("d", "e"), "idle")])
    assert counted(Run(dry_run=True, results=[purge, archive])) == \
        "3 session(s) in 1 profile(s) would be deleted, 2 in 1 archived"


def test_ctrl_c_at_the_prompt_is_said_on_a_line_of_its_own(monkeypatch, capsys):
    """click turns Ctrl-C (or end of input) at a prompt into Abort: 130, said after the question's open line."""
    from hermes_admin.cli import main

    def aborted(**kwargs):
        raise click.exceptions.Abort()

    monkeypatch.setattr(main.cli, "main", aborted)
    assert main._run() == 130
    assert capsys.readouterr().err == "\nhermes-admin: no answer (Ctrl-C or end of input): nothing was changed\n"

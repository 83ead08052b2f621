"""Half of a long run's profiles in a forked copy (profile/fork.py): the same report, both cores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hermes_admin import stopping
from hermes_admin.layers import Layer, Origin, PolicyLayers
from hermes_admin.model import ORDER
from hermes_admin.model import Owner, Profile
from hermes_admin.problems import WARNING, Problem
from hermes_admin.profile import fork
from hermes_admin.protocol import Context, Job, Maintain, Request
from hermes_admin.results import Result, Run
from hermes_admin.synth.scenario import build_root
from tests.conftest import NOW

NAMES = ["default"] + [f"p{i:02d}" for i in range(1, fork.MIN_PROFILES + 2)]


def _layers(**named: dict) -> PolicyLayers:
    """Admin layers by name (entry, preset, defaults), from an admin config at a.yaml."""
    return PolicyLayers(**{name: Layer(values, Origin("a.yaml", name)) for name, values in named.items()})


def _job(profiles: int = fork.MIN_PROFILES, layers: PolicyLayers | None = None, dry_run: bool = False,
         processes: int = 2) -> Job:
    owner = Owner(os.getuid(), os.getgid(), (), "someone", "/nonexistent")
    found = [Profile(Path("/r"), f"p{i:02d}", Path(f"/r/profiles/p{i:02d}")) for i in range(profiles)]
    return Job(Maintain(Request(ORDER, NOW, dry_run=dry_run)), owner, found,
               {str(p.home): layers for p in found} if layers is not None else {}, Context(processes=processes))


@pytest.mark.parametrize("layers, applies", [
    (_layers(), False),
    (_layers(defaults={"repair": "report"}), False),
    (_layers(defaults={"repair": "apply"}), True),
    (_layers(entry={"repair": "report"}, defaults={"repair": "apply"}), False),  # the entry wins
    (_layers(entry={"retention_days": 30}, preset={"repair": "apply"}), True),
])
def test_a_policy_that_applies_repairs_is_read_from_the_admin_layers(layers, applies):
    assert fork.applies_repairs(layers) is applies


def test_when_a_second_process_is_worth_it(monkeypatch):
    monkeypatch.setattr(fork.sys, "stderr", open(os.devnull, "w"))
    assert fork.worth_it(_job())
    assert not fork.worth_it(_job(fork.MIN_PROFILES - 1))
    assert not fork.worth_it(_job(processes=1))  # HERMES_ADMIN_PROCESSES=1
    assert not fork.worth_it(_job(layers=_layers(defaults={"repair": "apply"})))  # a fix may take a sibling's lock
    assert fork.worth_it(_job(layers=_layers(defaults={"repair": "apply"}), dry_run=True))  # a dry run applies nothing
    monkeypatch.setattr(fork.os, "sched_getaffinity", lambda pid: {0})
    assert not fork.worth_it(_job())
    monkeypatch.undo()
    monkeypatch.setattr(fork.sys, "stderr", type("Tty", (), {"isatty": lambda self: True})())
    assert not fork.worth_it(_job())  # a progress bar's terminal is one process's
    monkeypatch.undo()
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert not fork.worth_it(_job())  # a fork copies one thread only: the daemon never forks
    finally:
        release.set()
        other.join()


def _served(job: Job) -> Run:
    run = Run(dry_run=False)
    for profile in job.profiles:
        result = Result(profile.name, "delete", "prune", False, task="purge")
        result.home = str(profile.home)
        result.notes.append(f"by {os.getpid()}")
        run.results.append(result)
    run.add(Problem(WARNING, f"{job.profiles[0].name}..{job.profiles[-1].name}"))
    return run


def test_the_halves_come_back_in_order_each_from_its_own_process():
    job = _job(9)
    run = fork.in_two(job, _served)
    assert [r.profile for r in run.results] == [p.name for p in job.profiles]
    pids = [r.notes[0] for r in run.results]
    assert pids[:5] == [f"by {os.getpid()}"] * 5 and len(set(pids[5:])) == 1 and pids[5] != pids[0]
    assert run.warnings == ["p00..p04", "p05..p08"] and not run.errors


@pytest.mark.parametrize("end, said", [
    (lambda: 1 / 0, "stopped before its report (exit status 70)"),
    (lambda: os._exit(9), "stopped before its report (exit status 9)"),
    (lambda: os.kill(os.getpid(), signal.SIGKILL), "stopped before its report (killed by SIGKILL)"),
])
def test_a_second_process_that_dies_leaves_an_error_for_each_of_its_profiles(end, said):
    def serve(job: Job) -> Run:
        if job.profiles[0].name != "p00":
            end()
        return _served(job)

    run = fork.in_two(_job(8), serve)
    assert [r.profile for r in run.results] == ["p00", "p01", "p02", "p03"]
    assert run.errors == [f"profile 'p0{i}': /r/profiles/p0{i}: the second process {said}" for i in range(4, 8)]


def test_a_report_for_a_profile_it_was_not_given_is_refused():
    def serve(job: Job) -> Run:
        run = _served(job)
        if job.profiles[0].name != "p00":
            run.results[0].home = "/r/profiles/p00"  # someone else's
        return run

    run = fork.in_two(_job(8), serve)
    assert len(run.results) == 4 and len(run.errors) == 4
    assert "a broken report (a result for a profile this worker was not given)" in run.errors[0]


def test_a_stop_asked_of_the_parent_only_reaches_the_second_process():
    def serve(job: Job) -> Run:
        if job.profiles[0].name == "p00":
            stopping.request()  # as `kill PID` would, to this process only
            return _served(job)
        deadline = time.monotonic() + 20
        while not stopping.requested() and time.monotonic() < deadline:
            time.sleep(0.01)
        run = _served(job)
        run.add(Problem(WARNING, "stopped" if stopping.requested() else "never told"))
        return run

    try:
        run = fork.in_two(_job(8), serve)
    finally:
        stopping.clear()
    assert run.warnings[-1] == "stopped" and len(run.results) == 8


# -- the command, as the timer runs it ------------------------------------------------

def _run(root: Path, tmp_path: Path, **env: str) -> tuple[dict, set[int]]:
    environ = dict(os.environ, HOME=str(tmp_path / "home"), HERMES_HOME="", HERMES_ADMIN_CONFIG="",
                   XDG_CONFIG_HOME=str(tmp_path / "xdg"), **env)
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), "run", "--json"],
                          capture_output=True, text=True, env=environ, stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    pids = set()
    for name in NAMES:
        home = root if name == "default" else root / "profiles" / name
        pids.add(json.loads((home / ".hermes-admin" / "lock").read_text())["pid"])
    return doc, pids


def _comparable(doc: dict, root: Path) -> str:
    for result in doc["results"]:
        for timing in ("seconds", "longest_write_ms", "transactions"):
            result.pop(timing, None)
        result["export"] = bool(result.get("export"))  # its name holds the time and the pid
    doc.pop("longest_write_ms", None)
    return json.dumps(doc, sort_keys=True).replace(str(root), "ROOT")


def test_a_run_over_many_profiles_uses_two_processes_and_reports_as_one(tmp_path):
    root = tmp_path / "forked" / "hermes"
    build_root(root, {name: 30 for name in NAMES}, now=NOW)
    serial = tmp_path / "serial" / "hermes"
    shutil.copytree(root, serial, symlinks=True)
    forked, forked_pids = _run(root, tmp_path)
    alone, alone_pids = _run(serial, tmp_path, HERMES_ADMIN_PROCESSES="1")
    assert len(forked_pids) == 2 and len(alone_pids) == 1
    assert sum(len(r["done"]) for r in forked["results"]) > 0  # there was work, not only an idle pass
    assert _comparable(forked, root) == _comparable(alone, serial)


def test_without_a_second_process_one_does_it_all(monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(fork.os, "fork", no_fork)
    run = fork.in_two(_job(8), _served)
    assert [r.profile for r in run.results] == [f"p0{i}" for i in range(8)] and not run.errors
    assert {r.notes[0] for r in run.results} == {f"by {os.getpid()}"}


def test_ctrl_c_stops_both_processes_and_the_report_has_both_halves(tmp_path):
    root = tmp_path / "hermes"
    build_root(root, {name: 30 for name in NAMES}, now=NOW)
    patch = ("import os, signal\n"
             "from hermes_admin.profile import parts\n"
             "MAIN, real = os.getpid(), parts.session_batches\n"
             "def batches(store, size=2000, **kw):\n"
             "    for n, batch in enumerate(real(store, size=2, **kw)):\n"
             "        if n == 1 and os.getpid() == MAIN: os.killpg(0, signal.SIGINT)  # the terminal's Ctrl-C\n"
             "        yield batch\n"
             "parts.session_batches = batches\n"
             "from hermes_admin.cli.main import main\n"
             f"import sys; sys.argv = ['hermes-admin', '--root', {str(root)!r}, 'purge', '--older-than', '90',"
             " '--yes', '--json']\n"
             "main()\n")
    done = subprocess.run([sys.executable, "-c", patch], capture_output=True, text=True, start_new_session=True,
                          env=dict(os.environ, HERMES_ADMIN_CONFIG="", HOME=str(tmp_path)), timeout=120)
    assert done.returncode == 130, done.stderr
    doc = json.loads(done.stdout)
    assert not any("second process" in e for e in doc["errors"]), doc["errors"]
    homes = {r["home"] for r in doc["results"]}
    untouched = " ".join(w for w in doc["warnings"] if w.startswith("stopped on request: "))
    for name in NAMES:  # each profile either reported (stopped in it or done) or named as not worked on
        home = root if name == "default" else root / "profiles" / name
        assert str(home) in homes or f" {name}," in untouched or f" {name} not" in untouched, (name, untouched)
    assert str(root) in homes and "p09" in untouched  # the parent's first; the copy's last never began
    assert sum(r["rows"] for r in doc["results"]) > 0


@pytest.fixture
def stop_handlers():
    """The handlers the CLI and the worker install: a signal is a stop request."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, lambda signum, frame: stopping.request())
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    stopping.clear()


def _until_stopped(job: Job, marker: Path | None = None) -> Run:
    deadline = time.monotonic() + 20
    while not stopping.requested() and time.monotonic() < deadline:
        time.sleep(0.01)
    told = "stopped" if stopping.requested() else "never told"
    if marker is not None:
        marker.write_text(f"{told} {os.getpid()}")
    run = _served(job)
    run.add(Problem(WARNING, told))
    return run


def test_a_signal_while_the_parent_waits_for_the_report_reaches_the_copy(stop_handlers):
    def serve(job: Job) -> Run:
        if job.profiles[0].name == "p00":  # done at once; the signal comes while it reads the copy's report
            killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -TERM {os.getpid()}"])
            run = _served(job)
            run.data["killer"] = [killer]
            return run
        return _until_stopped(job)

    started = time.monotonic()
    run = fork.in_two(_job(8), serve)
    run.data["killer"][0].wait()
    assert run.warnings[-1] == "stopped" and time.monotonic() - started < 10


def test_when_the_parent_fails_the_copy_is_stopped_and_reaped(stop_handlers, tmp_path):
    marker = tmp_path / "copy"

    def serve(job: Job) -> Run:
        if job.profiles[0].name == "p00":
            raise RuntimeError("a bug of the parent's half")
        return _until_stopped(job, marker)

    with pytest.raises(RuntimeError):
        fork.in_two(_job(8), serve)
    told, pid = marker.read_text().split()
    assert told == "stopped"
    with pytest.raises(ChildProcessError):
        os.waitpid(int(pid), os.WNOHANG)  # reaped already: the copy was waited for


def test_a_report_broken_after_its_last_result_is_an_internal_error_not_silence():
    def serve(job: Job) -> Run:
        run = _served(job)
        if job.profiles[0].name != "p00":
            run.policies["/somewhere/else"] = {}  # refused by the reader in the report's last line
        return run

    run = fork.in_two(_job(8), serve)
    assert len(run.results) == 8 and run.internal
    assert run.errors == ["the second process sent a broken report "
                          "(a policy for a profile this worker was not given)"]


def test_a_policy_without_end_reaches_the_report_of_both_processes(tmp_path):
    root = tmp_path / "hermes"
    build_root(root, {name: 30 for name in NAMES}, now=NOW)
    config = tmp_path / "admin.yaml"
    config.write_text("defaults:\n  export_keep_days: .inf\n")
    environ = dict(os.environ, HOME=str(tmp_path / "home"), HERMES_HOME="", HERMES_ADMIN_CONFIG=str(config))
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), "run", "--dry-run", "--json"],
                          capture_output=True, text=True, env=environ, stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), done.stderr

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    doc = json.loads(done.stdout, parse_constant=refuse)  # no Infinity: JSON has none
    assert len(doc["policies"]) == len(NAMES) and not doc["errors"]
    assert {p["export_keep_days"] for p in doc["policies"].values()} == {None}
    assert all("exports kept forever" in p["description"] for p in doc["policies"].values())


def test_children_reaped_by_the_kernel_still_give_one_report():
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # as a parent of ours may leave it
    try:
        run = fork.in_two(_job(8), _served)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert [r.profile for r in run.results] == [f"p0{i}" for i in range(8)] and not run.errors


def test_a_failing_parent_does_not_wait_on_a_copy_stuck_writing_its_report(monkeypatch):
    # Its grace made long: ending at once (under a second) and waiting it out never look alike,
    # however busy the machine.
    monkeypatch.setattr(fork, "STOP_GRACE_S", 120.0)

    def serve(job: Job) -> Run:
        run = _served(job)
        if job.profiles[0].name == "p00":
            time.sleep(0.5)  # the copy is done meanwhile, its report larger than the pipe holds
            raise RuntimeError("a bug of the parent's half")
        run.add(*[Problem(WARNING, "x" * 100)] * 5000)
        return run

    started = time.monotonic()
    with pytest.raises(RuntimeError):
        fork.in_two(_job(8), serve)
    assert time.monotonic() - started < fork.STOP_GRACE_S / 2

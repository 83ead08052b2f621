"""Nothing a home's owner does to her worker holds root's run up past a bound (docs/design.md §10):
the host's deadlines on a worker, the worker's on its forked copy, its file remover, its probe and
its plugin process, and the units' start timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hermes_admin import child
from hermes_admin.host import workers
from hermes_admin.host.config import AdminConfig
from hermes_admin.host.runner import Host
from hermes_admin.layers import Layer, Origin, PolicyLayers
from hermes_admin.model import ORDER
from hermes_admin.model import Owner, Profile
from hermes_admin.profile import fork
from hermes_admin.profile.engine import remover
from hermes_admin.profile.policy import PolicyError, _coerce, admin_setting
from hermes_admin.protocol import Context, Job, Maintain, Reader, Request, Writer
from hermes_admin.results import Result, Run
from tests.conftest import NOW
from tests.helpers import until

HELLO = '{"t": "hello", "uid": 0, "gid": 0, "groups": []}'
# What each test below waits at most: a stopped or silent process would hold it up forever, so any
# bound shows that a deadline ended the wait; which one did, the messages say. Half the 60 s overall
# deadline the idle ones are set beside, and over ten times what a loaded 2-core machine takes.
BOUND_S = 30.0


def _defaults(values: dict, entry: dict | None = None) -> PolicyLayers:
    """The admin config's `defaults:` (and a profile's entry) as a job carries them."""
    return PolicyLayers(entry=Layer(entry, Origin("a.yaml", "profiles.p")) if entry is not None else None,
                        defaults=Layer(values, Origin("a.yaml", "defaults")))


def _job(n: int = 2, layers: dict | None = None) -> Job:
    owner = Owner(os.getuid(), os.getgid(), tuple(sorted(os.getgroups())), "mallory", "/nonexistent")
    found = [Profile(Path("/r"), f"p{i}", Path(f"/r/profiles/p{i}")) for i in range(n)]
    return Job(Maintain(Request(ORDER, NOW)), owner, found, layers or {})


def _fake_worker(monkeypatch, script: str) -> None:
    """The worker replaced by `script` (its job pipe's descriptor is sys.argv[1])."""
    monkeypatch.setattr(workers.child, "argv", lambda module, *args, **_: [sys.executable, "-c", script, *args])


def _spawn(job: Job, deadlines: workers.Deadlines) -> tuple[Run, float]:
    started = time.monotonic()
    spawned = workers.Spawned(job, 0, deadlines)
    run = spawned.run()
    return run, time.monotonic() - started


def test_a_silent_worker_is_killed_at_its_idle_deadline_with_its_group(monkeypatch, tmp_path):
    marker = tmp_path / "grandchild"
    # says hello, starts a child of its own (same process group), then goes silent, as a stopped one does
    grandchild = f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    _fake_worker(monkeypatch, f"""
import subprocess, sys, time
print('{HELLO}', flush=True)
subprocess.Popen([sys.executable, '-c', {grandchild!r}])
time.sleep(60)
""")
    run, took = _spawn(_job(), workers.Deadlines(idle=1.0, overall=60))
    assert took < BOUND_S
    assert len(run.errors) == 2 and all("gave no sign of life for 1 s" in e and "killed" in e for e in run.errors)
    assert run.errors[0].startswith("profile 'p0': /r/profiles/p0: the worker for mallory")
    pid = int(marker.read_text())
    assert until(lambda: _gone(pid), BOUND_S)  # killed with the worker's process group (its 60 s sleep cut short)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def test_a_stopped_worker_is_killed_at_its_idle_deadline(monkeypatch):
    _fake_worker(monkeypatch, f"""
import os, signal, time
print('{HELLO}', flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
""")
    run, took = _spawn(_job(1), workers.Deadlines(idle=1.0, overall=60))
    assert took < BOUND_S
    assert run.errors and "gave no sign of life" in run.errors[0]


def test_a_worker_that_beats_forever_is_killed_at_its_overall_deadline(monkeypatch):
    _fake_worker(monkeypatch, f"""
import time
print('{HELLO}', flush=True)
while True:
    print('{{"t": "beat"}}', flush=True)
    time.sleep(0.1)
""")
    run, took = _spawn(_job(1), workers.Deadlines(idle=1.0, overall=2.0))
    assert 2.0 <= took < BOUND_S
    assert "still at work after 2 s; killed (worker_timeout)" in run.errors[0]


def test_a_worker_whose_main_thread_is_stuck_is_killed_at_its_idle_deadline_though_it_beats(monkeypatch):
    """Its beat thread beats on while its main thread is blocked inside the kernel (here a read of a
    pipe nobody writes; a file its owner serves through FUSE does the same): no progress, no extension."""
    _fake_worker(monkeypatch, f"""
import os, threading, time
print('{HELLO}', flush=True)
def beat():
    while True:
        print('{{"t": "beat"}}', flush=True)
        time.sleep(0.05)
threading.Thread(target=beat, daemon=True).start()
r, w = os.pipe()
os.read(r, 1)
""")
    run, took = _spawn(_job(1), workers.Deadlines(idle=1.0, overall=60))
    assert took < BOUND_S  # the idle deadline ended it (its message says so), not the 60 s overall one
    assert run.errors and "gave no sign of life for 1 s" in run.errors[0]


def test_a_worker_that_never_reads_its_job_never_blocks_the_host(monkeypatch):
    _fake_worker(monkeypatch, "import time; time.sleep(60)")
    big = {f"/r/profiles/p{i}": _defaults({"x": "y" * 4096}) for i in range(64)}  # past a pipe's 64 KiB
    run, took = _spawn(_job(64, big), workers.Deadlines(idle=1.0, overall=60))
    assert took < BOUND_S
    assert len(run.errors) == 64 and "gave no sign of life" in run.errors[0]


def test_a_beating_worker_that_reports_is_not_killed(monkeypatch):
    """Twice its idle deadline at work, beating twenty times within each: its start and a late beat
    have two whole seconds (a loaded 2-core machine starts it in about 0.15 s)."""
    _fake_worker(monkeypatch, f"""
import time
print('{HELLO}', flush=True)
for _ in range(40):
    print('{{"t": "beat"}}', flush=True)
    time.sleep(0.1)
print('{{"t": "end", "v": {{"dry_run": false, "problems": [], "findings": []}}}}', flush=True)
""")
    run, took = _spawn(_job(1), workers.Deadlines(idle=2.0, overall=60))
    assert run.errors == [] and took >= 4.0  # its 40 pauses of 0.1 s: a lower bound no machine can miss


def test_the_writer_beats_from_a_thread_and_stops_at_the_end():
    lines: list[str] = []
    writer = Writer(lines.append)
    with writer.beating(0.05):
        deadline = time.monotonic() + 30  # three beats, however long a loaded machine takes to give them
        while lines.count('{"t": "beat"}\n') < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    writer.run(Run(dry_run=True))
    writer.beat()  # after the end: nothing
    assert sum(line == '{"t": "beat"}\n' for line in lines) >= 3
    assert lines[-1].startswith('{"t": "end"')
    reader = Reader(set())
    for line in [HELLO, *lines]:
        reader.line(line.strip().encode())
    assert reader.ended


def test_deadlines_come_from_the_admin_config_alone(tmp_path):
    assert admin_setting(PolicyLayers(), "worker_idle_timeout") == 120
    assert admin_setting(_defaults({"worker_timeout": 60}), "worker_timeout") == 60
    assert admin_setting(_defaults({"worker_timeout": 60}, entry={"worker_timeout": 30}), "worker_timeout") == 30
    assert admin_setting(_defaults({"worker_timeout": -1}), "worker_timeout") == 7200  # wrong: the built-in
    for bad in (0, -1, float("inf"), True, "soon"):
        with pytest.raises(PolicyError):
            _coerce("worker_idle_timeout", bad, "here")
    config = AdminConfig(defaults={"worker_idle_timeout": 3}, profiles={"big": {"worker_timeout": 99999}})
    host = Host(config, [])
    profiles = [Profile(Path("/r"), name, Path(f"/r/{name}")) for name in ("default", "big")]
    deadlines = host._deadlines(profiles)
    assert (deadlines.idle, deadlines.overall) == (3, 99999)  # the longest of the worker's profiles


def test_a_stopped_fork_copy_is_killed_at_the_idle_deadline(monkeypatch):
    owner = Owner(os.getuid(), os.getgid(), (), "someone", "/nonexistent")
    found = [Profile(Path("/r"), f"p{i:02d}", Path(f"/r/profiles/p{i:02d}")) for i in range(fork.MIN_PROFILES)]
    job = Job(Maintain(Request(ORDER, NOW)), owner, found, {}, Context(idle_timeout=1.0))
    parent = os.getpid()

    def serve(job: Job) -> Run:
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGSTOP)  # the copy stops itself, as its owner could
        run = Run(dry_run=False)
        for p in job.profiles:
            result = Result(p.name, "run", None, False)
            result.home = str(p.home)
            run.results.append(result)
        return run

    started = time.monotonic()
    run = fork.in_two(job, serve)
    assert time.monotonic() - started < BOUND_S
    assert len(run.results) == fork.MIN_PROFILES // 2
    assert len(run.errors) == fork.MIN_PROFILES // 2
    assert "gave no sign of life for 1 s (stopped, traced or blocked?); killed" in run.errors[0]


def test_a_stopped_file_remover_costs_at_most_its_stall_time(monkeypatch, tmp_path):
    monkeypatch.setattr(remover, "STALL_S", 1.0)
    folder = tmp_path / "sessions"
    folder.mkdir()
    files = [folder / f"f{i}" for i in range(3)]
    for f in files:
        f.write_text("x")
    r = remover.FileRemover(str(folder))
    r.remove([str(files[0])])
    r.drain()
    os.kill(r._process.pid, signal.SIGSTOP)
    started = time.monotonic()
    r.remove([str(f) for f in files[1:]])
    r.close()
    assert time.monotonic() - started < 10 * remover.STALL_S  # a few stall times, never the default 30 s
    assert not any(f.exists() for f in files)  # done here instead


def test_a_bounded_run_kills_a_stopped_program_and_its_group(tmp_path):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        child.run_bounded([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"], 1.0, 100)
    assert time.monotonic() - started < BOUND_S
    done = child.run_bounded([sys.executable, "-c", "import sys; print(sys.stdin.read()); print('x' * 10**6)"],
                             10, 1000, input=b"hello" * 40000)
    assert done.returncode == 0 and done.stdout.startswith(b"hello") and len(done.stdout) == 1001


@pytest.mark.parametrize("unit", ["hermes-admin.service", "user/hermes-admin.service"])
def test_the_oneshot_units_carry_a_start_timeout(unit):
    text = (Path(__file__).resolve().parents[2] / "systemd" / unit).read_text()
    assert "\nTimeoutStartSec=" in text


def test_owners_are_worked_side_by_side_and_reported_in_their_order(monkeypatch, tmp_path, capsys):
    """The first owner's worker stops itself; the second's begins at once, not after the first's idle
    deadline, and the reports (and the relayed log lines) still come in the owners' order."""
    monkeypatch.setenv("HERMES_ADMIN_WORKER", "process")
    started = tmp_path / "started"
    _fake_worker(monkeypatch, f"""
import json, os, signal, sys, time
job = json.loads(os.fdopen(int(sys.argv[1]), "rb").readline())
user, home = job["owner"]["user"], job["profiles"][0]["home"]
print('{HELLO}', flush=True)
print(f"log of {{user}}", file=sys.stderr, flush=True)
if user == "stalls":
    os.kill(os.getpid(), signal.SIGSTOP)
open({str(started)!r} + "-" + user, "w").write(repr(time.monotonic()))
result = {{"profile": "p", "home": home, "action": "delete", "reason": None, "dry_run": False, "task": None,
          "status": "done", "why": None, "hook_failures": [], "notes": [], "transactions": 0,
          "longest_write_ms": 0, "longest_write": None, "vacuumed": False, "seconds": 0, "export": None}}
print(json.dumps({{"t": "result", "v": result}}), flush=True)
print('{{"t": "end", "v": {{"dry_run": false, "problems": [], "findings": []}}}}', flush=True)
""")
    me = (os.getuid(), os.getgid(), tuple(sorted(os.getgroups())))
    jobs = []
    for n, user in enumerate(("stalls", "goes")):
        owner = Owner(*me, user, "/nonexistent")
        profile = Profile(Path("/r"), f"p{n}", Path(f"/r/profiles/p{n}"))
        jobs.append((Job(Maintain(Request(ORDER, NOW)), owner, [profile]), workers.Deadlines(idle=5.0, overall=60)))
    reports, first_at = [], None
    for report in workers.side_by_side(jobs):
        reports.append(report)
        first_at = first_at or time.monotonic()  # the stalled worker's report: after its idle deadline
    assert float(Path(f"{started}-goes").read_text()) < first_at  # begun before that, not after it
    assert not Path(f"{started}-stalls").exists()
    assert "gave no sign of life" in reports[0].errors[0] and reports[1].errors == []
    assert [r.home for r in reports[1].results] == ["/r/profiles/p1"]
    err = capsys.readouterr().err
    assert err.index("stalls: log of stalls") < err.index("goes: log of goes")


def test_the_invokers_own_job_is_not_held_up_by_another_owners_stalled_worker(monkeypatch):
    """Root's own homes come after a stalled owner's in the order: they are worked at once, here, and
    their report still comes second."""
    _fake_worker(monkeypatch, f"""
import os, signal
print('{HELLO}', flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
""")
    monkeypatch.setattr(workers, "spawns", lambda owner: owner.user == "stalls")
    ran: list[float] = []

    def here(job):
        ran.append(time.monotonic())
        return Run(dry_run=True)

    monkeypatch.setattr(workers, "_here", here)
    me = (os.getuid(), os.getgid(), tuple(sorted(os.getgroups())))
    jobs = [(Job(Maintain(Request(ORDER, NOW)), Owner(*me, user, "/nonexistent"),
                 [Profile(Path("/r"), f"p{n}", Path(f"/r/profiles/p{n}"))]), workers.Deadlines(idle=3.0, overall=60))
            for n, user in enumerate(("stalls", "mine"))]
    reports, first_at = [], None
    for report in workers.side_by_side(jobs):
        reports.append(report)
        first_at = first_at or time.monotonic()  # the stalled worker's report: after its idle deadline
    assert ran and ran[0] < first_at  # worked before that, not after it
    assert "gave no sign of life" in reports[0].errors[0] and reports[1].errors == []

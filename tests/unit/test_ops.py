"""Daemon schedule, signals, sd_notify, metrics textfile, systemd units."""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from hermes_admin.problems import ERROR, Problem
from hermes_admin.host import sdnotify
from hermes_admin.host.config import AdminConfig
from hermes_admin.host.daemon import DEFAULT_SCHEDULE, ScheduleError, job_id, schedule, trigger_for
from tests.helpers import row_ids

MONDAY = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)  # a Monday


@pytest.mark.parametrize("spec, expected", [
    ("0 3 * * *", datetime(2026, 12, 1, 3, 0, tzinfo=timezone.utc)),
    ("0 3 * * sat", datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)),  # names, never numbers
    ("*/15 * * * mon-fri", datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)),  # now itself matches
    ({"every_seconds": 90}, datetime(2026, 11, 30, 12, 1, 30, tzinfo=timezone.utc)),
])
def test_triggers(spec, expected):
    trigger = trigger_for("run", spec)
    if hasattr(trigger, "timezone") and not isinstance(spec, dict):
        trigger.timezone = timezone.utc
    if isinstance(spec, dict):  # an interval counts from its start: ask one second after it
        trigger.start_date = MONDAY
        assert trigger.get_next_fire_time(MONDAY, MONDAY.replace(second=1)) == expected
        return
    assert trigger.get_next_fire_time(None, MONDAY) == expected


@pytest.mark.parametrize("task, spec, message", [
    ("run", "0 3 * * 1", "by name"),
    ("run", "0 3 * *", "5-field"),
    ("run", {"every_seconds": 0}, "at least 1"),
    ("run", {"every_seconds": 0.001}, "at least 1, not '0.001'"),
    ("run", {"every_seconds": float("nan")}, "at least 1"),
    ("run", {"every_seconds": "20"}, "a number of seconds"),
    ("run", 42, "crontab string"),
    ("nap", "0 3 * * *", "unknown task"),
    ("run", "99 3 * * *", "99"),
])
def test_bad_schedules(task, spec, message):
    with pytest.raises(ScheduleError, match=message):
        trigger_for(task, spec)


def test_jobs_have_fixed_ids_and_are_replaced():
    scheduler = BackgroundScheduler()
    scheduler.start(paused=True)
    try:
        schedule(scheduler, AdminConfig(), lambda task: None)
        assert [j.id for j in scheduler.get_jobs()] == [job_id("run")]  # the default: a nightly run
        assert DEFAULT_SCHEDULE["run"]["jitter"] > 0
        config = AdminConfig(schedule={"run": {"every_seconds": 60}, "purge": "0 4 * * sun"})
        schedule(scheduler, config, lambda task: None)
        schedule(scheduler, config, lambda task: None)  # again: same ids, no duplicates
        jobs = {j.id: j for j in scheduler.get_jobs()}
        assert set(jobs) == {job_id("run"), job_id("purge")}
        assert all(j.coalesce and j.max_instances == 1 for j in jobs.values())
        assert jobs[job_id("purge")].next_run_time.weekday() == 6
        schedule(scheduler, AdminConfig(schedule={"purge": "0 4 * * sun"}), lambda task: None)
        assert [j.id for j in scheduler.get_jobs()] == [job_id("purge")]
    finally:
        scheduler.shutdown(wait=False)


def test_sd_notify_datagrams(tmp_path):
    path = tmp_path / "notify.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    try:
        assert sdnotify.notify("READY=1", {"NOTIFY_SOCKET": str(path)})
        assert server.recv(100) == b"READY=1"
        assert not sdnotify.notify("READY=1", {})  # outside systemd: nothing, no error
        assert not sdnotify.notify("READY=1", {"NOTIFY_SOCKET": "relative"})
        assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "4000000"}) == 2.0
        assert sdnotify.watchdog_interval({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "1"}) is None
    finally:
        server.close()


def parse_textfile(text: str) -> dict[str, float]:
    """Samples by `name{profile="…",home="…",other="…"}` (labels in that order, whatever the file's)."""
    from prometheus_client.parser import text_string_to_metric_families

    first = ["profile", "home"]
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            keys = sorted(sample.labels, key=lambda k: first.index(k) if k in first else len(first))
            labels = ",".join(f'{k}="{sample.labels[k]}"' for k in keys)
            samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return samples


def start_daemon(root: Path, config: Path, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "hermes_admin", "--root", str(root), "--config", str(config),
                             "daemon"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def notified_daemon(root: Path, config: Path, tmp_path: Path) -> tuple[subprocess.Popen, socket.socket]:
    """The daemon with a notify socket of the test's, once it has said READY=1."""
    sock_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    listener.settimeout(20)
    proc = start_daemon(root, config, {"NOTIFY_SOCKET": str(sock_path)})
    try:
        assert listener.recv(200).startswith(b"READY=1")
    except BaseException:
        proc.kill()
        listener.close()
        raise
    return proc, listener


def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_daemon_runs_writes_metrics_reloads_and_stops_on_sigterm(synth_root, tmp_path):
    root, kinds = synth_root
    metrics = tmp_path / "metrics" / "hermes.prom"
    config = tmp_path / "admin.yaml"
    config.write_text(f"schedule: {{run: {{every_seconds: 1}}}}\nmetrics_file: {metrics}\n"
                      "defaults: {auto_prune: true}\n")
    proc, listener = notified_daemon(root, config, tmp_path)
    try:
        old = set(kinds["work"]["old_ended"])
        assert wait_for(lambda: not row_ids(root / "profiles" / "work" / "state.db") & old, 60)
        assert wait_for(metrics.exists, 60)
        samples = parse_textfile(metrics.read_text())
        assert samples[f'hermes_admin_sessions{{profile="work",home="{root}/profiles/work"}}'] >= 1
        assert "hermes_admin_last_run_timestamp_seconds" in samples
        assert "# TYPE hermes_admin_deleted_sessions_total counter" in metrics.read_text()
        config.write_text(f"schedule: {{purge: '0 4 * * sun'}}\nmetrics_file: {metrics}\n")
        proc.send_signal(signal.SIGHUP)
        assert listener.recv(200) == b"RELOADING=1"
        assert listener.recv(200) == b"READY=1"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # stopped, not left running (a hang guard, not a measure)
        assert listener.recv(200) == b"STOPPING=1"
        output = proc.stdout.read()
        assert "config reloaded; jobs: hermes-admin:purge" in output
        assert re.search(r"work: purge: \d+ unit\(s\)", output)
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()


TGKILL = {"x86_64": 234, "aarch64": 131}.get(platform.machine())  # the syscall's number


@pytest.mark.skipif(TGKILL is None, reason="tgkill's syscall number is not known for this machine")
def test_daemon_stops_at_once_when_the_kernel_hands_sigterm_to_another_of_its_threads(synth_root, tmp_path):
    """A signal for the process may go to any of its threads; the main thread, asleep in select(),
    must still wake (it slept its full 60 s before: the CI flake of a daemon slow to stop)."""
    import ctypes

    root, _ = synth_root
    config = tmp_path / "admin.yaml"
    config.write_text("schedule: {purge: '0 4 * * sun'}\n")
    proc, listener = notified_daemon(root, config, tmp_path)
    try:
        others = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        assert others, "the scheduler runs a thread of its own"
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(TGKILL, proc.pid, others[0], signal.SIGTERM) == 0
        assert proc.wait(timeout=10) == 0
        assert listener.recv(200) == b"STOPPING=1"
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()


def test_daemon_refuses_a_bad_schedule(synth_root, tmp_path):
    root, _ = synth_root
    config = tmp_path / "admin.yaml"
    config.write_text("schedule: {run: '0 3 * * 1'}\n")
    proc = start_daemon(root, config)
    assert proc.wait(timeout=30) == 78  # EX_CONFIG
    assert "by name" in proc.stdout.read()


def test_run_writes_the_textfile(synth_root, tmp_path, invoke):
    root, _ = synth_root
    target = tmp_path / "m.prom"
    result = invoke("--root", str(root), "run", "--metrics-file", str(target))
    assert result.exit_code == 0, result.stderr
    samples = parse_textfile(target.read_text())
    work = root / "profiles" / "work"
    deleted = f'hermes_admin_deleted_sessions_total{{profile="work",home="{work}",reason="ghost_prune"}}'
    assert samples[deleted] == 2  # ghost + orphans
    assert any(k.startswith("hermes_admin_run_seconds{") for k in samples)
    assert not list(tmp_path.glob(".m.prom.*"))  # no temporary file left behind
    assert not any(k.endswith("_created") or "_created{" in k for k in samples)
    again = invoke("--root", str(root), "run", "--metrics-file", str(target))
    assert again.exit_code == 0, again.stderr
    assert parse_textfile(target.read_text())[deleted] == 2  # a run that deleted nothing adds nothing


def test_counters_are_totals_over_runs_and_gauges_what_a_run_found():
    """Prometheus' rules: what runs do is a `_total` counter, each run adding to the file before it."""
    from prometheus_client.parser import text_string_to_metric_families

    from hermes_admin.host import metrics
    from hermes_admin.results import Done, Result, Run

    def one_run(rows: int) -> Run:
        result = Result("work", "delete", "prune", False, task="purge", home="/h/work")
        result.done += [Done(f"s{n}", (f"s{n}",), "r") for n in range(rows)]
        return Run(dry_run=False, results=[result], problems=[Problem(ERROR, "broken", profile="work", home="/h/work")])

    summaries = [{"name": "work", "home": "/h/work", "ok": True, "store": True, "sessions": 5, "messages": 9,
                  "store_bytes": 1, "wal_bytes": 0}]
    first = metrics.render(one_run(3), summaries, finished=1.0)
    kinds = {f.name: f.type for f in text_string_to_metric_families(first)}
    assert all(kinds[name] == "counter" for name in ("hermes_admin_deleted_sessions", "hermes_admin_run_errors",
                                                      "hermes_admin_skipped_units", "hermes_admin_archived_sessions",
                                                      "hermes_admin_plugin_failures"))
    assert all(kind == "gauge" for name, kind in kinds.items() if not name.endswith(("_sessions", "_errors", "_units",
                                                                                     "_failures")))
    assert kinds["hermes_admin_sessions"] == "gauge"
    second = parse_textfile(metrics.render(one_run(4), summaries, finished=2.0,
                                           previous=metrics_carried(first)))
    assert second['hermes_admin_deleted_sessions_total{profile="work",home="/h/work",reason="prune"}'] == 7
    assert second['hermes_admin_run_errors_total{profile="work",home="/h/work"}'] == 2
    assert second['hermes_admin_sessions{profile="work",home="/h/work"}'] == 5


def metrics_carried(text: str) -> dict:
    import tempfile

    from hermes_admin.host import metrics

    with tempfile.NamedTemporaryFile("w", suffix=".prom") as out:
        out.write(text)
        out.flush()
        return metrics.carried(Path(out.name))


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")  # CI: fails (tests/skips.py)
@pytest.mark.parametrize("user", [False, True], ids=["system", "user"])
def test_units_verify_cleanly(tmp_path, invoke, user):
    target = tmp_path / "units"
    result = invoke("systemd", "print", "--dir", str(target), *(["--user"] if user else []))
    assert result.exit_code == 0
    units = sorted(str(p) for p in target.iterdir())
    assert len(units) == 3
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))
    done = subprocess.run([SYSTEMD_ANALYZE, *(["--user"] if user else []), "verify", *units],
                          capture_output=True, text=True, env=env)
    complaints = [line for line in (done.stdout + done.stderr).splitlines()
                  if re.search(r"Unknown (key|section)|[Ii]gnoring|parse|not executable|bad unit", line)]
    assert done.returncode == 0 and complaints == [], done.stdout + done.stderr
    texts = {Path(u).name: Path(u).read_text() for u in units}
    assert "Persistent=true" in texts["hermes-admin.timer"]
    assert all("ProtectSystem=strict" in t for n, t in texts.items() if n.endswith(".service"))
    assert "Type=notify" in texts["hermes-admin-daemon.service"]


def test_metrics_carry_last_success_and_plugin_failures(synth_root, tmp_path, invoke):
    from prometheus_client.parser import text_string_to_metric_families

    from tests.helpers import install_plugins

    root, _ = synth_root
    work = root / "profiles" / "work"
    target = tmp_path / "m.prom"
    assert invoke("--root", str(root), "run", "--metrics-file", str(target)).exit_code == 0
    first = parse_textfile(target.read_text())
    key = f'hermes_admin_last_success_timestamp_seconds{{profile="work",home="{work}"}}'
    assert first[key] > 0
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    install_plugins(work, ["raiser"], enabled=["raiser"])
    (work / "state.db").chmod(0o600)
    (work / "config.yaml").write_text((work / "config.yaml").read_text() + "\n")
    garbage = root / "profiles" / "work" / "config.yaml"
    garbage.write_text("sessions: {auto_prune: maybe}\n")  # this run fails in work
    invoke("--root", str(root), "run", "--metrics-file", str(target))
    second = parse_textfile(target.read_text())
    assert second[key] == first[key]  # the last success outlives a failing run
    assert second[f'hermes_admin_run_errors_total{{profile="work",home="{work}"}}'] == 1
    list(text_string_to_metric_families(target.read_text()))


def test_the_daemon_says_a_warning_when_it_appears_when_it_changes_and_when_it_goes(synth_root, caplog):
    """Not the same warnings every job: once, again when what it says changes, `no longer` once gone."""
    import logging

    from hermes_admin.host.config import AdminConfig
    from hermes_admin.host.daemon import Daemon

    root, _ = synth_root
    config = root / "profiles" / "work" / "config.yaml"
    daemon = Daemon(load_config=AdminConfig, roots_given=(str(root),))

    def job() -> list[tuple[int, str]]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="hermes_admin.daemon"):
            daemon.job("run")
        return [(r.levelno, r.getMessage()) for r in caplog.records]

    config.write_text("plugins:\n  hook_callback_timeout: soon\n")
    first = job()
    assert [m for level, m in first if level == logging.WARNING and "hook_callback_timeout 'soon'" in m]
    second = job()
    assert not [m for level, m in second if level == logging.WARNING], second
    assert any("warning(s) as said before" in m for _, m in second)
    config.write_text("plugins:\n  hook_callback_timeout: later\n")
    third = job()
    assert [m for level, m in third if level == logging.WARNING and "'later'" in m], third
    assert any(m.startswith("no longer: ") and "'soon'" in m for _, m in third)
    config.write_text("plugins:\n  hook_callback_timeout: 5\n")
    fourth = job()
    assert not [m for level, m in fourth if level == logging.WARNING]
    assert any(m.startswith("no longer: ") and "'later'" in m for _, m in fourth)
    assert not any("as said before" in m for _, m in fourth)


def test_a_warning_still_there_is_said_again_once_a_day():
    from hermes_admin.host.daemon import Told

    told = Told()
    assert told.sort([("k", "a warning")], 0.0) == (["a warning"], 0, [])
    assert told.sort([("k", "a warning")], 3600.0) == ([], 1, [])
    assert told.sort([("k", "a warning")], 86400.0) == (["a warning"], 0, [])


def test_the_daemons_stderr_is_log_records_in_its_one_format():
    """A line any part of hermes-admin writes on stderr reaches the journal as `LEVEL message`."""
    import io
    import logging

    from hermes_admin.host.daemon import LogLines

    out = io.StringIO()
    logger = logging.getLogger("test.daemon.lines")
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    lines = LogLines(logger, io.StringIO())
    print("hermes-admin: warning: profile 'w': x", file=lines)
    lines.write("hermes-admin: alice: waiting for the store")
    lines.write(" (2 s)\nhermes-admin: error: profile 'w': y\n")
    print("a traceback line", file=lines)
    assert out.getvalue().splitlines() == [
        "WARNING profile 'w': x", "INFO alice: waiting for the store (2 s)", "ERROR profile 'w': y",
        "INFO a traceback line"]


def test_systemd_print_warns_of_tmp_paths_beside_private_tmp(tmp_path, invoke):
    """A root, config or export folder under /tmp is invisible to a unit with PrivateTmp=yes."""
    root = tmp_path / "h"
    root.mkdir()
    printed = invoke("--root", str(root), "systemd", "print")
    assert printed.exit_code == 0
    assert str(root).startswith("/tmp/") or str(root).startswith("/var/tmp/")
    lines = [line for line in printed.stderr.splitlines() if "PrivateTmp=yes" in line]
    (line,) = [line for line in lines if f": {root} is under /tmp" in line]  # one line a path, every unit named
    assert "hermes-admin.service" in line and "hermes-admin-daemon.service" in line and "never sees that path" in line
    assert len(lines) == len({line.split(": ")[3] for line in lines})
    elsewhere = invoke("--root", "/srv/hermes", "systemd", "print")
    # only the paths under /tmp are named: this root is not (the installation itself may be, in a
    # venv made under /tmp, and is then rightly named)
    assert "/srv/hermes" not in elsewhere.stderr and str(root) not in elsewhere.stderr


def test_a_job_due_while_the_last_is_at_work_is_said_in_the_daemons_words():
    """APScheduler's own warning (its job's repr, `maximum number of running instances`) becomes
    one INFO line naming the task; the next run is said to the second, with its zone."""
    import logging

    from hermes_admin.host.daemon import StillAtWork, when

    scheduler = BackgroundScheduler()
    job = scheduler.add_job(print, "interval", seconds=5, name="run")
    record = logging.LogRecord("apscheduler.scheduler", logging.WARNING, __file__, 1,
                               'Execution of job "%s" skipped: maximum number of running instances reached (%d)',
                               (job, 1), None)
    assert StillAtWork().filter(record)
    assert record.levelname == "INFO"
    assert record.getMessage() == "run: still at work when due again; that time is skipped"
    assert when(datetime(2026, 12, 6, 17, 7, 13, 598011, tzinfo=timezone.utc)) == "2026-12-06 17:07:13 UTC"

"""`hermes-admin daemon`: the maintenance tasks on a schedule (APScheduler 3.x).

Jobs come from the admin config's `schedule:` (`TASK: "crontab"` or
`TASK: {every_seconds: N}`), re-added with fixed ids at each start, run one at
a time with missed runs coalesced. SIGTERM/SIGINT stop after the current
transaction; SIGHUP reloads the config and reschedules. With `$NOTIFY_SOCKET`
it tells systemd READY, STOPPING and WATCHDOG.
"""

from __future__ import annotations

import io
import logging
import os
import select
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from hermes_admin import report, stopping
from hermes_admin.shown import clean
from hermes_admin.host import metrics, sdnotify
from hermes_admin.host.config import AdminConfig
from hermes_admin.model import BY_COMMAND, ORDER
from hermes_admin.protocol import Maintain, Request
from hermes_admin.results import Run

log = logging.getLogger("hermes_admin.daemon")

# What each schedulable task runs: `run`'s whole order, or one task by its command's name.
TASKS = {"run": ORDER, **{command: (task.name,) for command, task in BY_COMMAND.items()}}
# Nightly, somewhere between 03:30 and 04:00, so many machines do not start at once.
DEFAULT_SCHEDULE = {"run": {"cron": "30 3 * * *", "jitter": 1800}}
# Past a worker's idle deadline, how long its kill and report may take before the daemon counts its job stuck.
STUCK_MARGIN_S = 60.0
MIN_EVERY_S = 1.0  # `every_seconds`: the shortest interval (a job a millisecond is a typo, never a schedule)
# A warning still there is said again after this long, so that a day of the journal holds it.
TOLD_AGAIN_S = 86400.0


@dataclass
class Told:
    """The warnings one scheduled task's jobs have said: a job says a warning when it first appears,
    when what it says changes (a new key: report.keyed_problems) and once a day while it stays;
    one that went is said to be gone. Errors and held locks are said by every job."""
    again_s: float = TOLD_AGAIN_S
    said: dict = field(default_factory=dict)  # key -> (line, when it was last said)

    def sort(self, warnings: list[tuple[object, str]], now: float) -> tuple[list[str], int, list[str]]:
        """(the lines to say now, how many are still there as said before, the lines of those gone)."""
        fresh, known = [], 0
        for key, line in warnings:
            if key in self.said and now - self.said[key][1] < self.again_s:
                known += 1
                continue
            fresh.append(line)
            self.said[key] = (line, now)
        keys = {key for key, _ in warnings}
        gone = [line for key, (line, _) in self.said.items() if key not in keys]
        self.said = {key: value for key, value in self.said.items() if key in keys}
        return fresh, known, gone


class StillAtWork(logging.Filter):
    """APScheduler's own warning when a job falls due while the one before is still at work
    (`Execution of job "run (trigger: ..., next run at: ...)" skipped: maximum number of running
    instances reached (1)`), said in the daemon's words, at INFO: nothing is wrong, that time is
    coalesced into the job at work (max_instances 1, as `every_seconds` says)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and "maximum number of running instances" in record.msg:
            job = record.args[0] if isinstance(record.args, tuple) and record.args else None
            record.msg, record.args = "%s: still at work when due again; that time is skipped", \
                (getattr(job, "name", job),)
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def when(moment) -> str:
    """A job's next time as the journal says it: to the second, with its zone."""
    return moment.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if moment is not None else "none (paused)"


class LogLines(io.TextIOBase):
    """The daemon's stderr as log records: what the rest of hermes-admin says on stderr
    (`hermes-admin: warning: ...`, a worker's relayed lines, a plugin's note) reaches the journal in
    the daemon's one format (`LEVEL message`), a record a line."""

    PREFIXES = (("hermes-admin: warning: ", logging.WARNING), ("hermes-admin: error: ", logging.ERROR),
                ("hermes-admin: ", logging.INFO))

    def __init__(self, logger: logging.Logger, underlying):
        super().__init__()
        self._log, self._underlying, self._lock, self._pending = logger, underlying, threading.Lock(), ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._underlying.isatty()

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            line, self._pending = self._pending, ""
        if line:
            self._emit(line)

    def _emit(self, line: str) -> None:
        if not line.strip():
            return
        for prefix, level in self.PREFIXES:
            if line.startswith(prefix):
                self._log.log(level, "%s", line[len(prefix):])
                return
        self._log.info("%s", line)


class ScheduleError(Exception):
    pass


def job_id(task: str) -> str:
    return f"hermes-admin:{task}"


def trigger_for(task: str, spec) -> CronTrigger | IntervalTrigger:
    """A trigger from `"m h dom mon dow"`, `{every_seconds: N}` or `{cron: "...", jitter: N}`."""
    if task not in TASKS:
        raise ScheduleError(f"schedule: unknown task {task!r} (known: {', '.join(TASKS)})")
    if isinstance(spec, dict) and "every_seconds" in spec:
        seconds = spec["every_seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= MIN_EVERY_S \
                or seconds == float("inf"):
            raise ScheduleError(f"schedule.{task}: every_seconds must be a number of seconds, at least "
                                f"{MIN_EVERY_S:g}, not {str(seconds)[:40]!r} (a job starts at most once a second; "
                                "one still at work when the next is due is coalesced)")
        return IntervalTrigger(seconds=seconds)
    jitter = None
    if isinstance(spec, dict) and "cron" in spec:
        spec, jitter = spec["cron"], spec.get("jitter")
    if not isinstance(spec, str):
        raise ScheduleError(f"schedule.{task}: give a crontab string or {{every_seconds: N}}")
    fields = spec.split()
    if len(fields) != 5:
        raise ScheduleError(f"schedule.{task}: {spec!r} is not a 5-field crontab line")
    if any(ch.isdigit() for ch in fields[4]):
        raise ScheduleError(f"schedule.{task}: write days of the week by name (mon-fri), not number: "
                            "APScheduler 3.x counts them from Monday, unlike cron")
    try:
        return CronTrigger(minute=fields[0], hour=fields[1], day=fields[2], month=fields[3],
                           day_of_week=fields[4], jitter=jitter)
    except ValueError as exc:
        raise ScheduleError(f"schedule.{task}: {spec!r}: {exc}") from None


def schedule(scheduler, config: AdminConfig, job: Callable[[str], None]) -> list[str]:
    """(Re)add every job with its fixed id; returns the ids."""
    wanted = config.schedule or DEFAULT_SCHEDULE
    triggers = {task: trigger_for(task, spec) for task, spec in wanted.items()}  # all valid, or none added
    ids = []
    for existing in scheduler.get_jobs():
        if existing.id not in {job_id(t) for t in triggers}:
            existing.remove()
    for task, trigger in triggers.items():
        scheduler.add_job(job, trigger, args=[task], id=job_id(task), name=task, replace_existing=True,
                          coalesce=True, max_instances=1, misfire_grace_time=3600)
        ids.append(job_id(task))
    return ids


@dataclass
class Daemon:
    load_config: Callable[[], AdminConfig]
    roots_given: tuple[str, ...] = ()  # --root (else the config's roots:, ...: host/runner.Host.of)
    all_users: bool = False
    verbose: int = 0
    metrics_file: str | None = None

    def __post_init__(self):
        self.config = self.load_config()
        # A self-pipe, not a threading.Event: the signal handler must take no lock (an Event's
        # lock may be held by the very main-thread code the signal interrupts).
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._reload = False
        self._told: dict[str, Told] = {}  # per scheduled task: its warnings said so far

    def job(self, task: str) -> None:
        """One scheduled run over every profile (the scheduler's job); never raises (a failing one must not
        kill the daemon)."""
        started = time.time()
        try:
            target = self.metrics_file or self.config.metrics_file
            run = self.work(task, started, bool(target))
            for line in report.summary_lines(run, only_changes=not log.isEnabledFor(logging.DEBUG)):
                log.info(clean(line))
            said = report.keyed_problems(run)  # as `run` says them: one line per failing plugin
            fresh, known, gone = self._told.setdefault(task, Told()).sort(
                [(key, line) for severity, key, line in said if severity == "warning"], started)
            for line in fresh:
                log.warning(clean(line, 4000))
            for line in gone:
                log.info("no longer: %s", clean(line, 4000))
            for severity, _, line in said:
                if severity != "warning":
                    log.error(clean(line, 4000))
            if target:
                try:
                    why = metrics.write(target, run, run.data.pop("summaries", []))
                except (OSError, ValueError) as exc:
                    log.error("metrics file %s: %s", target, exc.strerror or exc)
                else:
                    if why:
                        log.error("metrics_file %s: refusing it as root: %s; the run was done, its metrics were "
                                  "not written", target, why)
            still = f"; {known} warning(s) as said before" if known else ""
            log.info("%s finished in %.1f s (exit status %d%s)", task, time.time() - started, run.exit_code(), still)
        except Exception:
            log.exception("%s failed; the daemon goes on", task)

    def work(self, task: str, now: float, summaries: bool) -> Run:
        """One scheduled run: the profiles found afresh, each worked on as its owner, the same way
        as `run` (host/runner.py)."""
        from hermes_admin.host.config import ConfigError, with_managed
        from hermes_admin.host.runner import Host
        from hermes_admin.problems import ERROR, Problem

        try:  # Hermes' managed scope as it is now: an edit counts from the next run, without a reload
            config = with_managed(self.config)
        except ConfigError as exc:  # as root, not root's alone: nothing runs, as for a config refused
            run = Run(dry_run=False)
            run.add(Problem(ERROR, f"config: {exc}", kind="managed_scope"))
            return run
        host = Host.of(config, self.roots_given, self.all_users, verbose=self.verbose)
        try:
            found = host.select()
            for root in found.missing_roots:
                log.warning("root %s: no such folder", root)
            for skipped in found.skipped:
                if skipped.refused:
                    log.warning("skipped %s", clean(f"{skipped.path}: {skipped.reason}"))
            request = Request(TASKS[task], now, explicit=task != "run")
            return host.work(Maintain(request, summaries=summaries, command=f"daemon: {task}"), found.profiles,
                             with_policy=True)
        finally:
            host.close()

    def job_stuck(self) -> bool:
        """The job thread waits on a worker that has been silent well past any worker's idle deadline
        (host/workers.py kills one at its deadline: this would be a bug of ours). Then the watchdog
        is no longer fed, and systemd restarts the daemon rather than let it hang."""
        from hermes_admin.host import workers

        seen = workers.oldest_sign()
        if seen is None:
            return False
        idle = max((self._idle_setting(), workers.IDLE_TIMEOUT_S))
        stuck = time.monotonic() - seen > idle + STUCK_MARGIN_S
        if stuck:
            log.error("a job's worker has been silent for %.0f s, past its deadline: no longer feeding the "
                      "watchdog", time.monotonic() - seen)
        return stuck

    def _idle_setting(self) -> float:
        from hermes_admin.profile.policy import admin_setting

        entries = [e for e in self.config.profiles.values() if isinstance(e, dict)]
        return max([admin_setting({"entry": e, "defaults": self.config.defaults}, "worker_idle_timeout")
                    for e in entries] + [admin_setting({"defaults": self.config.defaults}, "worker_idle_timeout")])

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        else:
            stopping.request()
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the main loop is awake already

    def _sleep(self, timeout: float) -> None:
        """Until a signal arrives or `timeout` passes."""
        ready, _, _ = select.select([self._wake_r], [], [], timeout)
        if ready:
            os.read(self._wake_r, 4096)

    def serve(self) -> int:
        logging.getLogger("apscheduler.scheduler").addFilter(StillAtWork())
        scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(max_workers=1)},
                                        job_defaults={"coalesce": True, "max_instances": 1})
        ids = schedule(scheduler, self.config, self.job)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # The kernel may hand a signal to any thread (the scheduler's, a job's): Python then runs
        # the handler only when the main thread next runs bytecode, which a select() of up to 60 s
        # would delay. The wakeup fd gets a byte from whichever thread took the signal.
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        scheduler.start()
        for job in scheduler.get_jobs():
            log.info("scheduled %s: next run %s", job.id, when(job.next_run_time))
        sdnotify.notify("READY=1\nSTATUS=scheduled " + ", ".join(ids))
        interval = sdnotify.watchdog_interval()
        while not stopping.requested():
            self._sleep(interval or 60)
            if interval and not self.job_stuck():
                sdnotify.notify("WATCHDOG=1")
            if self._reload and not stopping.requested():
                self._reload = False
                sdnotify.notify("RELOADING=1")
                try:
                    config = self.load_config()
                    schedule(scheduler, config, self.job)
                    self.config = config
                    log.info("config reloaded; jobs: %s", ", ".join(j.id for j in scheduler.get_jobs()))
                except Exception as exc:  # a bad new config keeps the old schedule
                    log.error("config not reloaded, keeping the old schedule: %s", exc)
                sdnotify.notify("READY=1")
        log.info("stopping after the current transaction")
        sdnotify.notify("STOPPING=1")
        scheduler.shutdown(wait=True)
        return 0

"""One worker per owner: start it as that owner, hand it its job, gather its report.

The host never works on a home itself. For the homes of the account it runs as
(a user over her own homes, root over root's) there is no boundary to cross, and
the job runs here, through the same job functions. For anyone else's, root
starts a worker that the kernel switches to the owner (supplementary groups,
gid, uid) before it runs any code, in an isolated interpreter (`-I`: no current
folder, no user site on sys.path), with a clean environment, stdin from
/dev/null, a session of its own (no controlling terminal) and no descriptor
of root's but its three pipes. What it answers is read as untrusted
(protocol.Reader); its log lines are relayed escaped and bounded.

Nothing its owner does to it holds the host up past a bound (docs/design.md §10): the job is
written without blocking; a worker that gives no sign of life (it beats every few seconds) for
`worker_idle_timeout` seconds, as a stopped or traced one does, or that is still at work after
`worker_timeout` seconds, is killed with its whole process group (SIGKILL ends a stopped
process too) and each of its profiles it did not report on gets one line; the next owner's
worker goes on.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from hermes_admin import child, stopping
from hermes_admin.model import Owner
from hermes_admin.problems import ERROR, Problem, about
from hermes_admin.protocol import MAX_LINE, Job, ProtocolError, Reader
from hermes_admin.results import RepairRun, Run
from hermes_admin.shown import clean

LOG_BYTES = 256 << 10  # a worker's log relayed at most; past it, one line says how much was dropped
STOP_GRACE_S = 12.0  # after a stop request, how long a worker may take to finish its transaction
PIPE_GRACE_S = 2.0  # after its report (or its exit), how long a worker's pipes may stay open
# The admin config's `worker_idle_timeout` and `worker_timeout` (profile/policy.py) when no profile says.
IDLE_TIMEOUT_S = 120.0
TIMEOUT_S = 7200.0


@dataclass(frozen=True)
class Deadlines:
    """How long root waits for one worker: `idle` seconds without a sign of life, `overall` in all."""

    idle: float = IDLE_TIMEOUT_S
    overall: float = TIMEOUT_S


# When the conversation with a spawned worker last saw it alive (monotonic), None when no
# conversation is going on: the daemon's watchdog looks at it (host/daemon.py).
activity: list[float | None] = [None]
# What every failure to start a worker as its owner says to do.
FIX = ("install hermes-admin where every user can run it (a venv under /opt, the system "
       "site-packages, or pipx)")


def in_process(owner: Owner) -> bool:
    """The homes of the account we run as need no switch (HERMES_ADMIN_WORKER=process forces one)."""
    return owner.uid == os.geteuid() and os.environ.get("HERMES_ADMIN_WORKER") != "process"


def run_job(job: Job, verbose: int = 0, deadlines: Deadlines | None = None) -> Run:
    """Do `job` as its owner and return its report; never raises for the worker's faults, and never
    waits for another account's worker past `deadlines`."""
    if in_process(job.owner):
        from hermes_admin.profile.jobs import serve

        return serve(job)
    if os.geteuid() != 0 and job.owner.uid != os.geteuid():
        return _failed(job, f"belongs to {job.owner.user}: only {job.owner.user} or root can maintain it")
    return Spawned(job, verbose, deadlines or Deadlines()).run()


def _failed(job: Job, why: str) -> Run:
    run = RepairRun(dry_run=True) if job.kind == "repair" else Run(dry_run=True)
    run.add(*(about(p, ERROR, "worker", why, path=p.home) for p in job.profiles))
    return run


class Spawned:
    """A worker process for one job, and the conversation with it."""

    def __init__(self, job: Job, verbose: int = 0, deadlines: Deadlines = Deadlines()):
        self.job = job
        self.verbose = verbose
        self.deadlines = deadlines
        self.reader = Reader({str(p.home) for p in job.profiles}, repair=job.kind == "repair")
        self.log_bytes = 0
        self.last_log = ""
        self.job_open = True  # the job pipe's write end, until the job is written
        self.proc: subprocess.Popen | None = None

    def run(self) -> Run:
        owner = self.job.owner
        job_r, job_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                child.argv("hermes_admin.profile.worker", str(job_r)),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(job_r,),
                close_fds=True, env=child.environment(owner.home, owner.user), cwd="/", user=owner.uid, group=owner.gid,
                extra_groups=list(owner.groups), start_new_session=True, umask=0o077)
        except OSError as exc:
            os.close(job_w)
            return _failed(self.job, f"cannot run {sys.executable} as {owner.user}: "
                                     f"{exc.strerror or exc}; {FIX}")
        finally:
            os.close(job_r)
        os.set_blocking(job_w, False)  # a worker stopped before it read its job never holds us up
        try:
            problem = self._converse(job_w, self.job.encode())
        finally:
            activity[0] = None
        try:
            code = self.proc.wait(timeout=PIPE_GRACE_S)
        except subprocess.TimeoutExpired:  # its report is in (or never will be): it does not linger
            self._kill()
            code = self.proc.wait()
        run = self.reader.run
        if problem is None and not self.reader.ended:
            if self.reader.hello is None:
                problem = (f"the worker could not start as {owner.user} (exit status {code}"
                           + (f": {self.last_log}" if self.last_log else "") + f"); {FIX}")
            else:
                problem = f"the worker for {owner.user} stopped before its report (exit status {code})"
        if problem:
            run.add(*([about(p, ERROR, "worker", problem, path=p.home) for p in self.job.profiles
                       if not any(r.home == str(p.home) for r in run.results)]
                      or [Problem(ERROR, f"worker for {owner.user}: {problem}", kind="worker")]))
        return run

    def _converse(self, job_w: int, job: bytes) -> str | None:
        """Write the job (`job_w`, non-blocking: closed once written) and read replies and logs
        until both pipes close, or until the worker is done with them: its report ended, or it
        exited, and a short grace passed (a process of the owner's may hold a copy of a pipe
        forever: never waited for). A stop request is passed on; past its grace time the worker is
        killed, as it is past its idle or overall deadline. Returns what went wrong, if anything."""
        proc = self.proc
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ, "reply")
        selector.register(proc.stderr, selectors.EVENT_READ, "log")
        selector.register(job_w, selectors.EVENT_WRITE, "job")
        buffers = {"reply": b"", "log": b""}
        open_pipes = 2
        started = last_sign = time.monotonic()
        activity[0] = last_sign
        overall_deadline = started + self.deadlines.overall
        stop_deadline = None  # after a stop request: the worker's time to finish its transaction
        done_deadline = None  # after its report ended or it exited: how long its pipes may stay open
        problem = None
        try:
            while open_pipes:
                now = time.monotonic()
                if stopping.requested() and stop_deadline is None:
                    stop_deadline = now + STOP_GRACE_S
                    self._signal(signal.SIGTERM)
                if done_deadline is None and (self.reader.ended or proc.poll() is not None):
                    done_deadline = now + PIPE_GRACE_S
                if problem is None and done_deadline is None:
                    late = self._late(now, last_sign, overall_deadline)
                    if late:
                        problem = late
                        self._kill()
                        done_deadline = now + PIPE_GRACE_S
                deadlines = [d for d in (stop_deadline, done_deadline) if d is not None]
                if deadlines and now >= min(deadlines):
                    if proc.poll() is None:
                        problem = problem or "did not stop within its grace time after a stop request; killed"
                        self._kill()
                    break  # whatever still holds the pipes is not ours to wait for
                timeout = min([0.5, last_sign + self.deadlines.idle - now, overall_deadline - now]
                              + [d - now for d in deadlines])
                try:
                    events = selector.select(max(0.0, timeout))
                except KeyboardInterrupt:
                    stopping.request()
                    continue
                for key, _ in events:
                    if key.data == "job":
                        job = self._write_job(selector, job_w, job)
                        continue
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if chunk:
                        last_sign = activity[0] = time.monotonic()
                    if not chunk:
                        selector.unregister(key.fileobj)
                        open_pipes -= 1
                        continue
                    if problem is not None and key.data == "reply":
                        continue
                    buffers[key.data] += chunk
                    *lines, buffers[key.data] = buffers[key.data].split(b"\n")
                    for line in lines:
                        if key.data == "log":
                            self._log(line)
                            continue
                        try:
                            self.reader.line(line)
                        except ProtocolError as exc:
                            problem = f"the worker broke the protocol ({exc}); stopped"
                            self._kill()
                            break
                    if key.data == "reply" and len(buffers["reply"]) > MAX_LINE and problem is None:
                        problem = f"the worker sent a message over {MAX_LINE} bytes; stopped"
                        self._kill()
                    if key.data == "log" and len(buffers["log"]) > 4096:
                        self._log(buffers["log"])
                        buffers["log"] = b""
        finally:
            selector.close()
            for stream in (proc.stdout, proc.stderr):
                stream.close()
            if self.job_open:
                os.close(job_w)
                self.job_open = False
        if buffers["log"]:
            self._log(buffers["log"])
        return problem

    def _write_job(self, selector, job_w: int, job: bytes) -> bytes:
        """As much of the job as the pipe takes now; what is left. Written whole, or refused by a
        worker gone already (what it said, or did not, tells why), the pipe is closed."""
        try:
            job = job[os.write(job_w, job):]
        except BlockingIOError:
            return job
        except OSError:
            job = b""
        if not job:
            selector.unregister(job_w)
            os.close(job_w)
            self.job_open = False
        return job

    def _late(self, now: float, last_sign: float, overall_deadline: float) -> str | None:
        """Why the worker is killed now, if it is: silent past its idle deadline, or past its overall one."""
        if now >= last_sign + self.deadlines.idle:
            return (f"the worker for {self.job.owner.user} gave no sign of life for {self.deadlines.idle:g} s "
                    "(stopped or traced?); killed (worker_idle_timeout)")
        if now >= overall_deadline:
            return (f"the worker for {self.job.owner.user} was still at work after {self.deadlines.overall:g} s; "
                    "killed (worker_timeout)")
        return None

    def _log(self, line: bytes) -> None:
        """A line the worker wrote on its stderr: relayed escaped and bounded, never raw."""
        text = clean(line.decode("utf-8", "replace"), limit=1000)
        if not text:
            return
        self.last_log = text
        if self.log_bytes > LOG_BYTES:
            return
        self.log_bytes += len(line)
        if self.log_bytes > LOG_BYTES:
            text = f"(more output of this worker dropped after {LOG_BYTES} bytes)"
        print(f"hermes-admin: {self.job.owner.user}: {text}", file=sys.stderr)

    def _signal(self, signum: int) -> None:
        try:
            os.kill(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and whatever stayed in its session
        except (ProcessLookupError, PermissionError):
            self._signal(signal.SIGKILL)


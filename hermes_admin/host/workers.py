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
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time

from hermes_admin import child, stopping
from hermes_admin.protocol import MAX_LINE, Job, Owner, ProtocolError, Reader
from hermes_admin.shown import clean
from hermes_admin.results import RepairRun, Run

LOG_BYTES = 256 << 10  # a worker's log relayed at most; past it, one line says how much was dropped
STOP_GRACE_S = 12.0  # after a stop request, how long a worker may take to finish its transaction
PIPE_GRACE_S = 2.0  # after its report (or its exit), how long a worker's pipes may stay open
# What every failure to start a worker as its owner says to do.
FIX = ("install hermes-admin where every user can run it (a venv under /opt, the system "
       "site-packages, or pipx)")


def in_process(owner: Owner) -> bool:
    """The homes of the account we run as need no switch (HERMES_ADMIN_WORKER=process forces one)."""
    return owner.uid == os.geteuid() and os.environ.get("HERMES_ADMIN_WORKER") != "process"


def run_job(job: Job, verbose: int = 0) -> Run:
    """Do `job` as its owner and return its report; never raises for the worker's faults."""
    if in_process(job.owner):
        from hermes_admin.profile.jobs import serve

        return serve(job)
    if os.geteuid() != 0 and job.owner.uid != os.geteuid():
        return _failed(job, f"belongs to {job.owner.user}: only {job.owner.user} or root can maintain it")
    return Spawned(job, verbose).run()


def _failed(job: Job, why: str) -> Run:
    run = RepairRun(dry_run=True) if job.kind == "repair" else Run(dry_run=True)
    run.errors += [f"profile '{p.shown}': {p.home}: {why}" for p in job.profiles]
    return run


class Spawned:
    """A worker process for one job, and the conversation with it."""

    def __init__(self, job: Job, verbose: int = 0):
        self.job = job
        self.verbose = verbose
        self.reader = Reader({str(p.home) for p in job.profiles}, repair=job.kind == "repair")
        self.log_bytes = 0
        self.last_log = ""
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
        try:
            with os.fdopen(job_w, "wb") as sink:
                sink.write(self.job.encode())
        except OSError:
            pass  # the worker is gone already: what it said, or did not, tells why
        problem = self._converse()
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
            run.errors += [f"profile '{p.shown}': {p.home}: {problem}" for p in self.job.profiles
                           if not any(r.home == str(p.home) for r in run.results)] or [f"worker for {owner.user}: {problem}"]
        return run

    def _converse(self) -> str | None:
        """Read replies and logs until both pipes close, or until the worker is done with them:
        its report ended, or it exited, and a short grace passed (a process of the owner's may hold
        a copy of a pipe forever: never waited for). A stop request is passed on; past its grace
        time the worker is killed. Returns what went wrong, if anything."""
        proc = self.proc
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ, "reply")
        selector.register(proc.stderr, selectors.EVENT_READ, "log")
        buffers = {"reply": b"", "log": b""}
        open_pipes = 2
        stop_deadline = None  # after a stop request: the worker's time to finish its transaction
        done_deadline = None  # after its report ended or it exited: how long its pipes may stay open
        problem = None
        while open_pipes:
            now = time.monotonic()
            if stopping.requested() and stop_deadline is None:
                stop_deadline = now + STOP_GRACE_S
                self._signal(signal.SIGTERM)
            if done_deadline is None and (self.reader.ended or proc.poll() is not None):
                done_deadline = now + PIPE_GRACE_S
            deadlines = [d for d in (stop_deadline, done_deadline) if d is not None]
            if deadlines and now >= min(deadlines):
                if proc.poll() is None:
                    problem = problem or "did not stop within its grace time after a stop request; killed"
                    self._kill()
                break  # whatever still holds the pipes is not ours to wait for
            timeout = min([0.5] + [d - now for d in deadlines])
            try:
                events = selector.select(max(0.0, timeout))
            except KeyboardInterrupt:
                stopping.request()
                continue
            for key, _ in events:
                chunk = os.read(key.fileobj.fileno(), 65536)
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
        selector.close()
        for stream in (proc.stdout, proc.stderr):
            stream.close()
        if buffers["log"]:
            self._log(buffers["log"])
        return problem

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


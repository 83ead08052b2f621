"""One worker per owner: start it as that owner, hand it its job, gather its report.

The host never works on a home itself. For the homes of the account it runs as
(a user over her own homes, root over root's) there is no boundary to cross, and
the job runs here, through the same job functions. For anyone else's, root
execs a worker as root, in its own isolated interpreter (`-I`: no PYTHON*
variables, no user site, no current folder on sys.path; / as its current
folder), whose first lines switch it to the owner (supplementary groups, gid,
uid) before it imports or reads anything of ours, never dumpable by her at any
instant (child.becoming: she can neither trace it nor take its pipes), with a
clean environment, stdin from /dev/null, a session of its own (no controlling
terminal) and no descriptor of root's but its three pipes. What it answers is
read as untrusted (protocol.Reader: every line, every row's fields; an "internal
error" it reports is its profiles' error, never the host's); its log lines are
relayed escaped and bounded.

Nothing its owner does to it holds the host up past a bound, or holds up another owner
(docs/design.md §10): the job is written without blocking; a worker that gives no sign of life
its progress backs (it beats every few seconds, and the kernel must say its main thread ran since:
liveness.py) for `worker_idle_timeout` seconds, as a stopped, traced or blocked one does, or that
is still at work after `worker_timeout` seconds, is killed with its whole process group (SIGKILL
ends a stopped process too) and each of its profiles it did not report on gets one line. Owners'
workers go on side by side (`side_by_side`), so the others' go on meanwhile.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from hermes_admin import child, liveness, stopping
from hermes_admin.liveness import Watch
from hermes_admin.model import Owner
from hermes_admin.problems import ERROR, WARNING, Problem, about
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


# What every failure to start a worker as its owner says to do.
FIX = ("install hermes-admin where every user can run it (a venv under /opt, the system "
       "site-packages, or pipx)")
POOL_MAX = 4  # owners' workers at once, at most


def pool_size() -> int:
    """How many owners' workers go on side by side: one a processor, 2 to POOL_MAX (a worker mostly
    waits, on stores, locks and plugins; one that stalls must not hold up the next owner's)."""
    return max(2, min(POOL_MAX, os.cpu_count() or 1))


# When each conversation going on last saw its worker give a sign of life that counted (monotonic):
# the daemon's watchdog looks at the oldest (host/daemon.py).
_signs: dict[int, float] = {}
_signs_lock = threading.Lock()


def oldest_sign() -> float | None:
    """The oldest last sign of life among the workers being waited for; None when none is."""
    with _signs_lock:
        return min(_signs.values(), default=None)


def in_process(owner: Owner) -> bool:
    """The homes of the account we run as need no switch (HERMES_ADMIN_WORKER=process forces one)."""
    return owner.uid == os.geteuid() and os.environ.get("HERMES_ADMIN_WORKER") != "process"


def spawns(owner: Owner) -> bool:
    """A worker of its own for this owner's job: root's run over another account's homes (or one forced)."""
    return not in_process(owner) and (os.geteuid() == 0 or owner.uid == os.geteuid())


def run_job(job: Job, verbose: int = 0, deadlines: Deadlines | None = None) -> Run:
    """Do `job` as its owner and return its report; never raises for the worker's faults, and never
    waits for another account's worker past `deadlines`."""
    [report] = side_by_side([(job, deadlines or Deadlines())], verbose)
    return report


def side_by_side(jobs: list[tuple[Job, Deadlines]], verbose: int = 0) -> Iterator[Run]:
    """Each job's report, in the jobs' order. The other accounts' workers go on side by side, at
    most pool_size() at once, each conversation in a thread of its own, so one owner's stalled
    worker costs the others nothing; meanwhile the invoking account's own jobs run here, in this
    thread (signals, forks), first, so no worker delays them either. A worker's log lines are
    relayed in the jobs' order: those of the job whose report comes next as they come, the others'
    when their turn comes (held, at most LOG_BYTES each). A job not yet begun when a stop is asked
    for is not begun; an abort here stops the others."""
    talks = [Spawned(job, verbose, deadlines) if spawns(job.owner) else None for job, deadlines in jobs]
    with ThreadPoolExecutor(max_workers=pool_size(), thread_name_prefix="hermes-admin-owner") as pool:
        futures = [pool.submit(_begun, talk.job, talk.run) if talk else None for talk in talks]
        try:
            here = {n: _begun(job, lambda job=job: _here(job))
                    for n, ((job, _), talk) in enumerate(zip(jobs, talks)) if talk is None}
            for n, (talk, future) in enumerate(zip(talks, futures)):
                if talk is None:
                    yield here.pop(n)
                    continue
                talk.relay.go_live()
                yield _waited(future)
        except GeneratorExit:
            raise
        except BaseException:  # an abort (a second Ctrl-C), or a bug of ours here
            stopping.request()  # the conversations going on end their workers within their grace
            raise
        finally:
            for future in futures:
                if future is not None:
                    future.cancel()  # what has not begun never will; what has ends within its deadlines


def _here(job: Job) -> Run:
    """The invoking account's own job, in this process (another account's, without root: refused)."""
    if job.owner.uid != os.geteuid():
        return _failed(job, f"belongs to {job.owner.user}: only {job.owner.user} or root can maintain it")
    from hermes_admin.profile.jobs import serve

    return serve(job)


def _begun(job: Job, work) -> Run:
    """`work()`'s report, unless a stop was asked for before it began."""
    if stopping.requested():
        run = RepairRun(dry_run=True) if job.kind == "repair" else Run(dry_run=True)
        run.add(Problem(WARNING, "stopped on request: " + ", ".join(p.name for p in job.profiles)
                        + " not worked on", kind="stopped"))
        return run
    return work()


def _waited(future) -> Run:
    """A conversation's report; a Ctrl-C meanwhile is a stop request (the conversations pass it on
    and end within their grace time), as it is while this thread talks to a worker itself."""
    while True:
        try:
            return future.result(timeout=0.5)
        except FutureTimeout:
            continue
        except KeyboardInterrupt:
            stopping.request()


class _Relay:
    """A worker's log lines to stderr, escaped, in their job's turn (side_by_side)."""

    def __init__(self, user: str):
        self.user = user
        self.lock = threading.Lock()
        self.held: list[str] = []
        self.live = False

    def say(self, text: str) -> None:
        with self.lock:
            if self.live:
                print(f"hermes-admin: {self.user}: {text}", file=sys.stderr)
            else:
                self.held.append(text)

    def go_live(self) -> None:
        with self.lock:
            for text in self.held:
                print(f"hermes-admin: {self.user}: {text}", file=sys.stderr)
            self.held.clear()
            self.live = True


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
        self.relay = _Relay(job.owner.user)

    def run(self) -> Run:
        owner = self.job.owner
        job_r, job_w = os.pipe()
        if os.geteuid() == 0:  # exec'd as root, it becomes her itself: never dumpable by her (child.becoming)
            argv = child.argv("hermes_admin.profile.worker", str(job_r),
                              become=(owner.uid, owner.gid, list(owner.groups)))
        else:  # her own run, forced into a process: no boundary between her and it
            argv = child.argv("hermes_admin.profile.worker", str(job_r), private=True)
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(job_r,),
                close_fds=True, env=child.environment(owner.home, owner.user), cwd="/", start_new_session=True,
                umask=0o077)
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
            with _signs_lock:
                _signs.pop(id(self), None)
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
        if run.internal:  # the worker's word: its owner's profiles failed (2), never the host's bug (70)
            run.internal = False
            if not run.errors:  # it named no profile: each of them, then
                run.add(*(about(p, ERROR, "worker", f"the worker for {owner.user} reported an internal error",
                                path=p.home) for p in self.job.profiles))
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
        watch = Watch(self.deadlines.idle, self.deadlines.overall, time.monotonic(), liveness.mark(proc.pid))
        self._seen(watch.last_sign)
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
                    late = self._late(watch.late(now))
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
                timeout = min([0.5, watch.left(now)] + [d - now for d in deadlines])
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
                    if chunk and watch.sign(time.monotonic(), liveness.mark(proc.pid)):
                        self._seen(watch.last_sign)
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

    def _late(self, which: str | None) -> str | None:
        """Why the worker is killed now, if it is: no sign of life its progress backs past its idle
        deadline, or past its overall one (liveness.Watch)."""
        if which == "idle":
            return (f"the worker for {self.job.owner.user} gave no sign of life for {self.deadlines.idle:g} s "
                    "(stopped, traced or blocked?); killed (worker_idle_timeout)")
        if which == "overall":
            return (f"the worker for {self.job.owner.user} was still at work after {self.deadlines.overall:g} s; "
                    "killed (worker_timeout)")
        return None

    def _seen(self, when: float) -> None:
        with _signs_lock:
            _signs[id(self)] = when

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
        self.relay.say(text)

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


"""Both cores for a long `run`: half of a job's profiles in a forked copy of this process.

An idle profile costs a few milliseconds (SQLite reading its schema, a score of
statements, the Python around them) and a root often has dozens, one after the
other on one core. The copy is made after every import, so it starts at once;
it does to its profiles exactly what this process does to the others, then sends
its report through a pipe in the workers' protocol (protocol.py), read here as
any worker's is: line by line, checked, a result only for a profile it was given
(but no cap on the report's size: the copy is this very process).

Stops: one that reaches this process while the copy lives is passed on to it; the
copy stops when this process dies; a failure or an abort here stops or kills the
copy, and it is always reaped. A copy that dies or reports something broken leaves
an error line for each of its profiles it did not report on (exit 70 when the bug
is ours, 2 when the kernel killed it).

A copy is made only where nothing can come of it but speed:
- a maintenance job of at least MIN_PROFILES profiles, with two processors free;
- no thread but this one (a fork copies the calling thread only: the daemon never forks);
- no progress bar (the terminal belongs to one process);
- no policy that applies repairs: a row moved into a sibling store takes that
  sibling's lock, which the other process may hold just then.

The halves are contiguous, so the merged report lists the profiles in their order.
`HERMES_ADMIN_PROCESSES=1` keeps every profile in one process.
"""

from __future__ import annotations

import math
import os
import select
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Callable

from hermes_admin import child, exitcodes, liveness, stopping
from hermes_admin.liveness import Watch
from hermes_admin.profile.policy import applies_repairs
from hermes_admin.protocol import BEAT_THREAD, MAX_LINE, Job, ProtocolError, Reader, Writer, beat_every
from hermes_admin.problems import ERROR, Problem, about
from hermes_admin.results import Run

MIN_PROFILES = 8  # below this, a fork and a report cost about what a second core saves
STOP_GRACE_S = 12.0  # after a stop or a failure here, how long the copy may take to end its transaction
STOPS = {signal.SIGINT, signal.SIGTERM}  # the signals that ask for a stop after the current transaction
PR_SET_PDEATHSIG = 1  # prctl's number for it (linux/prctl.h): the copy dies with its parent


def worth_it(job: Job) -> bool:
    if job.context.processes == 1 or len(job.profiles) < MIN_PROFILES:
        return False
    if len(os.sched_getaffinity(0)) < 2 or _other_threads() or sys.stderr.isatty():
        return False
    return job.params.dry_run or not any(
        applies_repairs(job.layers_of(p)) for p in job.profiles)


def _other_threads() -> bool:
    """A thread besides this one and the beat to the host (protocol.Writer.beating), which holds
    nothing the copy uses."""
    return any(t is not threading.current_thread() and t.name != BEAT_THREAD for t in threading.enumerate())


def in_two(job: Job, serve: Callable[[Job], Run]) -> Run:
    """`serve` on each half of the job's profiles, the second half in a forked copy; one Run."""
    middle = (len(job.profiles) + 1) // 2
    mine, theirs = replace(job, profiles=job.profiles[:middle]), replace(job, profiles=job.profiles[middle:])
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)  # a stop that comes now waits for the handlers below
    try:
        pid = os.fork()
    except OSError:  # no second process to be had (a process limit, memory): one does it all
        pid = None
    if pid == 0:
        os.close(read_end)
        _second(theirs, serve, write_end, parent)  # never returns
    os.close(write_end)
    if pid is None:
        os.close(read_end)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        return serve(job)
    child.ours(pid)  # never taken for a plugin's leftover and killed (child.reap_orphans)
    copy = _Copy(pid)
    source = os.fdopen(read_end, "rb")  # the one owner of the read end
    previous = {signum: signal.getsignal(signum) for signum in STOPS}

    def passed_on(signum, frame):  # a stop asked of this process (`kill PID`, the host) is the copy's too
        copy.signal(signal.SIGTERM)
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)  # the CLI's and the worker's: a stop request (a second Ctrl-C aborts)
        elif handler == signal.SIG_DFL:  # what the signal would have done: end this process
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    try:
        for signum in STOPS:
            signal.signal(signum, passed_on)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        run = serve(mine)
        if stopping.requested():  # asked here by other means than a signal: the copy stops too
            copy.signal(signal.SIGTERM)
        run.merge(_report(theirs, source, copy))
        return run
    except BaseException as failure:  # this process failed, or an abort: the copy goes too, and is reaped
        source.close()  # a copy blocked writing its report gets EPIPE and ends
        try:
            copy.signal(signal.SIGKILL if isinstance(failure, KeyboardInterrupt) else signal.SIGTERM)
            copy.reap(STOP_GRACE_S)  # after its transaction (SQLite rolls back a killed one)
        except BaseException:  # an abort while it ends
            copy.signal(signal.SIGKILL)
            copy.reap()
        raise
    finally:
        source.close()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Copy:
    """The forked copy as the parent sees it: signalled only until it is reaped (then its pid may be anyone's)."""

    def __init__(self, pid: int):
        self.pid, self.status, self.reaped = pid, None, False

    def signal(self, signum: int) -> None:
        if not self.reaped:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def reap(self, grace: float | None = None) -> int | None:
        """Wait for it (at most `grace` seconds, then kill it); its wait status, None when the kernel
        reaped it already (SIGCHLD ignored by whoever started us)."""
        if self.reaped:
            return self.status
        deadline = None if grace is None else time.monotonic() + grace
        try:
            while True:
                done, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
                if done:
                    break
                if time.monotonic() >= deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    status = os.waitpid(self.pid, 0)[1]
                    break
                time.sleep(0.05)
        except ChildProcessError:
            status = None
        self.reaped, self.status = True, status
        return status


def _second(job: Job, serve: Callable[[Job], Run], write_end: int, parent: int) -> None:
    """The copy: its profiles, its report on the pipe, then out, whatever happens (nothing of the
    parent's runs here: no cleanup, no caller's code)."""
    code = exitcodes.INTERNAL
    try:
        def stop(signum, frame):  # a stop request, never an abort: the parent decides that
            stopping.request()

        for signum in STOPS:
            signal.signal(signum, stop)
        _stop_with(parent)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        with os.fdopen(write_end, "w", encoding="utf-8", buffering=1) as out:
            writer = Writer(out.write)
            with writer.beating(beat_every(job.context.idle_timeout)):  # the parent's sign of life
                run = serve(job)
            writer.hello(os.getuid(), os.getgid(), sorted(os.getgroups()))
            writer.run(run)
        code = exitcodes.OK
    except BaseException as exc:
        try:
            print(f"hermes-admin: the second process: {type(exc).__name__}: {exc}", file=sys.stderr)
        except BaseException:
            pass
    finally:
        try:
            sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)


def _stop_with(parent: int) -> None:
    """Linux: a stop request when the parent dies (killed, out of memory), so the copy never works on
    alone; a parent gone already is one too."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:  # no ctypes, no prctl: the parent's own stop and its end of the pipe still reach it
        pass
    if os.getppid() != parent:
        stopping.request()


def _report(job: Job, source, copy: _Copy) -> Run:
    reader = Reader({str(p.home) for p in job.profiles}, max_report=None)  # our own process: no size cap
    problem, broken = None, False
    try:
        problem = _read_report(reader, source, job.context.idle_timeout, copy.pid)
    except ProtocolError as exc:
        problem, broken = f"sent a broken report ({exc})", True
    source.close()
    if problem and not broken:
        copy.signal(signal.SIGKILL)  # stopped or traced: a signal to end it would never be handled
    status = copy.reap(1.0 if problem else None)  # its work is done when it reports: a broken one is killed
    if problem is None and not reader.ended:
        problem = f"stopped before its report ({_status(status)})"
    if problem:
        run = reader.run
        # our own code failed (a crash, a report it could not write): 70, unless the kernel killed it
        run.internal = run.internal or broken or (
            status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == exitcodes.INTERNAL)
        reported = {r.home for r in run.results}
        run.add(*([about(p, ERROR, "worker", f"the second process {problem}", path=p.home)
                   for p in job.profiles if str(p.home) not in reported]
                  or [Problem(ERROR, f"the second process {problem}", kind="worker")]))
    return reader.run


def _read_report(reader: Reader, source, idle_timeout: float, pid: int) -> str | None:
    """The copy's lines into `reader` until its end of the pipe closes; what went wrong when it said
    nothing its progress backs for `idle_timeout` seconds (it beats while it works; a stopped or
    traced copy, or one blocked inside the kernel, makes no progress: liveness.py)."""
    fd, buffer = source.fileno(), b""
    watch = Watch(idle_timeout, math.inf, time.monotonic(), liveness.mark(pid))
    while True:
        left = watch.left(time.monotonic())
        if left <= 0:
            return f"gave no sign of life for {idle_timeout:g} s (stopped, traced or blocked?); killed"
        try:
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        except InterruptedError:
            continue
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if buffer:
                reader.line(buffer)
            return None
        watch.sign(time.monotonic(), liveness.mark(pid))
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            reader.line(line)
        if len(buffer) > MAX_LINE:
            raise ProtocolError(f"a message over {MAX_LINE} bytes")


def _status(status: int | None) -> str:
    if status is not None and os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}" if status is not None else "no status"

"""Both cores for a long `run`: half of a job's profiles in a forked copy of this process.

An idle profile costs a few milliseconds (SQLite reading its schema, a score of
statements, the Python around them) and a root often has dozens, one after the
other on one core. The copy is made after every import, so it starts at once;
it does to its profiles exactly what this process does to the others, then sends
its report through a pipe in the workers' protocol (protocol.py), read here as
any worker's is: line by line, checked, a result only for a profile it was given.

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

import os
import signal
import sys
import threading
from dataclasses import replace
from typing import Callable

from hermes_admin import child, exitcodes, stopping
from hermes_admin.protocol import MAX_LINE, Job, ProtocolError, Reader, Writer
from hermes_admin.results import Run

MIN_PROFILES = 8  # below this, a fork and a report cost about what a second core saves


def applies_repairs(layers: dict) -> bool:
    """Would this profile's policy apply repairs? The admin config's layers decide (Hermes' own
    config has no such key); one that cannot be read may."""
    for name in ("entry", "preset", "defaults"):
        layer = layers.get(name)
        if layer is None:
            continue
        if not isinstance(layer, dict):
            return True
        if "repair" in layer:
            return layer["repair"] != "report"
    return False


def worth_it(job: Job) -> bool:
    if job.params.get("processes") == 1 or len(job.profiles) < MIN_PROFILES:
        return False
    if len(os.sched_getaffinity(0)) < 2 or threading.active_count() > 1 or sys.stderr.isatty():
        return False
    return bool(job.params.get("dry_run")) or not any(
        applies_repairs(job.layers.get(str(p.home), {})) for p in job.profiles)


def in_two(job: Job, serve: Callable[[Job], Run]) -> Run:
    """`serve` on each half of the job's profiles, the second half in a forked copy; one Run."""
    middle = (len(job.profiles) + 1) // 2
    mine, theirs = replace(job, profiles=job.profiles[:middle]), replace(job, profiles=job.profiles[middle:])
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    stops = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # a stop that comes now waits for the copy's own handler
    try:
        pid = os.fork()
    except OSError:  # no second process to be had (a process limit, memory): one does it all
        pid = None
    if pid == 0:
        os.close(read_end)
        _second(theirs, serve, write_end, stops)  # never returns
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    if pid is None:
        os.close(read_end)
        os.close(write_end)
        return serve(job)
    os.close(write_end)
    child.ours(pid)  # never taken for a plugin's leftover and killed (child.reap_orphans)
    try:
        run = serve(mine)
    except BaseException:
        _signal(pid, signal.SIGTERM)  # an abort here: the copy stops after its transaction
        os.close(read_end)
        raise
    if stopping.requested():  # a stop asked of this process only (kill PID): the copy stops too
        _signal(pid, signal.SIGTERM)
    run.merge(_report(theirs, read_end, pid))
    return run


def _second(job: Job, serve: Callable[[Job], Run], write_end: int, stops: set) -> None:
    """The copy: its profiles, its report on the pipe, then out (no cleanup of the parent's state)."""
    code = exitcodes.OK

    def stop(signum, frame):  # a stop request, never an abort: the parent decides that
        stopping.request()

    try:
        for signum in stops:
            signal.signal(signum, stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        run = serve(job)
        with os.fdopen(write_end, "w", encoding="utf-8") as out:
            writer = Writer(out.write)
            writer.hello(os.getuid(), os.getgid(), sorted(os.getgroups()))
            writer.run(run)
    except BaseException as exc:
        code = exitcodes.INTERNAL
        print(f"hermes-admin: the second process: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.stderr.flush()
        os._exit(code)


def _report(job: Job, read_end: int, pid: int) -> Run:
    reader = Reader({str(p.home) for p in job.profiles})
    problem = None
    with os.fdopen(read_end, "rb") as source:
        try:
            while line := source.readline(MAX_LINE + 1):
                reader.line(line.rstrip(b"\n"))
        except ProtocolError as exc:
            problem = f"a broken report ({exc})"
    _, status = os.waitpid(pid, 0)
    if problem is None and not reader.ended:
        problem = f"stopped before its report ({_status(status)})"
    if problem:
        reported = {r.home for r in reader.run.results}
        reader.run.errors += [f"profile '{p.shown}': {p.home}: the second process {problem}"
                              for p in job.profiles if str(p.home) not in reported]
    return reader.run


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)  # not reaped yet: the pid is still our child's
    except ProcessLookupError:
        pass

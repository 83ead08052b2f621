"""When a process of the owner's is late: its deadlines, and what pushes them back (the kernel's word).

A worker beats from a thread of its own every few seconds (protocol.Writer.beating). A beat
proves that thread runs; it does not prove the work does, and whoever could write into the reply
pipe could write one. So a sign of life (a beat, or any message) pushes the idle deadline back only
when the kernel says the process's main thread has run since the last sign that did: its CPU time
or its count of context switches moved (`/proc/PID/task/PID`, which root reads whatever the
process is, and its owner too: neither needs it dumpable). That is the worker's real progress, as
far as anyone outside it can know it. A stopped or traced process, one whose main thread is
blocked inside the kernel (a read from a file system its owner serves, FUSE), and a beat someone
else wrote all leave it where it was; a worker waiting within one of its own bounds (a lock, a
plugin, its copy) polls, and counts. The overall deadline is hard: nothing pushes it back.

`Watch` is the rule alone, on a clock the caller passes (tests drive it by hand); `mark` reads
the kernel's counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def mark(pid: int) -> tuple[int, ...] | None:
    """The kernel's counters of `pid`'s main thread that move whenever it runs: CPU time (user,
    system, in clock ticks) and context switches (voluntary, involuntary); None when they cannot be
    read (the process is gone, or this is no Linux)."""
    task = f"/proc/{pid}/task/{pid}"
    try:
        with open(f"{task}/stat", "rb") as source:
            fields = source.read().rsplit(b")", 1)[1].split()
        counters = [int(fields[11]), int(fields[12])]  # utime, stime (fields 14, 15 of proc(5))
        with open(f"{task}/status", "rb") as source:
            for line in source:
                if line.startswith((b"voluntary_ctxt_switches:", b"nonvoluntary_ctxt_switches:")):
                    counters.append(int(line.split()[1]))
    except (OSError, IndexError, ValueError):
        return None
    return tuple(counters)


@dataclass
class Watch:
    """One process's deadlines: `idle` seconds without a sign of life that its progress backs,
    `overall` seconds in all, from `started` (monotonic seconds, the caller's clock)."""

    idle: float
    overall: float
    started: float
    last_mark: tuple[int, ...] | None = None  # the counters when a sign last counted (or at the start)
    last_sign: float = field(init=False)  # when a sign last counted

    def __post_init__(self):
        self.last_sign = self.started

    def sign(self, now: float, mark: tuple[int, ...] | None) -> bool:
        """A sign of life at `now`, the main thread's counters read then: it counts (pushes the idle
        deadline back) when they moved since the last sign that counted, or cannot be read (a
        process that ended: its last words are read as they come). Whether it counted."""
        if mark is not None and mark == self.last_mark:
            return False
        self.last_mark = mark
        self.last_sign = now
        return True

    @property
    def idle_deadline(self) -> float:
        return self.last_sign + self.idle

    @property
    def overall_deadline(self) -> float:
        return self.started + self.overall

    def late(self, now: float) -> str | None:
        """Which deadline passed at `now` ("idle" or "overall"), if one did."""
        if now >= self.idle_deadline:
            return "idle"
        if now >= self.overall_deadline:
            return "overall"
        return None

    def left(self, now: float) -> float:
        """Seconds until the nearer deadline."""
        return min(self.idle_deadline, self.overall_deadline) - now

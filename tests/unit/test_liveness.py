"""A worker's beats push its idle deadline back only as far as its real progress (the kernel's count
of its main thread running) justifies; its overall deadline is hard (liveness.py, docs/design.md §10).
The rule runs on a clock the test holds; `mark` is read from real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hermes_admin import liveness
from hermes_admin.liveness import Watch

RAN, STILL = (5, 1, 40, 2), (5, 1, 40, 2)


def test_a_beat_without_progress_never_pushes_the_idle_deadline_back():
    watch = Watch(idle=10, overall=100, started=0, last_mark=STILL)
    for now in (2, 4, 6, 8, 9.9):  # beats every two seconds, its main thread never ran meanwhile
        assert watch.sign(now, STILL) is False
        assert watch.late(now) is None
    assert watch.late(10) == "idle"
    assert watch.left(5) == 5


def test_a_beat_with_progress_pushes_it_back_by_the_idle_time_from_that_beat():
    watch = Watch(idle=10, overall=100, started=0, last_mark=(1, 0, 1, 0))
    assert watch.sign(8, (1, 0, 2, 0)) is True  # one context switch: it ran
    assert watch.late(17.9) is None and watch.late(18) == "idle"
    assert watch.sign(12, (1, 0, 2, 0)) is False  # nothing since: the deadline stays at 18
    assert watch.idle_deadline == 18
    assert watch.sign(13, (2, 0, 2, 0)) is True  # CPU time moved
    assert watch.idle_deadline == 23


def test_the_overall_deadline_is_hard_whatever_the_progress():
    watch = Watch(idle=10, overall=30, started=100, last_mark=(0, 0, 0, 0))
    for n, now in enumerate(range(105, 131, 5), start=1):
        watch.sign(now, (n, 0, n, 0))
    assert watch.late(129.9) is None
    assert watch.late(130) == "overall"
    assert watch.left(125) == 5


def test_a_process_whose_counters_cannot_be_read_is_taken_at_its_word():
    watch = Watch(idle=10, overall=100, started=0)
    assert watch.sign(5, None) is True and watch.sign(9, None) is True
    assert watch.idle_deadline == 19


def test_the_first_sign_counts_against_the_counters_at_the_start():
    watch = Watch(idle=10, overall=100, started=0, last_mark=(0, 0, 3, 0))
    assert watch.sign(1, (0, 0, 3, 0)) is False  # a beat before its main thread ran at all
    assert watch.sign(2, (0, 0, 4, 0)) is True


def test_a_stopped_process_does_not_move_its_counters_and_a_running_one_does():
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"])
    try:
        before = liveness.mark(proc.pid)
        _until(lambda: liveness.mark(proc.pid) != before)  # it sleeps and wakes: its switches count up
        os.kill(proc.pid, signal.SIGSTOP)
        _until(lambda: _state(proc.pid) == "T")
        stopped = liveness.mark(proc.pid)
        time.sleep(0.05)
        assert stopped is not None and len(stopped) == 4
        assert liveness.mark(proc.pid) == stopped
    finally:
        proc.kill()
        proc.wait()
    assert liveness.mark(proc.pid) is None  # gone


def _until(condition, seconds: float = 60) -> None:
    """Wait for `condition` (a wait bounded only so that a broken one ends the test, never a measure)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as source:
        return source.read().rsplit(")", 1)[1].split()[0]

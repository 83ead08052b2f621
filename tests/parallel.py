"""The suite runs in parallel (pytest-xdist): which tests may share the machine, and which must
run one after another on one worker.

`python -m pytest` runs on two workers per core (`-n auto`; PYTEST_XDIST_AUTO_NUM_WORKERS or `-n N`
to choose), with `--dist loadscope`; `-n 0` (or `-p no:xdist`) runs it in one process, as before.
Two per core, because the suite mostly waits (subprocesses, fsyncs, lock waits, hook timeouts): run
in one process it keeps a third of one core busy, and on a 2-core machine four workers finish a
sample of the slow files a fifth sooner than two (BENCHMARKS.md, "The test suite").

Most tests own everything they touch (a tmp_path of their own, their own subprocesses, SQLite locks
on their own files), so any worker may take any of them. Two kinds may not be spread:

- the as-root tier (tests/root/): it makes real local users, its `--all-users` runs see every home
  on the machine, and it builds one venv in $HERMES_ADMIN_ROOT_TIER_DIR. Its tests run one after
  another (`turn`), beside the other tiers;
- a test whose fixture is built once per module (or class): the compat tier's stores written by
  each real Hermes release. Every module's tests run on one worker, so the store is built once.

The Hermes releases' venvs (tests/peer.py) and the tier's venv are built under file locks: workers
that need one at the same time wait for the one that builds it.

A test marked `alone` reaches every process on the machine (it floods /proc/locks, which every
holder scan reads; or it races the kernel and needs a core of its own): while it runs, no other
test of the run does (`turn`: it waits for the tests at work on other workers, and they wait for it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

import pytest

ROOT_TIER = Path(__file__).resolve().parent / "root"


def as_root(item: pytest.Item) -> bool:
    """Is it a test of the as-root tier (one at a time, on whichever worker: `turn`)?"""
    return ROOT_TIER in Path(str(item.path)).resolve().parents


def workers() -> int:
    """How many workers `-n auto` starts: two per core this process may run on."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return 2 * len(os.sched_getaffinity(0))


def default_to_parallel(config: pytest.Config) -> None:
    """No `-n` given: `-n auto` (`workers`), each module's tests on one worker (`--dist loadscope`:
    a store built once per module is built once). An explicit `-n N` keeps modules whole too; `-n 0`,
    `-p no:xdist`, `--pdb` and `--collect-only` run in one process.

    Not `--dist loadgroup`: it names a test's group by a suffix pytest-xdist writes into the node id,
    which pytest 9.2 no longer reads, so the groups silently vanish there."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None and not config.option.collectonly and not config.option.usepdb \
            and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.option.numprocesses = "auto"
    if config.option.numprocesses and config.option.dist in ("no", "load", "loadgroup"):
        config.option.dist = "loadscope"


@contextlib.contextmanager
def turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A test's turn at the machine: beside the other workers' tests, one as-root test at a time,
    or (marked `alone`) by itself.

    File locks shared by the run's workers (the parent folder of their basetemps): every test holds
    `tests.lock` shared while it runs, an `alone` test exclusive; `gate.lock`, taken briefly by every
    test before that and held by an `alone` one throughout, lets no new test start while it waits
    for those at work; an as-root test holds `as-root.lock` throughout."""
    if getattr(request.config, "workerinput", None) is None:
        yield  # one process: nothing runs beside it
        return
    folder = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker("alone") is not None
    with open(folder / "gate.lock", "a") as gate, open(folder / "tests.lock", "a") as tests, \
            open(folder / "as-root.lock", "a") as tier:
        if as_root(request.node):
            fcntl.flock(tier, fcntl.LOCK_EX)
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield

"""The suite runs in parallel (pytest-xdist): which tests may share the machine, and which must
run one after another on one worker.

`python -m pytest` runs on two workers per core (`-n auto`; PYTEST_XDIST_AUTO_NUM_WORKERS or `-n N`
to choose), with `--dist loadgroup`; `-n 0` (or `-p no:xdist`) runs it in one process, as before.
Two per core, because the suite mostly waits (subprocesses, fsyncs, lock waits, hook timeouts): run
in one process it keeps a third of one core busy, and on a 2-core machine four workers finish a
sample of the slow files a fifth sooner than two (BENCHMARKS.md, "The test suite").

Most tests own everything they touch (a tmp_path of their own, their own subprocesses, SQLite locks
on their own files), so any worker may take any of them. Two kinds may not be spread:

- the as-root tier (tests/root/): it makes real local users, its `--all-users` runs see every home
  on the machine, and it builds one venv in $HERMES_ADMIN_ROOT_TIER_DIR. Its tests run on one worker,
  one after another ("as-root"), beside the other tiers;
- a test whose fixture is built once per module (or class): the compat tier's stores written by
  each real Hermes release. Its module's tests run on one worker, so the store is built once.

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
AS_ROOT = "as-root"
_SHARED_SCOPES = ("module", "class", "package")


def group_of(item: pytest.Item) -> str | None:
    """The xdist group a test must run in (None: any worker, beside any other test)."""
    path = Path(str(item.fspath)).resolve()
    if ROOT_TIER in path.parents:
        return AS_ROOT
    for defs in item._fixtureinfo.name2fixturedefs.values():
        if defs and defs[-1].scope in _SHARED_SCOPES:
            return item.nodeid.partition("::")[0]  # its module
    return None


def mark_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test that may not be spread with its group (read by `--dist loadgroup`)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def workers() -> int:
    """How many workers `-n auto` starts: two per core this process may run on."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return 2 * len(os.sched_getaffinity(0))


GROUPED = "hermes_admin_loadgroup"  # what a worker is told: name its tests' groups


def default_to_parallel(config: pytest.Config) -> None:
    """No `-n` given: `-n auto` (`workers`), with the groups above kept together. An explicit
    `-n N` keeps them too; `-n 0`, `-p no:xdist`, `--pdb` and `--collect-only` run in one process.

    A worker parses the command line as given, without what is chosen here: it names its tests'
    groups (which --dist loadgroup reads in their node ids) because the controller tells it to
    (`tell_worker`)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    if hasattr(config, "workerinput"):
        if config.workerinput.get(GROUPED):
            config.option.loadgroup = True
        return
    if config.option.numprocesses is None and not config.option.collectonly and not config.option.usepdb \
            and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.option.numprocesses = "auto"
    if config.option.numprocesses and config.option.dist in ("no", "load"):
        config.option.dist = "loadgroup"  # never the as-root tier spread over workers


@contextlib.contextmanager
def turn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A test's turn at the machine: beside the other workers' tests, or (marked `alone`) by itself.

    Two file locks, shared by the run's workers (the parent folder of their basetemps): every test
    holds `tests.lock` shared while it runs, an `alone` test exclusive; `gate.lock`, taken briefly
    by every test before that and held by an `alone` one throughout, lets no new test start while
    it waits for those at work."""
    if getattr(request.config, "workerinput", None) is None:
        yield  # one process: nothing runs beside it
        return
    folder = tmp_path_factory.getbasetemp().parent
    alone = request.node.get_closest_marker("alone") is not None
    with open(folder / "gate.lock", "a") as gate, open(folder / "tests.lock", "a") as tests:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield


def tell_worker(node) -> None:
    """The controller starts a worker (pytest-xdist's pytest_configure_node)."""
    node.workerinput[GROUPED] = node.config.option.dist == "loadgroup"

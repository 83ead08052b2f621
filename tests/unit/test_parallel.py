"""The parallel suite (tests/parallel.py): what may not be spread over workers waits its turn."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import parallel, skips


def test_each_module_runs_on_one_worker():
    """`python -m pytest -n N` schedules by module (a store built once per module is built once), on
    the pytest the install brings. `--setup-plan` runs no test."""
    files = ["tests/root/test_bounds.py", "tests/compat/test_compat_coordination.py", "tests/unit/test_metrics_file.py"]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-v", "--setup-plan", "-p", "no:cacheprovider",
                           *files], cwd=skips.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "scheduling tests via LoadScopeScheduling" in done.stdout, done.stdout + done.stderr


def _request(path, tmp_path, marker=None):
    node = SimpleNamespace(path=path, get_closest_marker=lambda name: marker if name == "alone" else None)
    return SimpleNamespace(config=SimpleNamespace(workerinput={}), node=node)


@pytest.mark.parametrize("where, held", [("root/test_bounds.py", True), ("unit/test_store.py", False)])
def test_an_as_root_test_holds_the_tiers_lock_while_it_runs(tmp_path, where, held):
    """Whatever worker runs it, an as-root test runs while no other as-root test does."""
    factory = SimpleNamespace(getbasetemp=lambda: tmp_path / "popen-gw0")
    request = _request(parallel.ROOT_TIER.parent / where, tmp_path)
    with parallel.turn(request, factory):
        with open(tmp_path / "as-root.lock", "a") as other:  # another worker's test of the tier
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
            except BlockingIOError:
                taken = False
    assert taken is not held

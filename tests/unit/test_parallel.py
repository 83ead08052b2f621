"""The parallel suite (tests/parallel.py): what may not be spread over workers is kept on one."""

from __future__ import annotations

import os
import subprocess
import sys

from tests import skips


def test_the_as_root_tier_and_a_module_with_a_store_of_its_own_are_each_kept_on_one_worker():
    """As pytest-xdist's workers name them (a `@group` after the node id, which --dist loadgroup
    schedules as one): every as-root test in one group, the compat module whose store is built
    once per module in another, the unit tests in none. `--setup-plan` runs no test."""
    files = ["tests/root/test_bounds.py", "tests/compat/test_compat_coordination.py", "tests/unit/test_metrics_file.py"]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-v", "--setup-plan", "-p", "no:cacheprovider",
                           *files], cwd=skips.REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "scheduling tests via LoadGroupScheduling" in done.stdout, done.stdout + done.stderr
    ids = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("tests/")]
    by_file = {path: [i for i in ids if i.startswith(path)] for path in files}
    assert all(by_file.values()), done.stdout
    assert all(i.endswith("@as-root") for i in by_file[files[0]]), by_file[files[0]]
    assert all(i.endswith(f"@{files[1]}") for i in by_file[files[1]]), by_file[files[1]]
    assert not any("@" in i for i in by_file[files[2]]), by_file[files[2]]

"""The skip guard (tests/skips.py): which runs it holds to the list, what it makes of each test's
end, and that the list names tests that exist and the reasons they skip with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import skips

REPO = skips.REPO


@pytest.mark.parametrize("args,markexpr,env,expected", [
    (["tests"], "", {}, False),  # the README's run on a workstation: skips named at the end only
    (["tests"], "", {"CI": "true"}, True),
    (["tests"], "", {"CI": "1"}, True),
    (["tests"], "", {"CI": "false"}, False),
    (["tests/compat"], "", {}, True),
    (["tests/unit/test_cli.py", "tests/root/test_privsep.py::test_x"], "", {}, True),
    ([str(REPO / "tests" / "compat" / "test_compat_run.py")], "", {}, True),
    (["tests/unit"], "", {}, False),
    (["tests"], "compat", {}, True),
    (["tests"], "not compat", {}, False),
])
def test_a_run_is_guarded_in_ci_and_when_the_compat_or_root_tier_is_asked_for(args, markexpr, env, expected):
    assert skips.strict(args, REPO, markexpr, env) is expected


def test_a_skip_is_fine_only_when_listed_with_its_reason():
    listed, design = next(iter(skips.BY_DESIGN.items()))
    assert skips.verdict(listed, design.reason) is None
    assert skips.verdict(listed, None) and "take it off the list" in skips.verdict(listed, None)
    assert "not a skip by design" in skips.verdict(listed, "Hermes 0.19.0's venv is missing")
    assert "not a skip by design" in skips.verdict("tests/unit/test_manpage.py::test_x", "groff not installed")
    sometimes = next(nodeid for nodeid, design in skips.BY_DESIGN.items() if not design.always)
    assert skips.verdict(sometimes, None) is None  # a host where it can run: it runs
    assert skips.verdict("tests/unit/test_manpage.py::test_x", None) is None


def test_every_skip_by_design_names_a_test_that_exists_and_says_why():
    """Each node id is one pytest collects (parameters included). That each skips with its reason,
    and that only these skip, every guarded run checks."""
    files = sorted({nodeid.partition("::")[0] for nodeid in skips.BY_DESIGN})
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    collected = set(done.stdout.split())
    for nodeid, design in skips.BY_DESIGN.items():
        assert nodeid in collected, nodeid
        assert design.reason and design.why, nodeid


@pytest.mark.parametrize("workers", [["-n", "2"], ["-n", "0"], ["-p", "no:xdist"]])
def test_a_skip_for_a_missing_tool_fails_a_ci_run_and_is_named_in_any_other(tmp_path, workers):
    """The whole way round, in a pytest of its own: groff is nowhere on its PATH. In parallel (the
    skip seen by a worker, the report made by the controller) as in one process."""
    (tmp_path / "bin").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    argv = [sys.executable, "-m", "pytest", "tests/unit/test_manpage.py", "-q", "-k", "groff", "-p", "no:cacheprovider",
            *workers]
    env["PATH"] = str(tmp_path / "bin")
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout
    assert "groff not installed: tests/unit/test_manpage.py::test_groff_reads_it_without_warnings" in done.stdout
    done = subprocess.run(argv, cwd=REPO, env=dict(env, CI="true"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "not a skip by design" in done.stdout, done.stdout


def test_a_worker_holds_its_skips_as_the_run_that_asked_for_the_tier_does(tmp_path):
    """Asked for by path (no CI), the compat tier is guarded on every pytest-xdist worker too: its
    tests skipped for want of Hermes fail (in their setup), each on the worker that ran it."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["HERMES_ADMIN_SKIP_COMPAT"] = "1"  # the tier's own skip: no skip by design
    argv = [sys.executable, "-m", "pytest", "tests/compat/test_schema_parity.py", "-q", "-p", "no:cacheprovider",
            "-n", "2"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "2 errors" in done.stdout and "not a skip by design" in done.stdout, done.stdout


def test_a_grouped_tests_node_id_is_the_one_the_list_names():
    """Under `--dist loadgroup` (given by hand) pytest-xdist appends `@group` to a grouped test's node id."""
    listed = next(iter(skips.BY_DESIGN))
    assert skips.plain(f"{listed}@tests/compat/test_compat_releases.py") == listed
    assert skips.verdict(f"{listed}@tests/compat/test_compat_releases.py", skips.BY_DESIGN[listed].reason) is None
    assert skips.plain("tests/unit/test_x.py::test_y[a@b]") == "tests/unit/test_x.py::test_y[a@b]"
    assert skips.plain("tests/root/test_x.py::test_y@as-root") == "tests/root/test_x.py::test_y"

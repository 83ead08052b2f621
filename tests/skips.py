"""The skips that are by design, in one place, and the guard that holds every other skip to account.

A test that skips because this machine lacks something (a Hermes release, a tool, root, a pid
namespace of the host's) says nothing about hermes-admin: a green run with such a skip in it has
not checked what that test checks. So in CI (`CI` set, as `.ci/run` does) and whenever the compat
or the as-root tier is asked for by name (`python -m pytest tests/compat`, `-m compat`), a skip
that is not listed here, with the reason it is listed with, fails its test; so does a test listed
as skipping everywhere that ran (the list is kept true). In any other run such skips are only
named at the end of the report.

BY_DESIGN: node id -> the reason the test skips with (what `-rs` prints), why that is right, and
whether it skips everywhere or only on some hosts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUARDED_TIERS = (REPO / "tests" / "compat", REPO / "tests" / "root")


@dataclass(frozen=True)
class ByDesign:
    reason: str  # what the test says when it skips (pytest.skip's message)
    why: str     # why that skip is no gap in what the suite checks
    always: bool = True  # False: it skips on some hosts only (and runs on the others)


_RELEASES = "tests/compat/test_compat_releases.py::"
_NO_LEASES = ByDesign("Hermes 0.19.0 has no turn leases",
                      "0.19.0's schema has no session_turn_leases: there is no lease to spare")

BY_DESIGN: dict[str, ByDesign] = {
    **{f"{_RELEASES}test_an_explicit_delete_spares_a_conversation_under_a_live_lease_or_lock[0.19.0-{target}]":
       _NO_LEASES for target in ("leased_old", "leased_chain_root", "leased_chain_tip")},
    **{f"{_RELEASES}test_a_chat_our_sweep_archived_comes_back_when_hermes_resumes_it[{release}]":
       ByDesign("auto_archived is 0.22.2's", f"{release} has no auto_archived column: nothing for Hermes to undo")
       for release in ("0.19.0", "0.20.1")},
    # The [real-…] cases run on a host whose pid 1 root cannot look into (a sandbox's init,
    # hidepid); the [injected-…] cases refuse pid 1's descriptors on every host.
    **{nodeid: ByDesign("pid 1's descriptors can be looked into on this host",
                        "the [injected-…] case of the same test runs on every host; this one adds the "
                        "host's own refusal where it has one", always=False)
       for nodeid in [
           *(f"tests/unit/test_compact.py::test_on_a_host_where_a_process_cannot_be_looked_into_compact_gives_"
             f"the_free_pages_back[real-{journal}]" for journal in ("wal", "delete")),
           *(f"tests/compat/test_compat_compact.py::test_compact_gives_a_real_stores_free_pages_back_where_a_"
             f"process_cannot_be_looked_into[real-{release}]" for release in ("0.19.0", "0.22.2"))]},
}


def strict(args: list[str], invoked_in: Path, markexpr: str, env: dict[str, str] = os.environ) -> bool:
    """Does this run hold its skips to the list: in CI, or with the compat or as-root tier asked for?"""
    if env.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return True
    if "compat" in markexpr and "not compat" not in markexpr:
        return True
    for arg in args:
        path = (invoked_in / arg.split("::")[0]).resolve()
        if any(path == tier or tier in path.parents for tier in GUARDED_TIERS):
            return True
    return False


def plain(nodeid: str) -> str:
    """The node id as BY_DESIGN names it: without the `@group` pytest-xdist appends to the node id of
    a test it keeps in a group (`--dist loadgroup`, given by hand; the suite's own is loadscope)."""
    head, at, group = nodeid.rpartition("@")
    return head if at and "]" not in group and "::" not in group else nodeid  # (an "@" of a parameter's is in [...])


def verdict(nodeid: str, skipped_with: str | None) -> str | None:
    """What is wrong with how this test ended, for a guarded run (None: nothing).

    `skipped_with`: the reason it skipped with, or None when it ran."""
    listed = BY_DESIGN.get(plain(nodeid))
    if skipped_with is None:
        if listed is None or not listed.always:
            return None
        return (f"tests/skips.py lists it as skipping by design ({listed.reason!r}), but it ran: "
                "take it off the list")
    if listed is not None and listed.reason in skipped_with:
        return None
    return (f"skipped ({skipped_with}): not a skip by design (tests/skips.py), so this run has not checked "
            "what the test checks; CI and a run of the compat or as-root tier need what it lacks (.ci/run "
            "installs it)")


def _skipped_with(report) -> str | None:
    """The reason a test skipped with (None: it did not skip; an xfail is no skip)."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


STRICT_KEY = "hermes_admin_skips_strict"  # what a pytest-xdist worker is told of its run


class Guard:
    """The pytest plugin that holds a run's skips to BY_DESIGN (registered by tests/conftest.py).

    In a parallel run (pytest-xdist) each worker fails its own tests' skips, held as strictly as the
    run that started it (told through its `workerinput`); the controller, which sees every report,
    names the skips at the end."""

    def __init__(self, config):
        told = getattr(config, "workerinput", {}).get(STRICT_KEY)
        self.strict = told if told is not None else \
            strict(list(config.args), Path(config.invocation_params.dir), config.option.markexpr or "")
        self.not_by_design: list[tuple[str, str]] = []  # (node id, reason) of a run that is not guarded

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        """pytest-xdist starts a worker: it guards as this run does."""
        node.workerinput[STRICT_KEY] = self.strict

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """Guarded: a skip not by design fails its test, and so does a listed test that ran."""
        report = (yield).get_result()
        if not self.strict:
            return
        reason = _skipped_with(report)
        if reason is None and not (report.when == "call" and report.passed):
            return
        problem = verdict(report.nodeid, reason)
        if problem is not None:
            report.outcome, report.longrepr = "failed", problem

    def pytest_runtest_logreport(self, report):
        reason = _skipped_with(report)
        if reason is not None and verdict(report.nodeid, reason) is not None:
            self.not_by_design.append((plain(report.nodeid), reason))

    def pytest_terminal_summary(self, terminalreporter):
        """A run that is not guarded names its skips that are not by design, a line per reason."""
        if not self.not_by_design:
            return
        terminalreporter.section("skips not by design (tests/skips.py): a CI run fails on these")
        by_reason: dict[str, list[str]] = {}
        for nodeid, reason in self.not_by_design:
            by_reason.setdefault(reason, []).append(nodeid)
        for reason, nodeids in by_reason.items():
            more = f" and {len(nodeids) - 1} more" if len(nodeids) > 1 else ""
            terminalreporter.line(f"{reason}: {nodeids[0]}{more}")

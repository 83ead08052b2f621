"""A problem is one value: built where it is found, carried whole across the worker boundary and
read there field by field, said as one line, and counted into the exit code in one place."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_admin import exitcodes
from hermes_admin.cli.mutate import stopped
from hermes_admin.host import workers
from hermes_admin.model import ORDER
from hermes_admin.model import Owner, Profile
from hermes_admin.problems import ERROR, LOCKED, WARNING, Problem, about, exit_code
from hermes_admin.protocol import Job, Maintain, ProtocolError, Reader, Request, Writer
from hermes_admin.results import Run
from tests.conftest import NOW
from tests.helpers import home_of

HOME = "/h/a"
PROFILE = Profile(Path("/h"), "a", Path(HOME))


def _through_the_protocol(run: Run, homes=frozenset({HOME})) -> Run:
    out: list[str] = []
    writer = Writer(out.append)
    writer.hello(1000, 1000, [1000])
    writer.run(run)
    reader = Reader(set(homes))
    for line in out:
        reader.line(line.encode())
    assert reader.ended
    return reader.run


@pytest.mark.parametrize("problem", [
    Problem(ERROR, "disk full"),
    Problem(WARNING, "run lock not taken", kind="run_lock"),
    about(PROFILE, LOCKED, "lock_held", "another run holds it", skipped=True),
    about(PROFILE, ERROR, "sqlite", "database disk image is malformed", path=f"{HOME}/state.db"),
    Problem(WARNING, "sessions: unknown key(s) x", home=HOME, kind="hermes_config", path=f"{HOME}/config.yaml",
            key="sessions.x", line=3),
])
def test_a_problem_crosses_the_boundary_unchanged(problem):
    run = Run(dry_run=False)
    run.add(problem)
    assert _through_the_protocol(run).problems == [problem]


GOOD = Problem(ERROR, "m", profile="a", home=HOME, kind="k", path="/p", key="sessions.x", line=2).as_dict()


@pytest.mark.parametrize("field, value", [
    ("severity", "fatal"), ("severity", None), ("message", 5), ("message", None), ("profile", ["a"]),
    ("home", "/h/bob"),  # a profile this worker was not given
    ("kind", None), ("path", 1), ("key", {}), ("line", "3"), ("line", 0), ("line", -1),
    ("line", True), ("line", 1.5), ("skipped", "yes"), ("extra", 1),
])
def test_a_problem_of_another_shape_is_refused(field, value):
    reader = Reader({HOME})
    with pytest.raises(ProtocolError):
        reader.problem(dict(GOOD, **{field: value}))


def test_a_problem_without_a_field_or_not_an_object_is_refused():
    reader = Reader({HOME})
    for bad in ({k: v for k, v in GOOD.items() if k != "kind"}, "profile 'a': m", None, [GOOD]):
        with pytest.raises(ProtocolError):
            reader.problem(bad)
    assert reader.problem(GOOD) == Problem(**GOOD)


def test_a_long_text_is_cut_and_a_lone_surrogate_escaped():
    got = Reader({HOME}).problem(dict(GOOD, message="x" * 10_000, path="/h/a/caf\udce9"))
    assert len(got.message) == 4097 and got.path == "/h/a/caf\\udce9"


def test_a_worker_sending_a_malformed_problem_fails_its_profiles_and_is_named_never_exit_70(monkeypatch):
    bad = json.dumps({"t": "end", "v": {"dry_run": False, "policies": {}, "findings": [],
                                        "problems": [dict(GOOD, home=None, line="x")]}})
    hello = json.dumps({"t": "hello", "uid": 0, "gid": 0, "groups": []})
    monkeypatch.setattr(workers.child, "argv", lambda module, *args, **_: [
        "python3", "-c", f"print({hello!r}, flush=True); print({bad!r}, flush=True)", *args])
    owner = Owner(os.getuid(), os.getgid(), tuple(sorted(os.getgroups())), "mallory", "/nonexistent")
    profiles = [Profile(Path("/r"), f"p{i}", Path(f"/r/profiles/p{i}")) for i in range(2)]
    run = workers.Spawned(Job(Maintain(Request(ORDER, NOW)), owner, profiles, {}), 0).run()
    assert run.exit_code() == exitcodes.PROFILE_FAILED and not run.internal
    assert [p.profile for p in run.problems] == ["p0", "p1"]
    assert all("broke the protocol (an end: problems[0].line: expected a whole number)" in line for line in run.errors)


@pytest.mark.parametrize("severities, internal, warned, code", [
    ((), False, False, exitcodes.OK),
    ((), False, True, exitcodes.WARNINGS),  # units skipped, a plugin failed
    ((WARNING,), False, False, exitcodes.WARNINGS),
    ((WARNING, LOCKED), False, False, exitcodes.LOCKED),
    ((LOCKED, ERROR, WARNING), False, False, exitcodes.PROFILE_FAILED),
    ((ERROR,), True, False, exitcodes.INTERNAL),
    ((), True, False, exitcodes.INTERNAL),
])
def test_the_exit_code_is_the_worst_severity(severities, internal, warned, code):
    assert exit_code([Problem(s, "m") for s in severities], internal, warned) == code
    if not warned:  # a run's own reason to warn is its results' (units skipped, a plugin failed)
        assert Run(dry_run=False, problems=[Problem(s, "m") for s in severities], internal=internal).exit_code() == code


def test_one_line_says_a_problem_as_it_always_was_said():
    assert about(PROFILE, LOCKED, "lock_held", "held by pid 7", skipped=True).text() == \
        "profile 'a': skipped: held by pid 7"
    assert about(PROFILE, ERROR, "os", "No space left on device", path="/h/a/x").text() == \
        "profile 'a': /h/a/x: No space left on device"
    assert Problem(WARNING, "unknown key(s) x", path="/etc/a.yaml", line=4).text() == "/etc/a.yaml:4: unknown key(s) x"
    assert Problem(ERROR, "no roots").text() == "no roots"


def test_each_kind_of_line_lands_in_its_list_and_the_json_carries_the_values():
    run = Run(dry_run=False, problems=[about(PROFILE, WARNING, "w", "w"), about(PROFILE, LOCKED, "l", "l"),
                                       about(PROFILE, ERROR, "e", "e")])
    assert (run.warnings, run.locked, run.errors) == (["profile 'a': w"], ["profile 'a': l"], ["profile 'a': e"])
    doc = run.as_dict()
    assert [p["severity"] for p in doc["problems"]] == [WARNING, LOCKED, ERROR]
    assert doc["problems"][0] == {"severity": "warning", "message": "w", "profile": "a", "home": HOME, "kind": "w",
                                  "path": None, "key": None, "line": None, "skipped": False}


def test_what_stopped_a_profile_is_read_from_fields_held_locks_first():
    """What `mutate.stopped` once read back out of the lines: the profile and the reason, without
    `skipped: `; a line naming no profile names none."""
    run = Run(dry_run=False, problems=[
        Problem(ERROR, "some roots or profiles were not found"),
        about(PROFILE, ERROR, "os", "cannot make the export folder", path="/x"),
        about(PROFILE, LOCKED, "lock_held", "another hermes-admin run holds this profile", skipped=True),
        about(Profile(Path("/h"), "b", Path("/h/b"), display="r2:b"), WARNING, "w", "only a warning"),
    ])
    assert stopped(run) == {"a": "another hermes-admin run holds this profile"}


def test_config_check_finds_the_line_of_an_unknown_key_by_its_key(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = home_of(root, "work") / "config.yaml"
    config.write_text("model: x\nsessions:\n  retention_days: 30\n  auto_prnue: true\n")
    result = invoke("--root", str(root), "config", "check", "-p", "work")
    assert result.exit_code == 1 and f"{config}:4: sessions: unknown key(s) auto_prnue" in result.stderr
    admin = tmp_path / "admin.yaml"
    admin.write_text(f"roots: [{root}]\n\nrootz: []\n")
    result = invoke("--config", str(admin), "config", "check")
    assert result.exit_code == 78 and f"{admin}:3: unknown key(s) rootz" in result.stderr


def test_an_ambiguous_id_is_said_and_exits_1_as_before(synth_root, invoke):
    root, _ = synth_root
    listed = json.loads(invoke("--root", str(root), "sessions", "list", "--json", "-n", "1000").stdout)["sessions"]
    ids = [s["id"] for s in listed]
    prefix = next(p for p in (i[:1] for i in ids) if sum(i.startswith(p) for i in ids) > 1)
    result = invoke("--root", str(root), "sessions", "show", prefix)
    assert result.exit_code == 1 and f"'{prefix}' is ambiguous" in result.stderr
    many = sum(i.startswith(prefix) for i in ids)
    assert f"{many} sessions match" in result.stderr  # a list cut at 10 says how many there are
    if many > 10:
        assert f"and {many - 10} more" in result.stderr


@pytest.mark.parametrize("forged, says", [
    ({"t": "end", "v": {"dry_run": False, "policies": {}, "findings": [], "problems": [], "internal": True}},
     "reported an internal error"),
    ({"t": "data", "k": "exports", "v": {"file": "/x", "profile": "p0", "units": 1}},
     "broke the protocol (a row of exports: home: missing)"),
])
def test_what_a_worker_says_is_its_profiles_outcome_never_the_hosts_exit_70(monkeypatch, forged, says):
    """A worker that says "internal" (its own bug, or a lie), or sends a row without the fields a command
    reads: each of its profiles fails (exit 2); the host's 70 is for the host's own bugs."""
    hello = json.dumps({"t": "hello", "uid": 0, "gid": 0, "groups": []})
    monkeypatch.setattr(workers.child, "argv", lambda module, *args, **_: [
        "python3", "-c", f"print({hello!r}, flush=True); print({json.dumps(forged)!r}, flush=True)", *args])
    owner = Owner(os.getuid(), os.getgid(), tuple(sorted(os.getgroups())), "mallory", "/nonexistent")
    profiles = [Profile(Path("/r"), f"p{i}", Path(f"/r/profiles/p{i}")) for i in range(2)]
    run = workers.Spawned(Job(Maintain(Request(ORDER, NOW)), owner, profiles, {}), 0).run()
    assert run.exit_code() == exitcodes.PROFILE_FAILED and not run.internal
    assert [p.profile for p in run.problems] == ["p0", "p1"]
    assert all(says in line for line in run.errors), run.errors


def test_a_run_takes_problem_values_only():
    """The bug it keeps out: a line of text put among a run's problems crashed `usage` far from there."""
    run = Run(dry_run=False)
    with pytest.raises(TypeError, match="Problem values, not str"):
        run.add("profile p: cannot list its exports")
    with pytest.raises(TypeError):
        run.merge(Run(dry_run=False, problems=["a line"]))
    run.add(Problem(WARNING, "w"))
    assert run.warnings == ["w"] and run.problems == [Problem(WARNING, "w")]


def test_nothing_puts_into_a_runs_problems_but_its_add():
    import re
    from pathlib import Path

    import hermes_admin
    direct = re.compile(r"\brun\.problems\s*(\+=|\.append|\.extend|\.insert|\[[^]]*\]\s*=[^=])")
    found = [f"{path}:{n}" for path in Path(hermes_admin.__file__).parent.rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1) if direct.search(line)]
    assert found == []

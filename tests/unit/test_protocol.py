"""The report a worker sends, read by the host as untrusted (protocol.Reader)."""

from __future__ import annotations

import json

import pytest

from hermes_admin.protocol import MAX_LINE, ProtocolError, Reader, Writer
from hermes_admin.problems import ERROR, Problem
from hermes_admin.results import Done, Result, Run

PROBLEM = {"severity": "error", "message": "m", "profile": None, "home": None, "kind": "k", "path": None,
           "key": None, "line": None, "skipped": False}


def lines_of(run: Run) -> list[bytes]:
    out: list[str] = []
    writer = Writer(out.append)
    writer.hello(1000, 1000, [1000])
    writer.run(run)
    return [line.rstrip("\n").encode() for line in out]


def sample_run(home="/h/a") -> Run:
    run = Run(dry_run=False)
    result = Result("default", "delete", "prune", False, task="purge", home=home)
    result.done.append(Done("s1", ("s1", "s2"), "old"))
    result.kept["s3"] = "recent"
    result.files_removed.append(f"{home}/sessions/s1.json")
    run.results.append(result)
    run.add(Problem(ERROR, "something", profile="default", home=home))
    run.policies[home] = {"profile": "default", "description": "keep 90 days"}
    run.data["profiles"] = [{"name": "default", "home": home}]
    return run


def test_a_worker_report_comes_back_whole():
    reader = Reader({"/h/a"})
    for line in lines_of(sample_run()):
        reader.line(line)
    assert reader.ended
    (result,) = reader.run.results
    assert [d.ids for d in result.done] == [("s1", "s2")] and dict(result.kept.items()) == {"s3": "recent"}
    assert reader.run.errors == ["profile 'default': something"] and reader.run.data["profiles"][0]["home"] == "/h/a"


@pytest.mark.parametrize("bad", [
    b"not json", b"5", b'{"t": "result", "v": {}}',  # before hello
    b"{" * 5000 + b"}" * 5000,
])
def test_garbage_is_refused(bad):
    with pytest.raises(ProtocolError):
        Reader({"/h/a"}).line(bad)


def test_a_report_on_a_profile_it_was_not_given_is_refused():
    lines = lines_of(sample_run(home="/h/bob"))
    reader = Reader({"/h/a"})
    reader.line(lines[0])
    with pytest.raises(ProtocolError, match="not given"):
        for line in lines[1:]:
            reader.line(line)


@pytest.mark.parametrize("field, value", [("transactions", "many"), ("seconds", float("nan")),
                                          ("notes", [5]), ("dry_run", "yes"), ("profile", ["x"])])
def test_wrong_types_are_refused(field, value):
    lines = lines_of(sample_run())
    header = json.loads(lines[1])
    header["v"][field] = value
    reader = Reader({"/h/a"})
    reader.line(lines[0])
    with pytest.raises(ProtocolError):
        reader.line(json.dumps(header).encode())


def test_an_oversized_line_is_refused():
    reader = Reader({"/h/a"})
    with pytest.raises(ProtocolError, match="bytes"):
        reader.line(b" " * (MAX_LINE + 1))


def test_odd_but_parseable_reports_are_refused_not_crashed_on():
    for end in ({"t": "end", "v": {"dry_run": False, "problems": [], "policies": {},
                                   "findings": 5}},):
        reader = Reader({"/h/a"}, repair=True)
        reader.line(lines_of(Run(dry_run=False))[0])
        with pytest.raises(ProtocolError):
            reader.line(json.dumps(end).encode())


def test_a_file_name_that_is_not_utf8_comes_back_escaped_not_as_a_broken_report():
    run = sample_run()
    run.results[0].files_removed.append("/h/a/sessions/caf\udce9.json")  # a Latin-1 name, as os.fsdecode gives it
    reader = Reader({"/h/a"})
    for line in lines_of(run):
        reader.line(line)
    assert reader.ended and reader.run.errors == ["profile 'default': something"]
    assert list(reader.run.results[0].files_removed)[-1] == "/h/a/sessions/caf\\udce9.json"
    reader = Reader({"/h/a"})  # a lone surrogate anywhere: printable, never a crash of whoever prints it
    reader.line(lines_of(Run(dry_run=False))[0])
    reader.line(json.dumps({"t": "end", "v": {"dry_run": False, "policies": {}, "problems": [
        dict(PROBLEM, message="\ud800")]}}).encode())
    assert reader.run.errors == ["\\ud800"]


def test_the_size_cap_of_a_report_is_the_readers():
    lines = lines_of(sample_run())
    capped, uncapped = Reader({"/h/a"}, max_report=100), Reader({"/h/a"}, max_report=None)
    with pytest.raises(ProtocolError, match="a report over"):
        for line in lines:
            capped.line(line)
    for line in lines:
        uncapped.line(line)
    assert uncapped.ended

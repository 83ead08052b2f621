"""The report a worker sends, read by the host as untrusted (protocol.Reader)."""

from __future__ import annotations

import json

import pytest

from hermes_admin.protocol import MAX_FINDINGS, MAX_LINE, ProtocolError, Reader, Writer
from hermes_admin.problems import ERROR, Problem
from hermes_admin.results import Done, Finding, RepairRun, Result, Run

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
    run.data["session_ids"] = [{"home": home, "ids": ["s1"]}]
    return run


def test_a_worker_report_comes_back_whole():
    reader = Reader({"/h/a"})
    for line in lines_of(sample_run()):
        reader.line(line)
    assert reader.ended
    (result,) = reader.run.results
    assert [d.ids for d in result.done] == [("s1", "s2")] and dict(result.kept.items()) == {"s3": "recent"}
    assert reader.run.errors == ["profile 'default': something"] and reader.run.data["session_ids"][0]["home"] == "/h/a"


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
    reader, header = _with_header_field(field, value)
    with pytest.raises(ProtocolError):
        reader.line(header)


def _with_header_field(field, value) -> tuple[Reader, bytes]:
    """A reader past a sample run's first line, and that run's result header with `field` set to `value`."""
    lines = lines_of(sample_run())
    header = json.loads(lines[1])
    header["v"][field] = value
    reader = Reader({"/h/a"})
    reader.line(lines[0])
    return reader, json.dumps(header).encode()


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
    reader.line(json.dumps({"t": "end", "v": {"dry_run": False, "policies": {}, "findings": [], "problems": [
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


# -- repair findings: read as strictly as problems -----------------------------------

FINDING = Finding("default", "mislabelled", "s1", "profile_name is 'x'", "relabel", target="work",
                  home="/h/a").as_dict()


def end_with(findings) -> bytes:
    return json.dumps({"t": "end", "v": {"dry_run": True, "problems": [], "policies": {},
                                         "findings": findings}}).encode()


def test_findings_cross_the_boundary_unchanged():
    run = RepairRun(dry_run=True, findings=[Finding(**FINDING), Finding(**dict(FINDING, target=None, applied=True,
                                                                              error="disk full"))])
    reader = Reader({"/h/a"}, repair=True)
    for line in lines_of(run):
        reader.line(line)
    assert reader.ended and reader.run.findings == run.findings


@pytest.mark.parametrize("field, value", [
    ("profile", None), ("profile", 5), ("kind", None), ("kind", ["k"]), ("subject", None), ("subject", 1),
    ("detail", None), ("detail", {}), ("fix", None), ("fix", False), ("target", 5), ("target", ["w"]),
    ("applied", "yes"), ("applied", 1), ("applied", None), ("error", 5), ("error", ["e"]),
    ("home", "/h/bob"), ("home", None), ("home", 5),  # only a profile this worker was given
    ("line", "default: mislabelled s1"),  # no field of another shape
    ("text", "profile 'default': mislabelled"),
])
def test_a_finding_of_another_shape_is_refused(field, value):
    with pytest.raises(ProtocolError):
        Reader({"/h/a"}).finding(dict(FINDING, **{field: value}))


def test_a_finding_without_a_field_or_not_an_object_is_refused():
    reader = Reader({"/h/a"})
    for name in FINDING:
        with pytest.raises(ProtocolError):
            reader.finding({k: v for k, v in FINDING.items() if k != name})
    for bad in ("default: mislabelled s1", None, [FINDING], 5):
        with pytest.raises(ProtocolError):
            reader.finding(bad)
    assert reader.finding(FINDING) == Finding(**FINDING)
    assert len(reader.finding(dict(FINDING, detail="x" * 10_000)).detail) == 4097  # cut, not refused
    assert reader.finding(dict(FINDING, subject="/h/a/caf\udce9")).subject == "/h/a/caf\\udce9"


@pytest.mark.parametrize("findings", [
    None, 5, "mislabelled s1", {"0": FINDING},  # not a list (nor missing: the writer always says them)
    [FINDING, dict(FINDING, applied="no")],  # one malformed among good ones
    [FINDING] * (MAX_FINDINGS + 1),  # past the bound
], ids=["null", "number", "text", "object", "one malformed", "too many"])
def test_an_end_whose_findings_are_malformed_is_a_broken_protocol(findings):
    reader = Reader({"/h/a"}, repair=True)
    reader.line(lines_of(Run(dry_run=True))[0])
    with pytest.raises(ProtocolError):
        reader.line(end_with(findings))
    assert not reader.run.findings and not reader.ended


def test_an_end_without_findings_is_a_broken_protocol():
    reader = Reader({"/h/a"}, repair=True)
    reader.line(lines_of(Run(dry_run=True))[0])
    with pytest.raises(ProtocolError):
        reader.line(json.dumps({"t": "end", "v": {"dry_run": True, "problems": [], "policies": {}}}).encode())


HELLO = b'{"t": "hello", "uid": 1000, "gid": 1000, "groups": [1000]}'
EXPORT = {"file": "/h/a/x.jsonl.gz", "profile": "default", "home": "/h/a", "created": 1.0, "units": 1, "sessions": 1,
          "messages": 2, "reasons": ["prune"], "bytes": 10}


def _row(key: str, row) -> Reader:
    reader = Reader({"/h/a"})
    reader.line(HELLO)
    reader.line(json.dumps({"t": "data", "k": key, "v": row}).encode())
    return reader


def test_a_row_of_its_kind_with_its_fields_is_taken_as_it_is():
    assert _row("exports", dict(EXPORT, extra={"any": [1]})).run.data["exports"] == [dict(EXPORT, extra={"any": [1]})]


@pytest.mark.parametrize("key, row, why", [
    ("exports", {k: v for k, v in EXPORT.items() if k != "home"}, "home: missing"),  # `exports list` indexed it: 70
    ("profiles", {"name": "default"}, "home: missing"),
    ("usage", {"profile": "p", "home": 5}, "home: expected text"),
    ("exports", dict(EXPORT, bytes="10"), "bytes: expected a whole number"),
    ("exports", dict(EXPORT, reasons="prune"), "reasons: expected a list"),
    ("sessions", {"profile": "p", "home": "/h/a", "id": "s", "title": None, "source": "cli", "messages": 1,
                  "last_activity": 5, "open": True, "archived": False, "pinned": False}, "last_activity"),
    ("plugins", {"profile": "p", "home": "/h/a", "key": "k", "source": "user", "enabled": "yes", "why": ""}, "enabled"),
    ("installations", {"profile": "p", "home": "/h/a", "installation": {"python": "/x"}}, "found_by"),
    ("session_ids", {"home": "/h/bob", "ids": ["s1"]}, "not given"),
    ("session_ids", {"home": "/h/a", "ids": ["s1", 5]}, r"ids\[1\]: expected text"),
    ("sessions", {"profile": "p", "home": "/h/a", "id": "s", "title": {"a": 1}, "source": "cli", "messages": 1,
                  "last_activity": None, "open": True, "archived": False, "pinned": False}, "title: expected str or"),
    ("compacted", {"profile": "p", "home": "/h/a", "free_bytes": 1, "given_back_bytes": 0, "how": None,
                   "journal_mode": "wal", "refused": None, "file_bytes_before": None}, "file_bytes_before: expected a"),
    ("whatever", {"home": "/h/a"}, "no known kind"),
    ("session_ids", ["/h/a"], "expected an object"),
])
def test_a_row_without_its_fields_is_a_broken_protocol_not_a_crash_later(key, row, why):
    with pytest.raises(ProtocolError, match=why):
        _row(key, row)


@pytest.mark.parametrize("policy, why", [
    (["keep"], "expected an object"),
    ({"profile": "default", "hermes": [1]}, "hermes: expected an object"),
    ({"profile": "default", "hermes": {"installation": {"python": "/x"}}}, "found_by"),
    ({"profile": "default", "origins": "admin"}, "origins: expected an object"),
])
def test_a_policy_of_another_shape_is_a_broken_protocol(policy, why):
    reader = Reader({"/h/a"})
    reader.line(HELLO)
    end = {"t": "end", "v": {"dry_run": False, "problems": [], "findings": [], "policies": {"/h/a": policy}}}
    with pytest.raises(ProtocolError, match=why):
        reader.line(json.dumps(end).encode())


# -- reason, action, status and severity: enums that are their text ----------------------------

def test_the_enums_travel_and_print_as_the_text_they_were():
    from hermes_admin.model import Reason
    from hermes_admin.problems import Severity
    from hermes_admin.results import Action, Status

    run = sample_run()
    run.results[0].action, run.results[0].reason = Action.DELETE, Reason.PRUNE
    from hermes_admin import report

    out: list[str] = []
    report._write_compact(run.as_dict(), out.append)  # the JSON report, piped
    as_json = json.loads("".join(out))
    assert as_json == json.loads(json.dumps(run.as_dict(), indent=2, default=report._plain))  # at a terminal
    assert (as_json["results"][0]["action"], as_json["results"][0]["reason"], as_json["results"][0]["status"],
            as_json["problems"][0]["severity"]) == ("delete", "prune", "done", "error")
    for member, text in ((Reason.PRUNE, "prune"), (Action.UNARCHIVE, "unarchive"), (Status.SKIPPED, "skipped"),
                         (Severity.LOCKED, "locked")):
        assert member == text and f"{member}" == text and str(member) == text and json.dumps(member) == f'"{text}"'
        assert hash(member) == hash(text) and {text: 1}[member] == 1  # a plugin's `reason == "prune"` holds


def test_what_crosses_comes_back_as_the_enums_and_text_sent_before_still_reads():
    from hermes_admin.model import Reason
    from hermes_admin.problems import Severity
    from hermes_admin.results import Action, Status

    reader = Reader({"/h/a"})
    for line in lines_of(sample_run()):  # the worker built its result of plain text, as older code does
        reader.line(line)
    (result,) = reader.run.results
    assert (result.action, result.reason, result.status) == ("delete", "prune", "done")
    assert (type(result.action), type(result.reason), type(result.status)) == (Action, Reason, Status)
    assert type(reader.run.problems[0].severity) is Severity
    assert Problem("warning", "m") == Problem(Severity.WARNING, "m") and type(Problem("warning", "m").severity) is Severity


@pytest.mark.parametrize("field, value", [("action", "shred"), ("status", "maybe"), ("reason", "because"),
                                          ("action", None), ("status", 1)])
def test_a_header_outside_the_enums_is_refused(field, value):
    reader, header = _with_header_field(field, value)
    with pytest.raises(ProtocolError, match=f"a result: {field}: expected one of"):
        reader.line(header)

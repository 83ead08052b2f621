"""Selection rules as tables of cases (restic's policy tests are the model): rows, policy, now in; units out."""

from __future__ import annotations

from dataclasses import dataclass

from datetime import datetime

import pytest

from hermes_admin.profile.store.files import FileIndex
from hermes_admin.profile.lineage import Graph, Unit, lineage_unit
from hermes_admin.profile.tasks import archive, empty, ghosts, retention
from hermes_admin.filters import FilterError, Filters, parse_when

NOW = 1_800_000_000.0
DAY = 86400.0
HOUR = 3600.0


@dataclass
class Row:
    id: str
    started_at: float = NOW - 200 * DAY
    ended_at: float | None = NOW - 199 * DAY
    end_reason: str | None = "user_exit"
    parent_id: str | None = None
    delegate_from: str | None = None
    archived: bool = False
    pinned: bool = False
    source: str = "cli"
    title: str | None = "t"
    model: str | None = "m"
    message_rows: int = 2
    last: float | None = None  # newest activity; None = started_at

    @property
    def last_activity(self) -> float:
        return self.last if self.last is not None else self.started_at


def ago(days: float) -> float:
    return NOW - days * DAY


# -- retention ------------------------------------------------------------------

RETENTION_CASES = [
    # (name, rows, live, selected unit heads)
    ("old ended goes", [Row("a", last=ago(100))], set(), ["a"]),
    ("exactly at the cutoff stays", [Row("a", last=ago(90))], set(), []),
    ("one second past the cutoff goes", [Row("a", last=ago(90) - 1)], set(), ["a"]),
    ("one second short of the cutoff stays", [Row("a", last=ago(90) + 1)], set(), []),
    ("started long ago, spoken to yesterday: stays", [Row("a", started_at=ago(300), last=ago(1))], set(), []),
    ("open stays", [Row("a", ended_at=None, last=ago(200))], set(), []),
    ("pinned stays", [Row("a", pinned=True, last=ago(200))], set(), []),
    ("live lock stays", [Row("a", last=ago(200))], {"a"}, []),
    ("archived goes", [Row("a", archived=True, last=ago(200))], set(), ["a"]),
    ("future-dated stays", [Row("a", started_at=NOW + DAY, last=NOW + DAY)], set(), []),
    ("lineage with recent open tip stays whole",
     [Row("r", end_reason="compression", last=ago(150)), Row("m", parent_id="r", end_reason="compression", last=ago(140)),
      Row("t", parent_id="m", ended_at=None, last=ago(1))], set(), []),
    ("old lineage goes whole, keyed by its root",
     [Row("r", end_reason="compression", last=ago(150)), Row("t", parent_id="r", last=ago(140))], set(), ["r"]),
    ("delegates go with their parent",
     [Row("p", last=ago(110)), Row("c1", parent_id="p", delegate_from="p", last=ago(110)),
      Row("c2", parent_id="p", delegate_from="p", last=ago(110))], set(), ["p"]),
    ("an open delegate keeps its parent",
     [Row("p", last=ago(110)), Row("c1", parent_id="p", delegate_from="p", ended_at=None, last=ago(110))], set(), []),
    ("a branch child is its own unit",
     [Row("p", last=ago(110)), Row("b", parent_id="p", last=ago(2))], set(), ["p"]),
    ("empty table", [], set(), []),
]


@pytest.mark.parametrize("name, rows, live, heads", RETENTION_CASES, ids=[c[0] for c in RETENTION_CASES])
def test_retention(name, rows, live, heads):
    selection = retention.select(Graph(rows), 90, NOW, live)
    assert [u.session_id for u in selection.units] == heads
    selected = selection.ids()
    for row in rows:
        assert (row.id in selected) != (row.id in selection.kept)  # every row is either selected or kept with a reason


def test_retention_units_and_reasons():
    rows = [Row("p", last=ago(110)), Row("c", parent_id="p", delegate_from="p", last=ago(110)),
            Row("x", ended_at=None)]
    selection = retention.select(Graph(rows), 90, NOW)
    (unit,) = selection.units
    assert unit.ids == ("p", "c") and "110.0 days ago" in unit.rule and "retention 90" in unit.rule
    assert selection.kept == {"x": "x is open"}


def test_retention_recheck():
    check = retention.recheck(90, NOW)
    unit = retention.select(Graph([Row("a", last=ago(100))]), 90, NOW).units[0]
    assert check(unit, {"a": Row("a", last=ago(100))}) is None
    assert check(unit, {"a": Row("a", last=ago(1))}) == "active 1.0 days ago"
    assert check(unit, {"a": Row("a", ended_at=None, last=ago(100))}) == "a is open"


# The selector and its re-check in the transaction share one rule (why_kept): given the same rows, the
# selector's reason for keeping a unit is the re-check's verdict, and a unit it takes passes the re-check.
# Live rows are left out: inside the transaction they are the engine's own guard (store/sql.py: blocked).
W_CRON = retention.Windows(90, {"cron": 30})
REAPED = dict(end_reason=retention.REAPED)
RETENTION_AGREE_CASES = [
    ("old and ended", [Row("a", last=ago(100))], 90),
    ("recently active", [Row("a", last=ago(10))], 90),
    ("open", [Row("a", ended_at=None, last=ago(100))], 90),
    ("pinned", [Row("a", pinned=True, last=ago(100))], 90),
    ("lineage with a recent tip", [Row("a", end_reason="compression", last=ago(100)),
                                   Row("t", parent_id="a", last=ago(5))], 90),
    ("an open delegate", [Row("a", last=ago(100)), Row("d", parent_id="a", delegate_from="a", ended_at=None)], 90),
    ("a pinned delegate", [Row("a", last=ago(100)), Row("d", parent_id="a", delegate_from="a", pinned=True)], 90),
    ("cron past its own window", [Row("a", source="cron", last=ago(40))], W_CRON),
    ("cron within its own window", [Row("a", source="cron", last=ago(20))], W_CRON),
    ("closed as stale lately", [Row("a", ended_at=ago(10), last=ago(200), **REAPED)], 90),
    ("closed as stale long ago", [Row("a", ended_at=ago(100), last=ago(200), **REAPED)], 90),
]


@pytest.mark.parametrize("name, rows, windows", RETENTION_AGREE_CASES, ids=[c[0] for c in RETENTION_AGREE_CASES])
def test_retention_selector_and_recheck_agree(name, rows, windows):
    graph = Graph(rows)
    selection = retention.select(graph, windows, NOW)
    check = retention.recheck(windows, NOW)
    taken = [unit.ids for unit in selection.units]
    for head in retention.unit_heads(graph):
        unit = lineage_unit(graph, head)
        verdict = check(unit, {row.id: row for row in rows})
        assert verdict == (None if unit.ids in taken else selection.kept[head])


# -- empty sweep ----------------------------------------------------------------

EMPTY_CASES = [
    ("empty, ended 2 h ago: goes", Row("a", message_rows=0, ended_at=NOW - 2 * HOUR), True, None),
    ("empty, ended 30 min ago: stays", Row("a", message_rows=0, ended_at=NOW - 0.5 * HOUR), False, "too recently"),
    ("empty and open: stays", Row("a", message_rows=0, ended_at=None), False, "open"),
    ("empty and archived: stays", Row("a", message_rows=0, archived=True), False, "archived"),
    ("empty and pinned: stays", Row("a", message_rows=0, pinned=True), False, "pinned"),
    ("has messages: not considered", Row("a", message_rows=1), False, None),
]


@pytest.mark.parametrize("name, row, goes, kept_why", EMPTY_CASES, ids=[c[0] for c in EMPTY_CASES])
def test_empty_sweep(name, row, goes, kept_why):
    selection = empty.select(Graph([row]), 1, NOW)
    assert bool(selection.units) is goes
    if kept_why:
        assert kept_why in selection.kept["a"]
    elif not goes:
        assert selection.kept == {}


EMPTY_AGREE_CASES = [(name, [row]) for name, row, _, _ in EMPTY_CASES] + [
    ("empty with children", [Row("a", message_rows=0), Row("c", parent_id="a")]),
]


@pytest.mark.parametrize("name, rows", EMPTY_AGREE_CASES, ids=[c[0] for c in EMPTY_AGREE_CASES])
def test_empty_selector_and_recheck_agree(name, rows):
    """The sweep's one rule (why_kept) gives the selector's reason and the re-check's verdict alike; a
    row with messages, which the selector passes over without a word, is refused by the re-check."""
    selection = empty.select(Graph(rows), 1, NOW)
    verdict = empty.recheck(1, NOW)(Unit("a", ["a"], ""), {row.id: row for row in rows})
    if selection.units:
        assert verdict is None
    else:
        assert verdict == selection.kept.get("a", empty.NOT_EMPTY)


def test_empty_with_children_stays():
    rows = [Row("p", message_rows=0), Row("c", parent_id="p")]
    selection = empty.select(Graph(rows), 1, NOW)
    assert selection.units == [] and "children" in selection.kept["p"]


# -- ghosts -------------------------------------------------------------------

GHOST_CASES = [
    ("TUI ghost", dict(source="tui", title=None, message_rows=0, started_at=ago(2)), True),
    ("TUI with a title", dict(source="tui", title="x", message_rows=0, started_at=ago(2)), False),
    ("TUI, 23 h old", dict(source="tui", title=None, message_rows=0, started_at=NOW - 23 * HOUR), False),
    ("TUI, open", dict(source="tui", title=None, message_rows=0, ended_at=None), False),
    ("CLI ghost-like", dict(source="cli", title=None, message_rows=0, started_at=ago(2)), False),
]


@pytest.mark.parametrize("name, fields, goes", GHOST_CASES, ids=[c[0] for c in GHOST_CASES])
def test_tui_ghosts(name, fields, goes):
    assert bool(ghosts.select_tui_ghosts(Graph([Row("g", **fields)]), NOW).units) is goes


@pytest.mark.parametrize("name, fields, goes", GHOST_CASES, ids=[c[0] for c in GHOST_CASES])
def test_tui_ghost_selector_and_recheck_agree(name, fields, goes):
    row = Row("g", **fields)
    selection = ghosts.select_tui_ghosts(Graph([row]), NOW)
    verdict = ghosts.recheck(NOW)(Unit("g", ["g"], ""), {"g": row})
    assert verdict == (None if goes else selection.kept.get("g", ghosts.NOT_A_GHOST))


def test_orphan_rows_one_unit_per_missing_id():
    units = ghosts.select_orphan_rows(["b", "a"]).units
    assert [(u.session_id, u.ids) for u in units] == [("a", ("a",)), ("b", ("b",))]


def test_orphan_files(tmp_path):
    import os
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for name, age in [("gone.jsonl", 30), ("session_gone.json", 30), ("fresh.jsonl", 0.1), ("kept.json", 30),
                      ("sessions.json", 30), ("notes.txt", 30)]:
        (sessions / name).write_text("x")
        os.utime(sessions / name, (ago(age), ago(age)))
    index = FileIndex.scan(sessions)
    entries = [(sid, index.entry(name)) for part in index.names(2) for sid, name in part]
    selection = ghosts.select_orphan_files(entries, {"kept"}, NOW)
    assert sorted(os.path.basename(p) for p in selection.files) == ["gone.jsonl", "session_gone.json"]
    assert [os.path.basename(p) for p in selection.kept] == ["fresh.jsonl"]


# -- auto-archive ---------------------------------------------------------------

ARCHIVE_CASES = [
    ("idle ended", [Row("a", last=ago(40))], ["a"]),
    ("idle open (Hermes archives those too)", [Row("a", ended_at=None, last=ago(40))], ["a"]),
    ("active", [Row("a", last=ago(5))], []),
    ("pinned", [Row("a", pinned=True, last=ago(40))], []),
    ("already archived", [Row("a", archived=True, last=ago(40))], []),
    ("lineage with a recent tip", [Row("r", end_reason="compression", last=ago(40)), Row("t", parent_id="r", last=ago(1))], []),
    ("idle lineage flips whole", [Row("r", end_reason="compression", last=ago(40)), Row("t", parent_id="r", last=ago(35))], ["r"]),
    ("idle lineage with a live member (a lease on its root)",
     [Row("live", end_reason="compression", last=ago(40)), Row("t", parent_id="live", last=ago(35))], []),
]


@pytest.mark.parametrize("name, rows, heads", ARCHIVE_CASES, ids=[c[0] for c in ARCHIVE_CASES])
def test_auto_archive(name, rows, heads):
    selection = archive.select(Graph(rows), 30, NOW, live={"live"})
    assert [u.session_id for u in selection.units] == heads
    if heads == ["r"]:
        assert selection.units[0].ids == ("r", "t")


# -- filters --------------------------------------------------------------------

LOCAL_0800 = datetime(2027, 1, 15, 8, 0).astimezone().timestamp()  # a time without a zone is local


@pytest.mark.parametrize("text, expected", [
    ("5h", NOW - 5 * HOUR), ("2d", NOW - 2 * DAY), ("1w", NOW - 7 * DAY), ("30m", NOW - 1800), ("1.5d", NOW - 1.5 * DAY),
    ("2027-01-15T08:00:00+00:00", 1800000000.0), ("2027-01-15T08:00:00", LOCAL_0800),
    ("1w2d", NOW - 9 * DAY), ("3mo", NOW - 90 * DAY), ("90", NOW - 90 * DAY), ("1y 6mo", NOW - 545 * DAY),
])
def test_parse_when(text, expected):
    assert parse_when(text, NOW) == pytest.approx(expected)


def test_parse_when_rejects_garbage():
    with pytest.raises(FilterError, match="neither a duration"):
        parse_when("yesterday-ish", NOW)


def test_filters_are_anded():
    row = Row("a", source="telegram", end_reason="idle", title="Weekly Report", model="gpt-x", message_rows=5, last=ago(10))
    assert Filters(source="telegram", title="report", model="GPT").matches(row)
    assert not Filters(source="telegram", end_reason="user_exit").matches(row)
    assert Filters(min_messages=5, max_messages=5).matches(row)
    assert not Filters(min_messages=6).matches(row)
    assert Filters(before=ago(5)).matches(row) and not Filters(after=ago(5)).matches(row)
    assert not Filters().given() and Filters(source="x").given() and Filters(after=1.0).has_age_bound

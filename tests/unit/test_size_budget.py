"""A size budget (`max_store_mb`): the oldest eligible units go until the store fits; never open,
pinned, live or active within `min_keep_days`."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml

from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.tasks import budget
from hermes_admin.synth.builder import SynthStore
from tests.helpers import row_ids
from tests.unit.test_tasks import NOW, Row, ago

DAY = 86400.0

CASES = [
    # (name, rows, live, min_keep_days, offered oldest first)
    ("oldest first", [Row("b", last=ago(20)), Row("a", last=ago(30)), Row("c", last=ago(10))], set(), 7, ["a", "b", "c"]),
    ("within min_keep_days stays", [Row("a", last=ago(3)), Row("b", last=ago(8))], set(), 7, ["b"]),
    ("open, pinned and live stay",
     [Row("o", ended_at=None, last=ago(40)), Row("p", pinned=True, last=ago(40)), Row("l", last=ago(40)),
      Row("x", last=ago(40))], {"l"}, 7, ["x"]),
    ("a unit is offered whole, by its newest member",
     [Row("p", last=ago(50)), Row("c", parent_id="p", delegate_from="p", last=ago(9)), Row("q", last=ago(20))],
     set(), 7, ["q", "p"]),
    ("min_keep_days 0 offers yesterday's", [Row("a", last=ago(1))], set(), 0, ["a"]),
]


@pytest.mark.parametrize("name, rows, live, keep, heads", CASES, ids=[c[0] for c in CASES])
def test_budget_offers_the_oldest_eligible_first(name, rows, live, keep, heads):
    selection = budget.select(Graph(rows), 1, keep, NOW, live)
    assert [u.session_id for u in selection.units] == heads
    for row in rows:
        assert (row.id in selection.ids()) != (row.id in selection.kept)


MB = 1_000_000 // budget.TEXT_WEIGHT  # bytes of text that weigh (just under) 1 MB in the store

COVERING = [
    # (name, text bytes of the units offered oldest first, planned MB, max_store_mb, units taken)
    ("not over: nothing goes", [5 * MB], 10.0, 10.0, 0),
    ("under: nothing goes", [5 * MB], 8.0, 10.0, 0),
    ("one unit covers the excess", [3 * MB, 3 * MB], 12.0, 10.0, 1),
    ("the oldest first, as far as needed", [1 * MB, 1 * MB, 1 * MB, 1 * MB], 12.5, 10.0, 3),
    ("covered exactly: no more", [1 * MB, 1 * MB, 1 * MB], 10.0 + 2 * budget.weight_mb(MB), 10.0, 2),
    ("a unit without messages weighs nothing, and goes in its turn", [0, 2 * MB, 2 * MB], 11.0, 10.0, 2),
    ("not enough eligible: every one of them", [1 * MB, 1 * MB], 50.0, 10.0, 2),
    ("nothing eligible", [], 50.0, 10.0, 0),
    ("max_store_mb 0: every eligible unit", [1 * MB, 1 * MB], 0.5, 0.0, 1),
]


@pytest.mark.parametrize("name, sizes, planned, max_mb, taken", COVERING, ids=[c[0] for c in COVERING])
def test_the_budget_takes_the_oldest_units_whose_text_covers_the_excess(name, sizes, planned, max_mb, taken):
    from hermes_admin.profile.lineage import Unit

    units = [Unit(f"s{i}", [f"s{i}"]) for i in range(len(sizes))]
    pulled = []

    def offered():  # as the pass offers them: read a part at a time, only as far as the decision asks
        for unit, size in zip(units, sizes):
            pulled.append(unit)
            yield unit, size

    assert budget.covering(offered(), planned, max_mb) == units[:taken]
    assert len(pulled) <= taken + 1  # one more read, to see that the excess is covered


def _store(root, now, sessions=120):
    store = SynthStore(root / "state.db", version=30)
    for i in range(sessions):  # one a day, a few hundred KB each
        sid = f"s{i:03d}"
        store.session(sid, started=now - (i + 1) * DAY, ended=now - (i + 1) * DAY + 60, end_reason="x")
        store.messages(sid, 20, now - (i + 1) * DAY, text="tool output line " * 600)
    store.session("open_old", started=now - 200 * DAY, source="telegram")
    store.messages("open_old", 20, now - 200 * DAY, text="chat " * 2000)
    store.close()


def _used_mb(db):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count",
                                                                                   "page_size"))
        return (pages - free) * size / 1e6
    finally:
        conn.close()


def test_run_purges_the_oldest_until_the_store_fits(tmp_path, now, invoke):
    root = tmp_path / "h"
    _store(root, now)
    db = root / "state.db"
    total = _used_mb(db)
    limit = round(total / 2, 1)
    (root / "admin.yaml").write_text(yaml.safe_dump({"defaults": {"max_store_mb": limit, "retention_days": 365}}))
    dry = invoke("--root", str(root), "--config", str(root / "admin.yaml"), "run", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    would = {d["session_id"] for r in json.loads(dry.stdout)["results"] if r["task"] == "size_budget" for d in r["done"]}
    assert would and all(int(s[1:]) >= 7 for s in would)
    done = invoke("--root", str(root), "--config", str(root / "admin.yaml"), "run", "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    task = next(r for r in json.loads(done.stdout)["results"] if r["task"] == "size_budget")
    assert task["reason"] == "prune" and task["rows"] > 0
    left = row_ids(db)
    gone = {f"s{i:03d}" for i in range(120)} - left
    assert gone == would  # what the dry run said
    assert 30 < len(gone) < 113  # the excess covered, not every eligible unit
    assert gone and min(int(s[1:]) for s in gone) > max(int(s[1:]) for s in left if s.startswith("s"))  # oldest went
    assert "open_old" in left and {f"s{i:03d}" for i in range(7)} <= left


def test_a_budget_that_cannot_be_met_says_by_how_much(tmp_path, now, invoke):
    root = tmp_path / "h"
    _store(root, now, sessions=10)
    (root / "admin.yaml").write_text(yaml.safe_dump({"defaults": {"max_store_mb": 0.01, "min_keep_days": 30}}))
    done = invoke("--root", str(root), "--config", str(root / "admin.yaml"), "run", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stderr
    task = next(r for r in json.loads(done.stdout)["results"] if r["task"] == "size_budget")
    assert task["rows"] == 0 and any("still over max_store_mb" in n for n in task["notes"])
    assert len(row_ids(root / "state.db")) == 11


def test_how_far_over_the_budget_is_said_in_a_unit_that_shows_it():
    """`by 0.0 MB` said nothing: under 0.1 MB the figure is in kB."""
    from hermes_admin.profile.actions.maintenance import _megabytes

    assert (_megabytes(2.345), _megabytes(0.1), _megabytes(0.0421), _megabytes(0.0001)) == \
        ("2.3 MB", "0.1 MB", "42 kB", "1 kB")

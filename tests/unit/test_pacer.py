"""The paced write, alone: what it returns, what it counts, what follows a commit, and the named
fault points it passes."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_admin.profile.engine import faults, pacer as pacer_module
from hermes_admin.profile.engine.fts_merges import FtsMerges
from hermes_admin.profile.engine.group_commit import GroupCommit
from hermes_admin.profile.engine.pacer import Held, Pace, Pacer
from hermes_admin.profile.engine.turns import Turns
from hermes_admin.profile.store.connect import open_readwrite
from hermes_admin.results import Result


@pytest.fixture
def pacer(tmp_path):
    sqlite3.connect(tmp_path / "state.db").close()  # a store exists before we open it: we never make one
    db = open_readwrite(tmp_path / "state.db")
    db.execute_sql("CREATE TABLE t (x INTEGER)")
    released = []
    made = Pacer(db, Turns(db, sleep=lambda s: None), GroupCommit(db, None), FtsMerges(db, []),
                 lambda work, result: released.append(work))
    made.released = released
    yield made
    db.close()


def result() -> Result:
    return Result("p", "delete", "prune", False)


def test_a_write_returns_what_it_held_and_counts_it(pacer):
    into = result()
    held = pacer.write(lambda db: db.rows_affected(db.execute_sql("INSERT INTO t VALUES (1)")), 10_000, into, "one row")
    assert isinstance(held, Held) and held.value == 1 and held.held_s >= 0
    assert into.transactions == 1 and into.longest_write == "one row"
    assert pacer.released == [[None]]  # outside WAL mode every commit is durable at once


def test_the_budget_follows_the_weight_it_is_given(pacer):
    before = pacer.budget
    pacer.write(lambda db: None, 10**9, result(), "heavy")  # a huge weight held the lock no time at all
    assert pacer.budget >= before
    assert pacer.pace() == Pace(pacer.budget, pacer.s_per_weight, pacer.hold_target())


def test_a_hold_alone_is_not_counted_until_it_is_settled(pacer):
    """A caller that keeps a record of what committed (a split's steps) holds, records, then settles;
    one whose work found it must not write settles nothing."""
    into = result()
    held = pacer.hold(lambda db: "changed meanwhile")
    assert held.value == "changed meanwhile" and into.transactions == 0 and pacer.released == []
    pacer.settle(pacer.hold(lambda db: None), 100, into, "a step")
    assert into.transactions == 1 and pacer.released == [[None]]


def test_a_rolled_back_write_raises_and_writes_nothing(pacer):
    def fails(db):
        db.execute_sql("INSERT INTO t VALUES (2)")
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        pacer.hold(fails)
    assert pacer.db.execute_sql("SELECT COUNT(*) FROM t").fetchone()[0] == 0


def test_follow_none_leaves_the_commit_and_the_turn_to_the_caller(pacer):
    into = result()
    held = pacer.write(lambda db: None, 100, into, "a last step", follow=None)
    assert pacer.released == [] and into.transactions == 1
    pacer.committed(False, True, ("paths", "events"), into)
    pacer.turn(held)
    assert pacer.released == [[("paths", "events")]]


def test_a_measured_commit_passes_the_after_commit_point(pacer):
    seen = []
    with faults.armed("after_commit", lambda: seen.append(1)):
        pacer.write(lambda db: None, 100, result(), "measured")
        pacer.write(lambda db: None, None, result(), "counted only")
    pacer.write(lambda db: None, 100, result(), "disarmed")
    assert seen == [1]


def test_a_unit_too_big_for_one_transaction(monkeypatch):
    monkeypatch.setattr(pacer_module, "SPLIT_AT_S", 0.050)
    pace = Pace(budget=1000, s_per_weight=1e-5, hold_target=0.020)
    assert not pace.too_big(1000)  # within the budget
    assert not pace.too_big(2000)  # over it, but 20 ms: under the 30 ms a transaction may run
    assert pace.too_big(4000)  # 40 ms


def test_an_armed_point_can_raise():
    with faults.armed("before_delivery", raise_=KeyboardInterrupt()):
        with pytest.raises(KeyboardInterrupt):
            faults.point("before_delivery", events=[])
    faults.point("before_delivery", events=[])  # disarmed: nothing

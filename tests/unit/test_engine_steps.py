"""The engine built directly on a synthetic store: a dry run is the real run's decision, made in a
read transaction and not applied, so it reports what the run then does (docs/design.md §5)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_admin.model import Profile
from hermes_admin.profile import exports
from hermes_admin.profile.engine import decisions
from hermes_admin.profile.engine.engine import Engine
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store.read import SessionRow
from hermes_admin.profile.store.row_updates import ArchiveState
from hermes_admin.synth.builder import SynthStore
from tests.helpers import row_ids

DAY = 86400.0


@pytest.fixture(params=["wal", "delete"])
def profile(request, tmp_path):
    """Four ended sessions, one with a child, in WAL and in a rollback journal."""
    now = time.time()
    store = SynthStore(tmp_path / "h" / "state.db", version=30, journal=request.param)
    for sid in ("a", "b", "c", "d"):
        store.session(sid, started=now - 100 * DAY, ended=now - 100 * DAY + 60, end_reason="done")
        store.messages(sid, 3, now - 100 * DAY)
    store.session("a-child", started=now - 99 * DAY, ended=now - 99 * DAY + 60, end_reason="done", parent="a")
    store.close()
    return Profile(tmp_path / "h", "default", tmp_path / "h")


def _report(result) -> tuple[list, list]:
    return ([(d.session_id, tuple(d.ids)) for d in result.done],
            sorted((s["session_id"], s["why"]) for s in result.skipped))


def _not_c(unit: Unit, rows: dict[str, SessionRow]) -> str | None:
    return "no longer chosen" if unit.session_id == "c" else None


UNITS = [Unit("a", ["a", "a-child"], "old"), Unit("b", ["b"], "old"), Unit("c", ["c"], "old"),
         Unit("gone", ["gone"], "old")]


def test_a_dry_run_delete_reports_what_the_delete_then_does(profile):
    with Engine(profile, dry_run=True) as engine:
        dry = engine.delete(UNITS, "retention", recheck=_not_c)
    assert row_ids(profile.store_path) == {"a", "a-child", "b", "c", "d"}  # a dry run wrote nothing
    with Engine(profile) as engine:
        real = engine.delete(UNITS, "retention", recheck=_not_c)
    assert _report(dry) == _report(real)
    assert sorted(_report(real)[0]) == [("a", ("a", "a-child")), ("b", ("b",))]
    assert _report(real)[1] == [("c", "no longer chosen"), ("gone", "gone already")]
    assert row_ids(profile.store_path) == {"c", "d"}
    assert dry.transactions == 0 and real.transactions >= 1


def test_a_dry_run_archive_and_close_report_what_the_run_then_does(profile):
    conn = sqlite3.connect(profile.store_path)
    conn.execute("UPDATE sessions SET archived = 1 WHERE id = 'b'")
    conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id IN ('c', 'd')")
    conn.commit(), conn.close()
    archive = [Unit("a", ["a", "a-child"]), Unit("b", ["b"])]
    close = [Unit("c", ["c"]), Unit("d", ["d"])]
    still_open = lambda unit, rows: None if rows[unit.session_id].ended_at is None else "closed already"
    with Engine(profile, dry_run=True) as engine:
        dry = _report(engine.set_archived(archive, True, "archived")), _report(engine.close_stale(close, still_open, 1.0))
    with Engine(profile) as engine:
        real = _report(engine.set_archived(archive, True, "archived")), _report(engine.close_stale(close, still_open, 1.0))
    assert dry == real == (([("a", ("a", "a-child"))], []), ([("c", ("c",)), ("d", ("d",))], []))
    assert row_ids(profile.store_path, "SELECT id FROM sessions WHERE archived = 1") == {"a", "a-child", "b"}
    assert row_ids(profile.store_path, "SELECT id FROM sessions WHERE ended_at IS NULL") == set()


def test_a_dry_runs_later_steps_read_the_rows_its_close_would_have_closed(profile):
    """A task after the close (the size budget) re-checks rows the run has closed by then: the dry
    run, which closes nothing, decides as if it had, so it predicts the run."""
    conn = sqlite3.connect(profile.store_path)
    conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = 'd'")
    conn.commit(), conn.close()
    still_open = lambda unit, rows: None if rows[unit.session_id].ended_at is None else "closed already"
    ended = lambda unit, rows: None if rows[unit.session_id].ended_at is not None else "still open"
    reports = []
    for dry_run in (True, False):
        with Engine(profile, dry_run=dry_run) as engine:
            engine.close_stale([Unit("d", ["d"])], still_open, 1.0)
            reports.append(_report(engine.delete([Unit("d", ["d"])], "budget", recheck=ended)))
    assert reports[0] == reports[1] == ([("d", ("d",))], [])
    assert "d" not in row_ids(profile.store_path)


def test_a_dry_run_holds_no_read_transaction_between_its_steps(profile, monkeypatch):
    """A reader holds off Hermes' commits in a rollback journal: each decision's read ends with it."""
    from hermes_admin.profile.engine import engine as engine_module
    seen = []
    with Engine(profile, dry_run=True) as engine:
        def decide(db, chunk):
            seen.append(db.in_transaction())
            return decisions.to_close(chunk, {}, {}, lambda unit, rows: None)
        monkeypatch.setattr(engine_module, "units_by_count", lambda budget, weight: 1)
        engine._dry([Unit("a", ["a"]), Unit("b", ["b"])], engine_module.Result("default", "close", None, True), decide)
        assert seen == [True, True] and not engine.store.db.in_transaction()


# -- what the engine's collaborators say, and what a failure leaves to the caller -------------------

def test_each_collaborator_says_what_it_set_aside_and_the_engine_gathers_them(profile):
    """A folder where our lock file goes and a damaged outbox: each is moved aside by the one that
    owns the file (the locks, the outbox), said in its own notes, and the engine, closed, gathers them."""
    ours = profile.home / ".hermes-admin"
    (ours / "lock").mkdir(parents=True)
    (ours / "outbox.db").write_bytes(b"not a database, whatever it once was" * 200)
    engine = Engine(profile)
    engine.open()
    assert [len(engine.locks.notes), len(engine.outbox.notes)] == [1, 1]
    closed = engine.close()
    lock_note, outbox_note = closed.notes
    assert engine.close() is closed  # closed once: a second call says what the first did
    assert str(ours / "lock") in lock_note and "where a lock file goes" in lock_note
    assert str(ours / "outbox.db") in outbox_note and "damaged" in outbox_note
    assert (ours / "lock").is_file() and (ours / "outbox.db").is_file()  # the names are free again, and used
    assert len(list(ours.glob("*.set-aside-*"))) == 2  # kept for inspection


def test_what_was_set_aside_is_said_even_when_closing_fails(profile):
    """Closing the store fails (a disk gone): what was set aside is gathered all the same."""
    (profile.home / ".hermes-admin" / "lock").mkdir(parents=True)
    engine = Engine(profile).__enter__()

    def broken() -> None:
        raise OSError(5, "Input/output error")

    engine.store.close, store = broken, engine.store
    with pytest.raises(OSError):
        engine.close()
    notes = engine.close().notes  # what the close that failed did, said again
    assert len(notes) == 1 and "where a lock file goes" in notes[0]
    store.db.close()


def test_what_committed_before_an_error_is_reported_from_the_callers_own_result(profile):
    """The engine remembers no result: the caller's ledger holds the one under way, which a part that
    failed after another committed reports with what did commit and what stopped it."""
    from hermes_admin.profile.actions.common import Ledger, act_in_parts, with_engine
    from hermes_admin.profile.environment import Environment
    from hermes_admin.results import Result, Run

    run, ledger = Run(dry_run=False), Ledger()

    def act(units: list[Unit], engine: Engine) -> Result:
        if units[0].session_id == "b":
            raise OSError(5, "Input/output error", str(profile.store_path))
        return engine.delete(units, "retention")

    def work(engine: Engine) -> list[Result]:
        with ledger.begun(Result(profile.name, "delete", "retention", False, task="purge")) as result:
            act_in_parts(engine, result, [UNITS[:1], UNITS[1:2]], lambda units: act(units, engine))
        return ledger.results

    with_engine(run, profile, Environment(), work, ledger=ledger)
    (result,) = run.results
    assert _report(result) == ([("a", ("a", "a-child"))], [])
    assert result.notes == ["stopped by: OSError: [Errno 5] Input/output error: " + repr(str(profile.store_path))]
    assert any("Input/output error" in line for line in run.errors)
    assert row_ids(profile.store_path) == {"b", "c", "d"}


def test_a_delete_that_fails_after_a_commit_carries_what_committed(profile, monkeypatch):
    """One unit a transaction: the second fails. The failure carries what the first committed (its
    partial outcome), its own error inside as it was, and the first unit's file is removed all the same."""
    import functools

    from hermes_admin.profile.engine import Interrupted, export_ahead, packing

    (profile.home / "sessions").mkdir(exist_ok=True)
    (profile.home / "sessions" / "session_a.json").write_text("{}")
    (profile.home / "sessions" / "session_b.json").write_text("{}")
    monkeypatch.setattr(export_ahead, "next_transaction", functools.partial(packing.next_transaction, max_units=1))
    with Engine(profile) as engine:
        real, calls = engine.deletes.in_transaction, []

        def second_fails(db, chunk, *rest):
            calls.append(chunk[0].session_id)
            if len(calls) == 2:
                raise OSError(28, "No space left on device")
            return real(db, chunk, *rest)

        monkeypatch.setattr(engine.deletes, "in_transaction", second_fails)
        with pytest.raises(Interrupted) as failed:
            engine.delete(UNITS[:2], "retention")
    assert isinstance(failed.value.failure, OSError) and "No space" in str(failed.value.failure)
    result = failed.value.partial
    assert _report(result) == ([("a", ("a", "a-child"))], [])
    assert [Path(p).name for p in result.files_removed] == ["session_a.json"]
    assert sorted(os.listdir(profile.home / "sessions")) == ["session_b.json"]
    assert row_ids(profile.store_path) == {"b", "c", "d"}


# -- the decisions alone: pure functions of the rows a transaction read ---------------------------

@pytest.mark.parametrize("orphans, fresh, blocked, expected", [
    (False, {"a", "x"}, {}, ({0: ("a", "x")}, {})),
    (False, {"a"}, {}, ({0: ("a",)}, {})),  # a member gone already: the rest goes
    (False, set(), {}, ({}, {0: "gone already"})),
    (False, {"a", "x"}, {"x": "a live turn lease"}, ({}, {0: "a live turn lease"})),
    (True, set(), {}, ({0: ("a", "x")}, {})),  # orphans: their session rows are gone
    (True, {"x"}, {}, ({}, {0: "its session row exists again"})),
])
def test_which_units_a_delete_takes(orphans, fresh, blocked, expected):
    decision = decisions.to_delete([Unit("a", ["a", "x"])], dict.fromkeys(fresh), blocked, None, orphans)
    assert (dict(decision.changes), dict(decision.kept)) == expected


@pytest.mark.parametrize("archived, provenance, swept, states, held, expected", [
    (True, False, False, {"a": (0, None), "x": (1, None)}, {}, ({0: ("a",)}, {}, ())),
    (False, False, False, {"a": (0, None), "x": (1, None)}, {}, ({0: ("x",)}, {}, ())),
    (True, True, False, {"a": (1, 1), "x": (1, 0)}, {}, ({}, {}, ("a",))),  # claimed: a deliberate archive
    (True, True, True, {"a": (1, 1), "x": (0, 0)}, {}, ({0: ("x",)}, {}, ())),  # swept: nothing claimed
    (True, True, True, {"a": (0, 0), "x": (0, 0)}, {"x": "live"}, ({}, {0: "live"}, ())),
])
def test_which_rows_an_archive_flips(archived, provenance, swept, states, held, expected):
    decision = decisions.to_flip([Unit("a", ["a", "x"])], {k: ArchiveState(*v) for k, v in states.items()}, held,
                                 archived, provenance, swept)
    assert (dict(decision.changes), dict(decision.kept), decision.claimed) == expected


def test_a_stop_is_the_results_own_field_said_once_after_its_notes(profile, monkeypatch):
    """A stop request between transactions ends the call; what it cut short is the result's `stop`,
    which a caller may say anew for a whole task, never found again among the notes by its text."""
    from hermes_admin import stopping
    from hermes_admin.results import Result

    with Engine(profile) as engine:
        monkeypatch.setattr(stopping, "requested", lambda: True)
        result = engine.delete(UNITS[:2], "retention")
    assert not result.done and result.notes == []
    assert result.stop.startswith("stopped on request: 2 of the 2 unit(s)")
    assert result.said() == [result.stop] and result.as_dict()["notes"] == [result.stop]
    task = Result(profile.name, "delete", "retention", False, notes=["a note"])
    task.absorb(result)
    assert task.said() == ["a note", result.stop]


def test_fold_reports_what_a_failed_call_did_then_raises_its_own_error():
    """An engine call returns what it did; failing, it carries it (Interrupted): `fold` puts it in the
    caller's report and raises the failure as it was, so the caller's handling of its type is kept."""
    from hermes_admin.profile.engine import Interrupted, fold
    from hermes_admin.profile.engine.outcomes import carried
    from hermes_admin.results import Done, Result

    task = Result("default", "delete", "retention", False, task="purge")

    def call() -> Result:
        with carried(Result("default", "delete", "retention", False)) as outcome:
            outcome.done.append(Done("a", ("a",), "old"))
            outcome.transactions += 1
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space") as raised:
        fold(task, call)
    assert not isinstance(raised.value, Interrupted)
    assert [d.session_id for d in task.done] == ["a"] and task.transactions == 1
    done = fold(task, lambda: Result("default", "delete", "retention", False, transactions=2))
    assert done.transactions == 2 and task.transactions == 3


@pytest.mark.parametrize("first_batch", [8, 1])  # the coming units in one batch, or in two (b | c d)
@pytest.mark.parametrize("then, reason, twice", [
    (lambda units: units, "retention", set()),  # as said
    (lambda units: units[::-1], "retention", set()),  # in another order (its rowids read again)
    (lambda units: units[1:], "retention", set()),  # one of them gone meanwhile: exported, and kept
    (lambda units: units[:1], "retention", set()),  # the others gone: a batch of none of its units let go
    (lambda units: units, "budget", {"b", "c", "d"}),  # asked otherwise: those exports let go (begun or
])                                                      # cancelled before they began), not used
def test_the_next_parts_first_exports_are_taken_by_the_delete_that_holds_their_units(profile, monkeypatch, first_batch,
                                                                                      then, reason, twice):
    from hermes_admin.profile.engine import export_ahead
    monkeypatch.setattr(export_ahead, "FIRST_EXPORT_UNITS", first_batch)
    first, coming = [Unit("a", ["a", "a-child"], "old")], [Unit(s, [s], "old") for s in ("b", "c", "d")]

    def two_parts():
        engine.coming(coming)  # as act_in_parts says it, before the part in hand is acted on
        engine.delete(first, "retention")
        engine.coming([])
        engine.delete(then(coming), reason)

    with Engine(profile) as engine:
        engine.batched(two_parts)
    exported = [(unit[0], member["reason"]) for export in (profile.home / ".hermes-admin" / "exports").glob(
                f"*{exports.SUFFIX}") for member in exports.load_manifest(export)["members"] for unit in member["units"]]
    sids = [sid for sid, _ in exported]
    assert {sid for sid in sids if sids.count(sid) > 1} <= twice  # a wrong word costs an export, at most
    # every unit exported, as the delete that took it was asked, before it went
    assert {("a", "retention")} | {(u.session_id, reason) for u in then(coming)} <= set(exported)
    assert row_ids(profile.store_path) == {u.session_id for u in coming} - {u.session_id for u in then(coming)}

"""Units too big for one transaction: exported first, deleted in steps, restored when they change,
finished or restored after a crash, and put back by `restore`, byte for byte."""

from __future__ import annotations

import hashlib
import json
import time
import os
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_admin.profile.engine import faults
from hermes_admin.profile.engine import pacer as pacer_module
from hermes_admin.profile.exports import load_manifest
from hermes_admin.profile.engine.turns import Turns
from hermes_admin.synth.builder import SynthStore
from tests.conftest import fts_problems
from tests.helpers import engine_steps, events, install_plugins, own_interpreter, row_ids, someone_about

DAY = 86400.0
WORDS = [f"w{n}" for n in range(400)] + ["the", "and", "error", "file", "def", "return"]


def text(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(size // 5))[:size]


@pytest.fixture
def store(tmp_path, now):
    """A default profile: one old lineage of 240 big messages with a delegate, three small old ones,
    one recent one; the recorder plugin listens."""
    return build(tmp_path, now, "wal")


@pytest.fixture(params=["wal", "delete"])
def either_store(request, tmp_path, now):
    """The same, in WAL and in a rollback journal (Hermes 0.20+ on a SQLite before 3.51.3)."""
    return build(tmp_path, now, request.param)


def build(tmp_path, now, journal):
    root = tmp_path / "hermes"
    rng = random.Random(7)
    synth = SynthStore(root / "state.db", 30, journal=journal)
    old = now - 200 * DAY
    synth.session("big", started=old, ended=old + 3600, end_reason="user_exit", system_prompt="you are hermes")
    for i in range(240):
        synth.conn.execute(
            "INSERT INTO messages(session_id, role, content, tool_calls, timestamp) VALUES (?, ?, ?, ?, ?)",
            ("big", "assistant" if i % 2 else "tool", text(rng, rng.randint(2000, 9000)),
             json.dumps([{"id": f"call_{i}", "function": {"name": "terminal", "arguments": "{}"}}]) if i % 2 else None,
             old + i))
    synth.usage("big", when=old)
    synth.session("big-child", started=old + 10, ended=old + 20, end_reason="user_exit", parent="big",
                  delegate_from="big")
    synth.messages("big-child", 30, old + 10, 1, text="delegate work")
    for n in range(3):
        synth.session(f"small-{n}", started=old, ended=old + 60, end_reason="user_exit")
        synth.messages(f"small-{n}", 4, old, 1)
    synth.session("recent", started=now - DAY, ended=now - DAY + 60, end_reason="user_exit")
    synth.messages("recent", 4, now - DAY, 1)
    synth.close()
    for sid in ("big", "small-0"):
        (root / "sessions" / f"{sid}.jsonl").write_text("{}\n")
    install_plugins(root, ["recorder"], enabled=["recorder"], timeout=10)
    return root


@pytest.fixture
def invoke(invoke, tmp_path):
    """The CLI with plugins run in hermes-admin's own interpreter on purpose (no Hermes here)."""
    own = own_interpreter(tmp_path)

    def run(*args, **kwargs):
        return invoke(*(args if "--config" in args else (*own, *args)), **kwargs)
    return run


@pytest.fixture
def small_steps(monkeypatch):
    """Transactions of a few messages (on a clock of the test's, not the wall's): the big lineage
    goes in the same steps on any machine, 36 of them."""
    engine_steps(monkeypatch, 40_000)


def contents(db: Path, sids=("big", "big-child")) -> dict[int, str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {i: hashlib.sha256((c or "").encode()).hexdigest() + str(t) for i, c, t in conn.execute(
            f"SELECT id, content, tool_calls FROM messages WHERE session_id IN ({','.join('?' * len(sids))})", sids)}
    finally:
        conn.close()


def purge(invoke, root, *more):
    return invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json", *more)


def only_export(root: Path) -> Path:
    (path,) = (root / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    return path


def test_a_big_unit_goes_in_short_steps_with_one_event_and_comes_back_byte_identical(store, invoke, small_steps):
    db = store / "state.db"
    before = contents(db)
    result = purge(invoke, store)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    (res,) = [r for r in doc["results"] if r["task"] == "purge"]
    assert res["transactions"] > 10  # the lineage alone took many steps (36: small_steps)
    assert row_ids(db) == {"recent"}
    assert not row_ids(db, "SELECT DISTINCT session_id FROM messages") - {"recent"}
    gone = [e for e in events(store) if e["session_id"] == "big"]
    assert len(gone) == 1 and sorted(gone[0]["deleted_ids"]) == ["big", "big-child"]
    assert not (store / "sessions" / "big.jsonl").exists()
    assert fts_problems(db) == []
    outbox = sqlite3.connect(store / ".hermes-admin" / "outbox.db")
    assert outbox.execute("SELECT COUNT(*) FROM splits").fetchone()[0] == 0

    back = invoke("--root", str(store), "restore", str(only_export(store)), "--yes", "--json")
    assert back.exit_code == 0, back.stderr
    assert row_ids(db) == {"recent", "big", "big-child", "small-0", "small-1", "small-2"}
    assert contents(db) == before
    assert fts_problems(db) == []
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("SELECT COUNT(*) FROM session_model_usage WHERE session_id='big'").fetchone()[0] == 1
    assert conn.execute("SELECT parent_session_id FROM sessions WHERE id='big-child'").fetchone()[0] == "big"
    conn.close()

    again = invoke("--root", str(store), "restore", str(only_export(store)), "--yes", "--json")
    skipped = json.loads(again.stdout)["results"][0]["skipped"]
    assert {s["session_id"] for s in skipped} == {"big", "big-child", "small-0", "small-1", "small-2"}
    assert all("exists" in s["why"] for s in skipped)


def test_a_unit_that_changes_between_steps_is_restored_and_kept(store, invoke, small_steps, monkeypatch):
    db = store / "state.db"
    before = contents(db)
    original = Turns.after_commit
    calls = [0]

    def hermes_writes_meanwhile(self, committed_at, held_s):
        calls[0] += 1
        if calls[0] == 5:  # between two steps of the big lineage: a live Hermes appends to it
            conn = sqlite3.connect(db, timeout=5)
            conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES ('big', 'user', 'back', 1)")
            conn.commit()
            conn.close()
        return original(self, committed_at, held_s)

    monkeypatch.setattr(Turns, "after_commit", hermes_writes_meanwhile)
    result = purge(invoke, store)
    assert result.exit_code == 1, result.stderr  # a unit skipped is a warning
    (res,) = [r for r in json.loads(result.stdout)["results"] if r["task"] == "purge"]
    (kept,) = [s for s in res["skipped"] if s["session_id"] == "big"]
    assert "a new message arrived" in kept["why"] and "restored" in kept["why"]
    assert {"big", "big-child"} <= row_ids(db)
    now_there = contents(db)
    assert {k: v for k, v in now_there.items() if k in before} == before  # every old message, byte for byte
    assert len(now_there) == len(before) + 1
    assert [e for e in events(store) if e["session_id"] == "big"] == []
    assert (store / "sessions" / "big.jsonl").exists()
    assert fts_problems(db) == []


CRASHER = textwrap.dedent("""
    import itertools, os, sys
    from hermes_admin.profile.engine import engine, faults, outbox, pacer, turns
    # small_steps' pacing (tests/helpers.py: engine_steps): the same 36 steps on any machine
    readings = itertools.count()
    pacer.MIN_WEIGHT = 40_000
    class Ticked(turns.Turns):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, clock=lambda: next(readings) * 0.05, **kwargs)

    engine.Turns = Ticked
    point, after = sys.argv[1], int(sys.argv[2])
    seen = [0]

    def count():
        seen[0] += 1
        if seen[0] >= after:
            os._exit(9)  # as kill -9: no cleanup of any kind

    if point == "step":  # between steps: after the n-th step committed
        faults.arm("after_commit", count)
    elif point == "inside":  # inside a step's transaction, before its commit
        faults.arm("split_step_deleted", count)
    elif point == "begun":  # the split recorded, no step yet
        original = outbox.Outbox.begin_split
        def begin(self, record):
            original(self, record)
            os._exit(9)
        outbox.Outbox.begin_split = begin
    elif point == "settle":  # the last step committed, the outbox not told
        original = outbox.Outbox.settle
        def settle(self, committed, dropped):
            if committed:
                os._exit(9)
            return original(self, committed, dropped)
        outbox.Outbox.settle = settle
    sys.argv = ["hermes-admin", *sys.argv[3:]]
    from hermes_admin.cli.main import main
    main()
""")


def crash(root: Path, tmp_path: Path, point: str, after: int) -> int:
    env = dict(os.environ, HOME=str(tmp_path / "home"), HERMES_HOME="", HERMES_ADMIN_CONFIG="",
               XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    done = subprocess.run([sys.executable, "-c", CRASHER, point, str(after), "--root", str(root), "purge",
                           "--older-than", "90", "--yes"], env=env, capture_output=True, text=True, timeout=120)
    return done.returncode


@pytest.mark.parametrize("point,after", [("begun", 1), ("step", 3), ("step", 15), ("inside", 2),
                                                ("inside", 12), ("settle", 1)])
def test_a_crash_during_a_split_is_finished_by_the_next_run(store, invoke, tmp_path, point, after):
    db = store / "state.db"
    before = contents(db)
    assert crash(store, tmp_path, point, after) == 9
    assert "big" in row_ids(db) or not contents(db)  # whole, or its rows all gone
    result = purge(invoke, store)
    assert result.exit_code == 0, result.stderr
    assert row_ids(db) == {"recent"}
    assert contents(db) == {}
    assert len([e for e in events(store) if e["session_id"] == "big"]) == 1  # announced exactly once
    assert not (store / "sessions" / "big.jsonl").exists()
    assert fts_problems(db) == []
    exports = sorted((store / ".hermes-admin" / "exports").glob("*.jsonl.gz"))
    for path in exports:  # everything deleted is in some export of the two runs
        invoke("--root", str(store), "restore", str(path), "--yes")
    assert contents(db) == before
    assert fts_problems(db) == []


def test_a_crashed_split_whose_unit_changed_is_restored_by_the_next_run(store, invoke, tmp_path):
    db = store / "state.db"
    before = contents(db)
    assert crash(store, tmp_path, "step", 4) == 9
    assert len(contents(db)) < len(before)  # half-deleted
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET pinned = 1 WHERE id = 'big'")  # pinned meanwhile: it must stay
    conn.commit()
    conn.close()
    result = invoke("--root", str(store), "sessions", "list", "--json")  # a read never finishes anything
    assert len(contents(db)) < len(before)
    result = purge(invoke, store)
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    resumed = [r for r in doc["results"] if r["task"] == "resume"]
    assert resumed and "changed" in resumed[0]["skipped"][0]["why"]
    assert contents(db) == before
    assert [e for e in events(store) if e["session_id"] == "big"] == []
    assert fts_problems(db) == []


def test_an_export_that_cannot_be_written_stops_the_deletes_before_any(store, invoke):
    exports = store / ".hermes-admin" / "exports"
    exports.parent.mkdir(exist_ok=True)
    exports.write_text("a file where the folder belongs")
    result = purge(invoke, store)
    assert result.exit_code == 2
    assert str(exports) in result.stderr and "no session of this profile was deleted" in result.stderr
    assert {"big", "small-0", "small-1", "small-2"} <= row_ids(store / "state.db")


def test_export_dir_and_keep_days(store, invoke, tmp_path, now):
    elsewhere = tmp_path / "exports-elsewhere"
    result = purge(invoke, store, "--export-dir", str(elsewhere))
    assert result.exit_code == 0, result.stderr
    (path,) = elsewhere.glob("*.jsonl.gz")
    assert (path.stat().st_mode & 0o777) == 0o600 and (elsewhere.stat().st_mode & 0o777) == 0o700
    listed = invoke("--root", str(store), "exports", "list", "--export-dir", str(elsewhere), "--json")
    (item,) = json.loads(listed.stdout)["exports"]
    assert item["sessions"] == 5 and item["units"] == 4 and item["reasons"] == ["prune"]
    assert item["messages"] == 240 + 30 + 12
    # restore needs the profile named when the file is not in its default folder
    refused = invoke("--root", str(store), "restore", str(path), "--yes")
    assert refused.exit_code == 2 and "-p" in refused.stderr  # a usage error (64 from the console script)
    assert invoke("--root", str(store), "restore", str(path), "-p", "default", "--session", "small-1",
                  "--yes").exit_code == 0
    assert "small-1" in row_ids(store / "state.db") and "big" not in row_ids(store / "state.db")

    # as if begun 8 days ago: its name's stamp and its manifest's `created`
    old = path.with_name(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now - 8 * DAY)) + path.name[16:])
    path.rename(old)
    Path(str(path) + ".json").rename(str(old) + ".json")
    path, manifest = old, Path(str(old) + ".json")
    doc = load_manifest(path)
    doc["created"] = now - 8 * DAY
    manifest.write_text(json.dumps(doc))
    invoke("--root", str(store), "purge", "--older-than", "90", "--yes", "--export-dir", str(elsewhere))
    assert not path.exists() and not manifest.exists()  # past export_keep_days (7): pruned


def test_keep_days_zero_exports_only_what_is_split(store, invoke, small_steps):
    (store / "config.yaml").write_text((store / "config.yaml").read_text() + "\n")
    config = tmp = store.parent / "admin.yaml"
    config.write_text("defaults:\n  export_keep_days: 0\nhermes_python: hermes-admin\n")
    result = invoke("--root", str(store), "--config", str(tmp), "purge", "--older-than", "90", "--yes")
    assert result.exit_code == 0, result.stderr
    assert list((store / ".hermes-admin" / "exports").glob("*.jsonl.gz")) == []  # done, so not kept


def test_a_dry_run_exports_nothing(store, invoke):
    result = invoke("--root", str(store), "purge", "--older-than", "90", "--dry-run")
    assert result.exit_code == 0
    assert not (store / ".hermes-admin" / "exports").exists()


def test_restore_of_a_missing_or_foreign_file_is_one_error_line(store, invoke, tmp_path):
    missing = store / ".hermes-admin" / "exports" / "nope.jsonl.gz"
    result = invoke("--root", str(store), "restore", str(missing), "--yes")
    assert result.exit_code == 2 and str(missing) in result.stderr and "Traceback" not in result.stderr
    other = tmp_path / "other"
    other.mkdir()
    assert purge(invoke, store, "--export-dir", str(other)).exit_code == 0
    (path,) = other.glob("*.jsonl.gz")
    manifest = Path(str(path) + ".json")
    doc = load_manifest(path)
    doc["home"] = "/somewhere/else"
    manifest.write_text(json.dumps(doc))
    result = invoke("--root", str(store), "restore", str(path), "-p", "default", "--yes")
    assert result.exit_code == 2 and "not of this one" in result.stderr
    assert "small-0" not in row_ids(store / "state.db")


# Every point after a step of a split has committed where something can fail: the step recorded
# (committed), measured (after_commit), the lock about to be left free (before_turn), the version
# read that tells whether Hermes wrote meanwhile (data_version), an FTS merge step after it.
AFTER_A_STEP = ["committed", "after_commit", "before_turn", "data_version", "merge"]


@pytest.mark.parametrize("point,beside", [(point, beside) for point in AFTER_A_STEP for beside in ("nobody", "a holder")
                                          if point != "merge" or beside == "a holder"])  # merge steps: beside somebody
def test_a_failure_after_a_step_committed_loses_no_row_of_the_kept_conversation(either_store, invoke, small_steps,
                                                                                 monkeypatch, point, beside):
    """Either way of pacing: alone where the store is known free, careful beside a holder."""
    store = either_store
    if beside == "a holder":
        someone_about(monkeypatch)
    db = store / "state.db"
    before = contents(db)
    monkeypatch.setattr(faults, "_armed", {})  # whatever is armed here is disarmed after the test
    seen = {"steps": 0, "hits": 0}

    def step(**_):
        seen["steps"] += 1

    def fail(**_):
        if seen["steps"] >= 3:  # the third step has committed (its messages are gone from the store)
            seen["hits"] += 1
            if seen["hits"] == 1:
                raise sqlite3.OperationalError("disk I/O error (on purpose)")

    faults.arm("split_step_deleted", step)
    if point == "merge":
        someone_about(monkeypatch)  # merge steps of ours are taken only beside another holder or writer
        original = pacer_module.Pacer._merge_step
        monkeypatch.setattr(pacer_module.Pacer, "_merge_step", lambda self, *a: (fail(), original(self, *a))[1])
    else:
        faults.arm(point, fail)
    first = purge(invoke, store)
    faults.disarm(point), faults.disarm("split_step_deleted")
    assert seen["hits"] >= 1, "the failure was never injected"
    if point == "merge":  # an FTS merge that fails is left to Hermes (a note); the deletes go on
        assert first.exit_code in (0, 1), first.stderr
    else:
        assert first.exit_code == 2 and "on purpose" in first.stderr
    # whole, or wholly gone: never a conversation with some of its messages
    assert contents(db) in (before, {}), f"{len(contents(db))} of {len(before)} messages left"
    assert fts_problems(db) == []
    again = purge(invoke, store)
    assert again.exit_code == 0, again.stderr
    assert row_ids(db) == {"recent"}
    for path in sorted((store / ".hermes-admin" / "exports").glob("*.jsonl.gz")):
        invoke("--root", str(store), "restore", str(path), "--yes")
    assert contents(db) == before
    assert fts_problems(db) == []


@pytest.mark.parametrize("point", ["committed", "after_commit"])
def test_a_failure_right_after_the_last_step_committed_finishes_the_unit(either_store, invoke, small_steps,
                                                                        monkeypatch, point):
    store = either_store
    db = store / "state.db"
    monkeypatch.setattr(faults, "_armed", {})
    last = {"steps": 0, "done": False, "hits": 0}

    def step(**_):
        last["steps"] += 1

    def rows(**_):
        last["done"] = last["steps"] > 0  # the split's last step deleted its rows: its commit comes next

    def fail(**_):
        if last["done"] and not last["hits"]:
            last["hits"] += 1
            raise sqlite3.OperationalError("disk I/O error (on purpose)")

    faults.arm("split_step_deleted", step)
    faults.arm("rows_deleted", rows)
    faults.arm(point, fail)
    first = purge(invoke, store)
    for name in (point, "rows_deleted", "split_step_deleted"):
        faults.disarm(name)
    assert last["hits"] == 1 and first.exit_code == 2, first.stderr
    assert {"big", "big-child"}.isdisjoint(row_ids(db)) and contents(db) == {}  # gone, never half kept
    outbox = sqlite3.connect(store / ".hermes-admin" / "outbox.db")
    assert outbox.execute("SELECT COUNT(*) FROM splits").fetchone()[0] == 0  # the split ended
    purge(invoke, store)
    assert len([e for e in events(store) if e["session_id"] == "big"]) == 1


def test_a_failure_after_the_last_step_loses_neither_the_unit_nor_its_event(store, invoke, small_steps, monkeypatch):
    from hermes_admin.profile.engine import outbox as outbox_module

    original, calls = outbox_module.Outbox.end_split, [0]

    def failing(self, split_id):
        calls[0] += 1
        if calls[0] == 1:
            raise outbox_module.OutboxError("outbox.db: disk I/O error (on purpose)")
        return original(self, split_id)

    monkeypatch.setattr(outbox_module.Outbox, "end_split", failing)
    first = purge(invoke, store)
    assert first.exit_code == 2 and "on purpose" in first.stderr
    assert {"big", "big-child"}.isdisjoint(row_ids(store / "state.db"))  # gone: never "kept"
    purge(invoke, store)
    assert len([e for e in events(store) if e["session_id"] == "big"]) == 1
    outbox = sqlite3.connect(store / ".hermes-admin" / "outbox.db")
    assert outbox.execute("SELECT COUNT(*) FROM splits").fetchone()[0] == 0


def test_a_message_hermes_deletes_meanwhile_stays_deleted_when_the_unit_is_restored(store, invoke, small_steps,
                                                                                 monkeypatch):
    db = store / "state.db"
    before = contents(db)
    newest = max(before)
    original, calls = Turns.after_commit, [0]

    def hermes_rewinds(self, committed_at, held_s):
        calls[0] += 1
        if calls[0] == 4:
            conn = sqlite3.connect(db, timeout=5)
            conn.execute("DELETE FROM messages WHERE id = ?", (newest,))
            conn.commit()
            conn.close()
        return original(self, committed_at, held_s)

    monkeypatch.setattr(Turns, "after_commit", hermes_rewinds)
    result = purge(invoke, store)
    assert result.exit_code == 1, result.stderr
    expected = {k: v for k, v in before.items() if k != newest}
    assert contents(db) == expected  # ours came back; Hermes' own delete stands
    assert fts_problems(db) == []


def test_commands_without_the_policy_never_prune_exports(store, invoke, now):
    assert purge(invoke, store).exit_code == 0
    path = only_export(store)
    manifest = Path(str(path) + ".json")
    doc = load_manifest(path)
    doc["created"] = now - 30 * DAY
    manifest.write_text(json.dumps(doc))
    assert invoke("--root", str(store), "sessions", "archive", "recent", "--yes").exit_code in (0, 1)
    assert invoke("--root", str(store), "restore", str(path), "--session", "small-0", "--yes").exit_code == 0
    assert path.exists() and manifest.exists()


def test_a_hostile_export_cannot_write_into_other_sessions_nor_crash_restore(store, invoke):
    import gzip

    assert purge(invoke, store).exit_code == 0
    path = only_export(store)
    manifest_path = Path(str(path) + ".json")
    manifest = load_manifest(path)
    record = {"id": "small-0", "source": "cli", "started_at": 1.0, "ended_at": 2.0,
              "messages": [{"id": 999999999, "session_id": "recent", "role": "user", "content": "injected",
                            "timestamp": 3.0}]}
    data = (json.dumps(record) + "\n").encode()
    body = gzip.compress(data)
    manifest["members"] = [{"offset": 0, "length": len(body), "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest(), "reason": "prune",
                            "units": [["small-0", 1, 1, ["small-0"]]]}]
    path.write_bytes(body)
    manifest_path.write_text(json.dumps(manifest))
    assert invoke("--root", str(store), "restore", str(path), "--yes").exit_code == 0
    conn = sqlite3.connect(store / "state.db")
    rows = conn.execute("SELECT session_id, id FROM messages WHERE content = 'injected'").fetchall()
    assert len(rows) == 1 and rows[0][0] == "small-0" and rows[0][1] != 999999999  # its own session, a real id
    conn.close()

    manifest_path.write_text("[1, 2, 3]")
    broken = invoke("--root", str(store), "restore", str(path), "--yes")
    assert broken.exit_code == 2 and "not a hermes-admin export manifest" in broken.stderr
    assert "Traceback" not in broken.stderr and "internal error" not in broken.stderr


@pytest.mark.parametrize("at", [3, 200])
def test_a_stop_request_during_a_split_leaves_the_unit_whole_either_way(store, invoke, small_steps, monkeypatch, at):
    """Early: what went comes back (less work than finishing); late: the unit is finished."""
    from hermes_admin import stopping

    db = store / "state.db"
    before = contents(db)
    original, calls = Turns.after_commit, [0]

    def stop_meanwhile(self, committed_at, held_s):
        calls[0] += 1
        if calls[0] == at:
            stopping.request()
        return original(self, committed_at, held_s)

    monkeypatch.setattr(Turns, "after_commit", stop_meanwhile)
    try:
        purge(invoke, store)
    finally:
        stopping.clear()
    now_there = contents(db)
    assert now_there in (before, {})  # whole, or wholly gone
    gone = [e for e in events(store) if e["session_id"] == "big"]
    if not now_there and not gone:
        # The stop came as the last step committed (the budgets follow the clock, so where the
        # 200th turn falls varies): no new event is sent after a stop; the next run sends it.
        monkeypatch.setattr(Turns, "after_commit", original)
        purge(invoke, store)
        gone = [e for e in events(store) if e["session_id"] == "big"]
    assert len(gone) == (0 if now_there else 1)
    assert sqlite3.connect(store / ".hermes-admin" / "outbox.db").execute("SELECT COUNT(*) FROM splits").fetchone()[0] == 0
    assert fts_problems(db) == []


def test_what_commits_before_a_split_released_during_its_steps_is_done_in_that_run(tmp_path, invoke, now,
                                                                                   small_steps, monkeypatch):
    """Small units commit, then a big one goes in steps: the small ones' files and events, released
    by a step's commit (their checkpoint came meanwhile), are done then, not left for the next run."""
    from hermes_admin.profile.engine.group_commit import GroupCommit

    # each commit durable once the next one is made, as if a checkpoint came in between
    monkeypatch.setattr(GroupCommit, "_durable", lambda self: self.seq - 1)
    root = tmp_path / "hermes"
    rng = random.Random(5)
    synth = SynthStore(root / "state.db", 30)
    old = now - 200 * DAY
    for n in range(3):  # first in the store, so first deleted
        synth.session(f"small-{n}", started=old, ended=old + 60, end_reason="user_exit")
        synth.messages(f"small-{n}", 4, old, 1)
    synth.session("big", started=old, ended=old + 3600, end_reason="user_exit")
    for i in range(120):
        synth.conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                           ("big", "tool", text(rng, 6000), old + i))
    synth.close()
    for sid in ("small-0", "small-1", "small-2", "big"):
        (root / "sessions" / f"{sid}.jsonl").write_text("{}\n")
    install_plugins(root, ["recorder"], enabled=["recorder"], timeout=10)
    result = purge(invoke, root)
    assert result.exit_code == 0, result.stderr
    assert sorted(e["session_id"] for e in events(root)) == ["big", "small-0", "small-1", "small-2"]
    assert not list((root / "sessions").glob("*.jsonl"))


def test_exports_kept_forever_are_never_pruned(store, invoke, tmp_path):
    """`export_keep_days: .inf` (or a horizon before any clock) keeps every export, quietly."""
    assert purge(invoke, store).exit_code == 0
    (path,) = (store / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    config = tmp_path / "admin.yaml"
    for days in (".inf", "1.0e+12"):
        config.write_text(f"defaults:\n  export_keep_days: {days}\n")
        result = invoke("--root", str(store), "--config", str(config), "run", "--json")
        assert result.exit_code == 0, result.stderr
        assert path.exists() and "not pruned" not in result.stdout


@pytest.mark.parametrize("put_bytes", [1, 10 ** 9])  # every message compressed alone; a session's all at once
def test_an_export_streams_any_grouping_of_messages_back_byte_identical(store, invoke, monkeypatch, put_bytes):
    from hermes_admin.profile import exports

    monkeypatch.setattr(exports, "PUT_BYTES", put_bytes)
    db = store / "state.db"
    before = contents(db)
    assert purge(invoke, store).exit_code == 0
    back = invoke("--root", str(store), "restore", str(only_export(store)), "--yes", "--json")
    assert back.exit_code == 0, back.stderr
    assert contents(db) == before and fts_problems(db) == []


@pytest.mark.parametrize("with_orjson", [True, False], ids=["orjson", "standard library"])
def test_an_export_of_any_text_comes_back_byte_identical_by_either_encoder(store, invoke, monkeypatch, with_orjson):
    """Messages are encoded by orjson where it is installed, else by the standard library
    (json_bytes.py): either way non-ASCII, escapes and controls come back as they were."""
    from hermes_admin.profile import json_bytes

    if not with_orjson:
        monkeypatch.setattr(json_bytes, "orjson", None)
    elif json_bytes.orjson is None:
        pytest.skip("no orjson on this machine")
    db = store / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE messages SET content = content || ? WHERE session_id IN ('big', 'big-child') AND id % 3 = 0",
                 (' é 中文 😀 "quoted" \\ \u2028 \x01\n\t',))
    conn.commit()
    conn.close()
    before = contents(db)
    assert purge(invoke, store).exit_code == 0
    back = invoke("--root", str(store), "restore", str(only_export(store)), "--yes", "--json")
    assert back.exit_code == 0, back.stderr
    assert contents(db) == before and fts_problems(db) == []


def test_a_unit_another_connection_changed_after_its_export_is_left_for_the_next_run(store, invoke, monkeypatch):
    """The rows exported are the rows deleted: a change in between (here a title Hermes set) keeps
    the unit. With nobody else writing, the engine trusts SQLite's data_version and skips the check."""
    compared = []

    def exported(units):
        if any(u.session_id == "small-1" for u in units):
            hermes = sqlite3.connect(store / "state.db")
            hermes.execute("UPDATE sessions SET title = 'renamed meanwhile' WHERE id = 'small-1'")
            hermes.commit()
            hermes.close()

    monkeypatch.setattr(faults, "_armed", {})  # whatever is armed here is disarmed after the test
    faults.arm("batch_exported", exported)
    faults.arm("compared_with_exports", lambda why: compared.append(sorted(why)))
    doc = json.loads(purge(invoke, store).stdout)
    (res,) = [r for r in doc["results"] if r["task"] == "purge"]
    assert {s["session_id"]: s["why"] for s in res["skipped"]} == {
        "small-1": "changed since it was exported (left for the next run)"}
    assert row_ids(store / "state.db") == {"recent", "small-1"}
    assert ["small-1"] in compared

    faults.disarm("batch_exported")
    compared.clear()
    again = json.loads(purge(invoke, store).stdout)
    assert row_ids(store / "state.db") == {"recent"} and compared == [[]]  # exported as it is now: it goes


def old_sessions(root: Path, now: float, count: int) -> None:
    """A store of `count` ended sessions of one message each, all past retention."""
    synth = SynthStore(root / "state.db", 30)
    old = now - 200 * DAY
    for n in range(count):
        synth.session(f"old-{n:04d}", started=old + n, ended=old + n + 60, end_reason="user_exit")
        synth.messages(f"old-{n:04d}", 1, old + n, 1)
    synth.close()


def test_export_batches_grow_so_the_deletes_start_at_once(tmp_path, invoke, now):
    """8 units first (the only export the deletes wait for), then twice as many each time, up to 500."""
    root = tmp_path / "many"
    old_sessions(root, now, 700)
    doc = json.loads(purge(invoke, root).stdout)
    assert sum(r["rows"] for r in doc["results"]) == 700
    manifest = load_manifest(only_export(root))
    assert [len(m["units"]) for m in manifest["members"]] == [8, 16, 32, 64, 128, 256, 196]


def test_the_manifest_gains_a_line_a_member_and_a_line_cut_short_is_not_relied_on(tmp_path, invoke, now):
    """Appended, never rewritten (rewriting it whole for each member made big exports quadratic)."""
    root = tmp_path / "lines"
    old_sessions(root, now, 24)
    assert purge(invoke, root).exit_code == 0
    path = only_export(root)
    manifest_path = Path(str(path) + ".json")
    lines = manifest_path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 1 + 2 + 1  # the head, a line for each of 8 and 16 units
    head, *members = [json.loads(line) for line in lines[:-1]]
    assert head["format"] == 2 and "members" not in head and [len(m["units"]) for m in members] == [8, 16]

    def listed() -> int:
        shown = json.loads(invoke("--root", str(root), "exports", "list", "--json").stdout)
        return sum(item.get("units", 0) for item in shown["exports"])

    whole = manifest_path.read_bytes()
    with open(manifest_path, "ab") as torn:  # as a crash in the middle of a third line leaves it
        torn.write(b'{"offset": 99, "length": ')
    assert listed() == 24
    # or with its length on disk but not its data (a file system that orders no data before sizes)
    manifest_path.write_bytes(whole + b"\0" * 300 + b"\n")
    assert listed() == 24
    manifest_path.write_bytes(whole.replace(b"\n", b"\n\0\0\n", 1))  # but never a bad line before the last
    assert listed() == 0
    manifest_path.write_bytes(whole)
    # format 1 (one document, rewritten for each member) still reads
    manifest_path.write_text(json.dumps({**head, "format": 1, "members": members}))
    assert listed() == 24
    assert invoke("--root", str(root), "restore", str(path), "--session", "old-0003", "--yes").exit_code == 0
    assert "old-0003" in row_ids(root / "state.db")


def test_a_manifest_line_that_fails_stops_the_deletes_and_never_breaks_what_was_listed(tmp_path, invoke, now,
                                                                                       monkeypatch):
    """A failed append is cut off again; when even that fails, no member may follow the half line."""
    from hermes_admin.profile import exports as exports_module

    root = tmp_path / "failing"
    old_sessions(root, now, 24)
    real_write, real_truncate = os.write, os.ftruncate
    calls = {"n": 0}

    def write(fd, data):
        if data.startswith(b'{"offset": ') and b'"units"' in data:
            calls["n"] += 1
            if calls["n"] == 1:  # the second member's line: half of it, then the disk is full
                real_write(fd, data[:len(data) // 2])
                raise OSError(28, "No space left on device")
        return real_write(fd, data)

    def ftruncate(fd, length):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(exports_module.os, "write", write)
    monkeypatch.setattr(exports_module.os, "ftruncate", ftruncate)
    result = purge(invoke, root)
    assert result.exit_code != 0 and "No space left on device" in result.stderr
    assert len(row_ids(root / "state.db")) == 24 - 8  # the first member's units only
    monkeypatch.setattr(exports_module.os, "write", real_write)
    monkeypatch.setattr(exports_module.os, "ftruncate", real_truncate)
    manifest = load_manifest(only_export(root))  # the half line is the last: never relied on
    assert [len(m["units"]) for m in manifest["members"]] == [8]
    back = invoke("--root", str(root), "restore", str(only_export(root)), "--yes")
    assert back.exit_code == 0, back.stderr + back.stdout
    assert len(row_ids(root / "state.db")) == 24

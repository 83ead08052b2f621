"""FTS5 merges kept out of the deletes (fts_merges.py): the stored settings never change in any
committed state, the merging is done in steps of its own, and the index is left merged."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_admin.holders import held_by_nobody_else
from hermes_admin.profile.engine import engine as engine_module
from hermes_admin.profile.engine import fts_merges as fts_merges_module
from hermes_admin.profile.engine import turns as turns_module
from hermes_admin.profile.engine.fts_merges import STRUCTURE_V2, Budget, FtsMerges, levels
from hermes_admin.profile.engine.turns import Turns
from hermes_admin.synth.builder import SynthStore
from tests.conftest import fts_problems
from tests.helpers import engine_steps, someone_about

DAY = 86400.0
TABLES = ("messages_fts", "messages_fts_trigram")


def structure(conn, table: str) -> list[tuple[int, int]]:
    return levels(conn.execute(f"SELECT block FROM {table}_data WHERE id = 10").fetchone()[0])


def settings(db: Path) -> dict[str, list]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {t: sorted(conn.execute(f"SELECT k, v FROM {t}_config").fetchall()) for t in TABLES}
    finally:
        conn.close()


def _varint(value: int) -> bytes:
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(groups))


def test_a_structure_record_is_read_level_by_level():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("INSERT INTO t(t, rank) VALUES ('automerge', 0)")
    for n in range(5):  # five transactions: five segments on level 0, none merged
        conn.execute("INSERT INTO t(x) VALUES (?)", (f"row {n} " + "word " * 50,))
    assert structure(conn, "t")[0] == (0, 5, 5)  # of a leaf page each
    conn.execute("INSERT INTO t(t) VALUES ('optimize')")
    assert [segments for _, segments, _ in structure(conn, "t")].count(1) == 1  # one segment in all

    # SQLite 3.44+ writes a longer record: a marker, then five more numbers a segment.
    segment = b"".join(_varint(v) for v in (7, 1, 300, 0, 0, 0, 0, 0))
    record = (b"\x00\x00\x00\x09" + STRUCTURE_V2 + _varint(2) + _varint(3) + _varint(1000)
              + _varint(0) + _varint(2) + segment + segment + _varint(1) + _varint(1) + segment)
    assert levels(record) == [(0, 2, 600), (1, 1, 300)]


def _record(levels_: list[tuple[int, list[int]]]) -> bytes:
    """A structure record (the 3.40 format) of levels given as (segments being merged, [pages a segment])."""
    out = b"\x00\x00\x00\x01" + _varint(len(levels_)) + _varint(sum(len(p) for _, p in levels_)) + _varint(0)
    segid = 1
    for merging, pages in levels_:
        out += _varint(merging) + _varint(len(pages))
        for n in pages:
            out += _varint(segid) + _varint(1) + _varint(n)
            segid += 1
    return out


@pytest.mark.parametrize("levels_, owed", [
    ([(0, [1, 1, 1, 1])], False),  # four one-page segments of Hermes' appends: automerge's
    ([(0, [100, 100, 100, 100])], True),  # a big level due: ours
    ([(0, [1, 1, 1, 1]), (0, [100, 100, 100])], True),  # small, but its merge makes the next due
    ([(0, [1, 1, 1, 1]), (0, [100, 100])], False),  # and here it does not
    ([(0, [1]), (2, [1, 1]), (0, [200])], False),  # a small merge under way, the level above far from due
    ([(0, [1]), (2, [30, 40]), (0, [200])], True),  # a merge under way with more than 64 pages to go
    ([(0, [2, 2]), (0, [300, 300, 300])], False),  # a big level one short of due, nothing below due
])
def test_owed_leaves_small_merges_unless_they_cascade_into_big_ones(levels_, owed):
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    conn.execute("INSERT OR REPLACE INTO t_data(id, block) VALUES (10, ?)", (_record(levels_),))
    merges = FtsMerges(_Db(conn), ["t"])
    assert merges.owed() is None and merges.budgets["t"].earned == 0  # nothing written since it began
    merges.budgets["t"].pages = 10_000
    assert (merges.owed() is not None) is owed
    conn.close()


def _parsed(levels_: list[list[tuple[int, int]]]) -> list[tuple[int, list[tuple[int, int]]]]:
    return [(0, level) for level in levels_]


@pytest.mark.parametrize("before, after, earned", [
    ([[(1, 100)]], [[(1, 100)]], 0),  # nothing new
    ([[(1, 100)]], [[(1, 100), (2, 10)]], 10),  # a new segment of 10 leaves, one level
    ([[(1, 100)], [(3, 500)]], [[(1, 100), (2, 10), (4, 5)], [(3, 500)]], 30),  # 15 leaves, two levels
    ([[(1, 100), (2, 100)]], [[], [(5, 200)]], 400),  # a merge by someone else: its output counts too
    ([], [[(1, 7)]], 7),  # the index's first segment
])
def test_a_budget_earns_what_automerge_would_for_the_leaves_written(before, after, earned):
    budget = Budget(_parsed(before))
    budget.look(_parsed(after))
    assert budget.pages == budget.earned == earned
    budget.look(_parsed(after))  # looked at again: nothing more
    assert budget.earned == earned


def test_a_merge_step_spends_the_budget_and_its_output_earns_nothing():
    budget = Budget(_parsed([[(1, 100)]]))
    budget.look(_parsed([[(1, 100), (2, 50)]]))
    assert budget.pages == 50
    budget.spent(30, _parsed([[], [(3, 150)]]))  # the step's output: segment 3
    assert budget.pages == 20
    budget.look(_parsed([[], [(3, 150)]]))
    assert budget.pages == 20 and budget.earned == 50
    budget.spent(64, None)
    assert budget.pages == 0  # never below nothing


# What each of the purges below carries a transaction (tests/helpers.py: engine_steps): some three of
# the 150 old sessions, so about 50 transactions, on any machine.
STEP_WEIGHT = 20_000


@pytest.fixture
def many(tmp_path, now):
    """A default profile with 150 old small sessions of varied text and two recent ones; one index
    has a stored automerge of its own."""
    root = tmp_path / "hermes"
    rng = random.Random(3)
    words = [f"w{n}" for n in range(3000)] + ["the", "error", "file"]
    synth = SynthStore(root / "state.db", 30)
    old = now - 200 * DAY
    for n in range(150):
        synth.session(f"old-{n}", started=old + n, ended=old + n + 60, end_reason="user_exit")
        for i in range(6):
            synth.conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                               (f"old-{n}", " ".join(rng.choice(words) for _ in range(120)), old + n + i))
    for n in range(2):
        synth.session(f"recent-{n}", started=now - DAY, ended=now - DAY + 60, end_reason="user_exit")
        synth.messages(f"recent-{n}", 4, now - DAY, 1)
    synth.conn.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram, rank) VALUES ('automerge', 6)")
    synth.close()
    return root


def test_deletes_never_commit_other_fts_settings_and_leave_the_index_merged(many, invoke, monkeypatch):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    monkeypatch.setattr(fts_merges_module, "SMALL_PAGES", 0)  # a small store: every merge is ours here
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    db = many / "state.db"
    stored = settings(db)
    assert ("automerge", 6) in stored["messages_fts_trigram"] and not any(
        k == "automerge" for k, _ in stored["messages_fts"])
    seen, merges = [], []
    original_turn, original_merge = Turns.after_commit, FtsMerges.merge

    def after_each_commit(self, committed_at, held_s):
        seen.append(settings(db))  # what any other connection sees now
        return original_turn(self, committed_at, held_s)

    def merge(self, db_, table, pages):
        written = original_merge(self, db_, table, pages)
        merges.append((table, written))
        return written

    monkeypatch.setattr(Turns, "after_commit", after_each_commit)
    monkeypatch.setattr(FtsMerges, "merge", merge)
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (res,) = json.loads(result.stdout)["results"]
    assert len(res["done"]) == 150 and res["transactions"] > 20
    assert seen and all(s == stored for s in seen)  # every committed state: the stored settings
    assert settings(db) == stored
    assert any(written >= 2 for _, written in merges)  # the merging was done, apart from the deletes

    conn = sqlite3.connect(db)
    for table, threshold in (("messages_fts", 4), ("messages_fts_trigram", 6)):
        assert all(not merging and segments < threshold for merging, segments, _ in structure(conn, table)), table
    assert FtsMerges(_Db(conn), list(TABLES)).owed() is None
    conn.close()
    assert fts_problems(db) == []


@pytest.mark.parametrize("journal", ["wal", "delete"])
@pytest.mark.parametrize("host", ["this", "seeing all"])
def test_with_nobody_else_about_fts5_merges_inside_the_deletes(many, invoke, monkeypatch, journal, host):
    """Nobody else holds or writes the store, as far as can be known: FTS5's own automerge runs
    inside our deletes, as in Hermes' own writes; no merge step of ours, no setting changed, the
    index whole and merged. A rollback-journal store on a host with a process that cannot be looked
    into (an idle connection there holds no lock) is not known to be free: the careful way."""
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    db = many / "state.db"
    conn = sqlite3.connect(db)
    assert conn.execute(f"PRAGMA journal_mode={journal}").fetchone()[0] == journal
    conn.close()
    if host == "seeing all":  # a host where every process can be looked into, whatever this one is
        monkeypatch.setattr(turns_module, "held_by_nobody_else", lambda store, wal: True)
    known_free = host == "seeing all" or held_by_nobody_else(db, wal=journal == "wal")
    stored = settings(db)
    seen, steps, quieted = [], [], []
    original_turn, original_quiet, original_merge = Turns.after_commit, FtsMerges.quiet, FtsMerges.merge

    def after_each_commit(self, committed_at, held_s):
        seen.append(settings(db))
        return original_turn(self, committed_at, held_s)

    def quiet(self, work):
        inner = original_quiet(self, work)
        return lambda db_: quieted.append(1) or inner(db_)

    monkeypatch.setattr(Turns, "after_commit", after_each_commit)
    monkeypatch.setattr(FtsMerges, "quiet", quiet)
    monkeypatch.setattr(FtsMerges, "merge", lambda self, *args: steps.append(args) or original_merge(self, *args))
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (res,) = json.loads(result.stdout)["results"]
    assert len(res["done"]) == 150 and res["transactions"] > 20
    assert seen and all(s == stored for s in seen)
    assert (steps == [] and quieted == []) if known_free else quieted
    conn = sqlite3.connect(db)
    for table in TABLES:  # merged as FTS5 merges: never a level at its crisis (16 segments)
        assert all(segments < 16 for _, segments, _ in structure(conn, table)), table
    conn.close()
    assert fts_problems(db) == []


def test_small_merges_are_left_to_fts5s_own_automerge(many, invoke, monkeypatch, tmp_path):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    calls = []
    original = FtsMerges.merge
    monkeypatch.setattr(FtsMerges, "merge", lambda self, db, table, pages: calls.append(table) or original(
        self, db, table, pages))
    twin = tmp_path / "twin"
    shutil.copytree(many, twin)
    steps = {}
    for root, small in ((twin, 0), (many, fts_merges_module.SMALL_PAGES)):
        monkeypatch.setattr(fts_merges_module, "SMALL_PAGES", small)
        calls.clear()
        stored = settings(root / "state.db")
        result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json")
        assert result.exit_code == 0, result.stderr
        assert settings(root / "state.db") == stored and fts_problems(root / "state.db") == []
        steps[small] = len(calls)
    assert steps[0] > steps[fts_merges_module.SMALL_PAGES]  # fewer steps of ours
    conn = sqlite3.connect(many / "state.db")
    full = [found for t, threshold in zip(TABLES, (4, 6)) for found in structure(conn, t)
            if found[0] or found[1] >= threshold]  # the trigram index's stored automerge is 6
    assert full and all(pages <= fts_merges_module.SMALL_PAGES for _, _, pages in full)  # left as they were
    assert FtsMerges(_Db(conn), list(TABLES)).owed() is None
    conn.close()


def test_a_store_that_asks_for_no_merging_gets_none(many, invoke, monkeypatch):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    conn = sqlite3.connect(many / "state.db")
    for table in TABLES:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', 0)")
    conn.commit()
    conn.close()
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    calls = []
    monkeypatch.setattr(FtsMerges, "merge", lambda self, db, table, pages: calls.append(table) or 0)
    stored = settings(many / "state.db")
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert calls == [] and settings(many / "state.db") == stored
    assert fts_problems(many / "state.db") == []


@pytest.mark.parametrize("odd", [2.5, "4", 100])
def test_a_stored_automerge_fts5_would_not_write_is_left_as_it_is(many, invoke, monkeypatch, odd):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    conn = sqlite3.connect(many / "state.db")
    conn.execute("INSERT OR REPLACE INTO messages_fts_config(k, v) VALUES ('automerge', ?)", (odd,))
    conn.commit()
    conn.close()
    stored = settings(many / "state.db")
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["results"][0]["done"]) == 150
    assert settings(many / "state.db") == stored
    assert fts_problems(many / "state.db") == []


def test_a_merge_that_fails_is_one_note_an_index_and_the_deletes_files_and_events_go_on(many, invoke, monkeypatch):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions
    (many / "sessions").mkdir(exist_ok=True)
    (many / "sessions" / "old-7.jsonl").write_text("{}\n")

    monkeypatch.setattr(fts_merges_module, "SMALL_PAGES", 0)
    failed = []

    def fails(self, db, table, pages):
        failed.append(table)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(FtsMerges, "merge", fails)
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (res,) = json.loads(result.stdout)["results"]
    assert len(res["done"]) == 150
    notes = [n for n in res["notes"] if "left to Hermes for this run" in n]
    assert len(notes) == len(set(failed)) >= 1 and len(failed) == len(set(failed))  # one try, one note an index
    assert all(any(table in n for n in notes) for table in failed)
    assert not (many / "sessions" / "old-7.jsonl").exists()
    assert fts_problems(many / "state.db") == []


class _Db:
    """The one method FtsMerges reads with, over a plain connection."""

    def __init__(self, conn):
        self.conn = conn

    def execute_sql(self, sql, params=()):
        return self.conn.execute(sql, params)


CJK = "messages_fts_cjk"


def test_the_cjk_index_is_kept_quiet_and_merged_like_the_others(many, invoke, monkeypatch):
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    # Hermes' CJK index tokenizes with a library of its own, loaded before any delete (tested in
    # test_engine.py and the root tier's attacks); this one uses unicode61, so nothing is loaded.
    monkeypatch.setattr(engine_module.Engine, "require_tokenizer",
                        lambda self, doing="": self._tokenizer_loaded(self.store.db.connection()))
    monkeypatch.setattr(fts_merges_module, "SMALL_PAGES", 0)
    db = many / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript(f"""
        CREATE VIRTUAL TABLE {CJK} USING fts5(content, content='messages', content_rowid='id');
        INSERT INTO {CJK}({CJK}) VALUES ('rebuild');
        INSERT INTO {CJK}({CJK}, rank) VALUES ('automerge', 5);
        CREATE TRIGGER {CJK}_insert AFTER INSERT ON messages BEGIN
            INSERT INTO {CJK}(rowid, content) VALUES (new.id, new.content); END;
        CREATE TRIGGER {CJK}_delete AFTER DELETE ON messages BEGIN
            INSERT INTO {CJK}({CJK}, rowid, content) VALUES ('delete', old.id, old.content); END;
    """)
    conn.close()
    engine_steps(monkeypatch, STEP_WEIGHT)  # many short transactions

    def cjk_settings():
        reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return sorted(reader.execute(f"SELECT k, v FROM {CJK}_config").fetchall())
        finally:
            reader.close()

    stored, seen = cjk_settings(), []
    original_turn = Turns.after_commit

    def after_each_commit(self, committed_at, held_s):
        seen.append(cjk_settings())
        return original_turn(self, committed_at, held_s)

    monkeypatch.setattr(Turns, "after_commit", after_each_commit)
    result = invoke("--root", str(many), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    (res,) = json.loads(result.stdout)["results"]
    assert len(res["done"]) == 150 and res["transactions"] > 20
    assert ("automerge", 5) in stored and seen and all(s == stored for s in seen)

    conn = sqlite3.connect(db)
    assert all(not merging and segments < 5 for merging, segments, _ in structure(conn, CJK))
    assert FtsMerges(_Db(conn), [CJK]).owed() is None
    conn.execute(f"INSERT INTO {CJK}({CJK}, rank) VALUES ('integrity-check', 1)")
    conn.close()
    assert fts_problems(db) == []


def test_a_big_merge_made_due_before_the_run_is_left_under_way_as_automerge_leaves_it(tmp_path, now, invoke,
                                                                                      monkeypatch):
    """A big level already due when the run begins (Hermes' own writes left it: its next appends
    would merge it a work unit at a time) is not ours to finish: our steps merge at most what
    automerge would have merged inside our deletes (`Budget`), and the rest stays as it was owed."""
    someone_about(monkeypatch)  # a Hermes holds the store open: merging in steps of ours
    root = tmp_path / "hermes"
    rng = random.Random(5)
    words = [f"w{n}" for n in range(5000)]
    synth = SynthStore(root / "state.db", 30)
    synth.conn.execute("COMMIT")
    for table in TABLES:  # a level of big segments, none merged: due as soon as automerge is back
        synth.conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', 0)")
    for n in range(6):
        synth.conn.execute("BEGIN")
        synth.session(f"recent-{n}", started=now - DAY, ended=now - DAY + 60, end_reason="user_exit")
        for i in range(40):
            synth.conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                               (f"recent-{n}", " ".join(rng.choice(words) for _ in range(400)), now - DAY + i))
        synth.conn.execute("COMMIT")
    for table in TABLES:
        synth.conn.execute(f"DELETE FROM {table}_config WHERE k = 'automerge'")  # FTS5's default again
    synth.conn.execute("BEGIN")
    synth.session("old", started=now - 200 * DAY, ended=now - 200 * DAY + 60, end_reason="user_exit")
    synth.messages("old", 2, now - 200 * DAY, 1)
    synth.close()
    conn = sqlite3.connect(root / "state.db")
    due = {t: structure(conn, t) for t in TABLES}
    conn.close()
    big = fts_merges_module.SMALL_PAGES
    assert all(any(segments >= 4 and pages > big for _, segments, pages in found) for found in due.values()), due

    asked, budgets = [], []
    original_merge, original_init = FtsMerges.merge, FtsMerges.__init__

    def init(self, db, tables):
        original_init(self, db, tables)
        budgets.append(self.budgets)

    monkeypatch.setattr(FtsMerges, "__init__", init)
    monkeypatch.setattr(FtsMerges, "merge", lambda self, db, table, pages: asked.append((table, pages)) or
                        original_merge(self, db, table, pages))
    result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert [d["session_id"] for d in json.loads(result.stdout)["results"][0]["done"]] == ["old"]
    (spent,) = budgets
    for table in TABLES:
        assert sum(p for t, p in asked if t == table) <= spent[table].earned  # what automerge would have merged
    conn = sqlite3.connect(root / "state.db")
    left = {t: structure(conn, t) for t in TABLES}
    conn.close()
    assert all(any((merging or segments >= 4) and pages > big for merging, segments, pages in found)
               for found in left.values()), left  # still owed: for the next writers' automerge
    assert fts_problems(root / "state.db") == []


@pytest.mark.parametrize("target_s, rate, budget, pages", [
    (0.020, 1e-6, 10_000, 400),  # a fast level under a writer: the cap, 400 pages in its 20 ms
    (0.040, 1e-6, 10_000, 800),  # idle: twice as long, twice as many
    (0.020, 1e-4, 10_000, 200),  # a slow level: what fits in the time aimed at
    (0.040, 1e-6, 100, 100),  # what is left of the budget
    (0.020, 1.0, 10_000, fts_merges_module.MIN_PAGES),  # never less than a step worth its turn
])
def test_a_merge_step_is_sized_by_the_time_aimed_at_its_cap_and_the_budget(target_s, rate, budget, pages):
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    merges = FtsMerges(_Db(conn), ["t"])
    merges._budget(merges.db, "t").pages = budget
    merges.measured(("t", 0), 100, 100, 100 * rate)
    assert merges.pages(target_s, ("t", 0)) == pages
    conn.close()

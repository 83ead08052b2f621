"""store/damage.py: what is damaged, and every row that can still be read, on a real SQLite file
with pages overwritten (tests/damage.py); never a lock taken for damage."""

from __future__ import annotations

import sqlite3

import apsw
import pytest

from hermes_admin.profile.store import damage as store_damage
from tests import damage


def a_store(path, rows=3000):
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT); CREATE INDEX t_body ON t(body);"
                       "CREATE VIRTUAL TABLE f USING fts5(body);")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"row {i} " + "x" * (i % 300)) for i in range(1, rows + 1)])
    conn.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)", [(i, f"word{i % 50}") for i in range(1, rows + 1)])
    conn.commit()
    conn.close()
    return path


def cells(path, page):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT ncell FROM dbstat WHERE pageno = ?", [page]).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("which", [
    lambda leaves: [leaves[1], leaves[len(leaves) // 2], leaves[-1]],  # one early, one inside, the last
    lambda leaves: [leaves[0], leaves[5], leaves[6], leaves[8]],  # the first, two side by side, one readable between
], ids=["spread", "clustered"])
def test_every_row_but_those_of_the_torn_pages_is_read(tmp_path, which):
    path = a_store(tmp_path / "s.db")
    torn = which(damage.pages_of(path, "t"))
    lost = sum(cells(path, p) for p in torn)
    for page in torn:
        damage.overwrite(path, page)
    found = store_damage.diagnose(path)
    assert found.line() == f"damaged: table t ({len(torn)} pages unreadable)" and not found.lossless
    assert store_damage.readable_rows(path, ["t"]) == {"t": 3000 - lost}


@pytest.mark.parametrize("name, said", [("t_body", "index t_body"), ("f_data", "full-text index f")])
def test_an_index_torn_loses_no_row(tmp_path, name, said):
    path = a_store(tmp_path / "s.db")
    damage.overwrite(path, damage.pages_of(path, name)[0])
    found = store_damage.diagnose(path)
    assert said in found.line() and found.lossless
    assert store_damage.readable_rows(path, ["t"]) == {"t": 3000}


def test_cut_short_and_not_a_database(tmp_path):
    path = a_store(tmp_path / "s.db")
    damage.cut_short(path, 0.5)
    assert "file length" in store_damage.diagnose(path).line()
    assert 0 < store_damage.readable_rows(path, ["t"])["t"] < 3000
    other = tmp_path / "o.db"
    other.write_bytes(b"no database here" * 100)
    found = store_damage.diagnose(other)
    assert found.kinds() == {store_damage.NOT_A_DATABASE} and "not a database" in found.line()


def test_a_lock_is_never_taken_for_damage(tmp_path):
    path = a_store(tmp_path / "s.db")
    damage.overwrite(path, damage.pages_of(path, "t")[3])
    holder = apsw.Connection(str(path))
    holder.execute("BEGIN EXCLUSIVE")  # a rollback journal: no reader gets in
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        with pytest.raises(apsw.BusyError):
            sum(1 for _ in store_damage.scan_rows(conn, "t"))
        conn.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_sessions_show_of_a_healthy_profile_s_session_exits_2_when_another_store_is_damaged(synth_root, invoke):
    """The session is shown, and the damaged profile beside it still makes the exit 2 (every view)."""
    import sqlite3 as plain

    root, _ = synth_root
    conn = plain.connect(root / "state.db")
    sid = conn.execute("SELECT id FROM sessions ORDER BY id LIMIT 1").fetchone()[0]
    conn.close()
    damage.settle(root / "profiles" / "work" / "state.db")
    damage.cut_short(root / "profiles" / "work" / "state.db", 0.5)
    shown = invoke("--root", str(root), "sessions", "show", sid)
    assert shown.exit_code == 2, shown.output
    assert sid in shown.stdout and "work" in shown.stderr and "damaged" in shown.stderr


@pytest.mark.parametrize("look, on_word, stops", [
    (dict(holders=[]), False, False),
    (dict(holders=None, unseen=["pid 1"]), False, True),  # `run`: not known is held
    (dict(holders=None, unseen=["pid 1"]), True, False),  # `repair --apply`: the operator's word
    (dict(holders=None, seen=[4242], unseen=["pid 1"]), True, True),  # one seen holding it always stops it
    (dict(holders=[4242], seen=[4242]), True, True),
])
def test_what_stops_a_rebuild(tmp_path, monkeypatch, look, on_word, stops):
    from hermes_admin import holders
    from hermes_admin.profile.engine import space

    unseen = [holders.Unseen(1, "EACCES on /proc/1/fd/0", "init") for _ in look.pop("unseen", [])]
    monkeypatch.setattr(holders, "look", lambda paths, wal=False: holders.Look(unseen=unseen, **look))
    monkeypatch.setattr(space, "write_lock_holder", lambda path: None)
    said = space.held_by_path(tmp_path / "state.db", wal=False, on_word=on_word)
    assert (said is not None) == stops, said

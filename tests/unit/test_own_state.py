"""Damaged state of our own never stops a profile: the outbox, however it is damaged, is set aside
(kept, named, timestamped), made anew with what could still be read from it, reported in one line,
and the profile is maintained on the same run."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.helpers import home_of, never_blocks, row_ids

NOW = time.time()
GOOD = (7, NOW, "committed", "delete", "kept_sid", "prune", json.dumps(["kept_sid", "kept_child"]))
SPLIT = (3, NOW, json.dumps({"unit": "kept_split"}))


def ours(path: Path, columns: str = "id INTEGER PRIMARY KEY, created REAL, state TEXT, kind TEXT, "
                                       "session_id TEXT, reason TEXT, ids TEXT", rows=(GOOD,)) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE events ({columns})")
    conn.execute("CREATE TABLE splits (id INTEGER PRIMARY KEY, created REAL, record TEXT)")
    width = len(columns.split(","))
    conn.executemany(f"INSERT INTO events VALUES ({', '.join('?' * width)})", [row[:width] for row in rows])
    conn.execute("INSERT INTO splits VALUES (?, ?, ?)", SPLIT)
    conn.commit()
    conn.close()


def not_a_database(path):
    path.write_bytes(b"garbage" * 1000)


def another_shape(path):  # an older or foreign outbox: no `kind` column (what `run` died of)
    ours(path, "id INTEGER PRIMARY KEY, created REAL, state TEXT, session_id TEXT, reason TEXT, ids TEXT",
         rows=[GOOD[:3] + GOOD[4:]])


def unreadable_rows(path):
    ours(path, rows=[GOOD, (8, NOW, "committed", "delete", "bad_sid", "prune", "not json ["),
                     (9, NOW, "exploded", "delete", "odd_sid", "prune", "[]")])


def fails_quick_check(path):
    ours(path, rows=[GOOD] + [(i, NOW, "delivered", "delete", f"old_{i}", "prune", json.dumps(["x" * 300]))
                              for i in range(100, 400)])
    with open(path, "r+b") as f:  # a page of the events table's b-tree overwritten with noise
        f.seek(4096 * 3 + 100)
        f.write(os.urandom(2000))


@pytest.mark.parametrize("damage, says", [
    (not_a_database, "not a database"),
    (another_shape, "another shape"),
    (unreadable_rows, "row(s) it cannot read"),
    (fails_quick_check, ""),
])
def test_a_damaged_outbox_costs_one_warning_and_no_maintenance(synth_root, invoke, damage, says):
    root, kinds = synth_root
    home = home_of(root, "work")
    (home / ".hermes-admin").mkdir()
    outbox = home / ".hermes-admin" / "outbox.db"
    damage(outbox)
    before = row_ids(home / "state.db")
    first = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "90", "--yes", "--json")
    assert first.exit_code == 1, first.stderr  # done, with a warning
    lines = [line for line in first.stderr.splitlines() if "outbox.db" in line]
    assert len(lines) == 1 and "damaged" in lines[0] and says in lines[0] and "kept for inspection" in lines[0]
    assert row_ids(home / "state.db") < before  # maintained on this very run
    aside = [n for n in os.listdir(home / ".hermes-admin") if n.startswith("outbox.db.set-aside-")]
    assert len(aside) == 1  # kept, never deleted
    conn = sqlite3.connect(f"file:{outbox}?mode=ro", uri=True)
    carried = {row[0] for row in conn.execute("SELECT session_id FROM events")}
    splits = [row[0] for row in conn.execute("SELECT record FROM splits")]
    conn.close()
    if damage is not not_a_database:
        assert "kept_sid" in carried  # what could still be read stays
        assert "bad_sid" not in carried and "odd_sid" not in carried
    if damage in (another_shape, unreadable_rows):
        assert json.loads(splits[0]) == {"unit": "kept_split"}
    again = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "90", "--yes", "--json")
    assert "outbox.db" not in again.stderr, again.stderr  # reported once


def a_folder(path):
    path.mkdir()
    (path / "inside").write_text("someone's\n")


def garbage(path):
    path.write_bytes(os.urandom(300))


@pytest.mark.parametrize("name, damage, warned", [
    ("outbox.db", a_folder, True),
    ("lock", a_folder, True),
    ("lock", garbage, False),  # a lock's record is only a hint: unreadable is "holder unknown"
    ("quick-check", garbage, False),  # the record of a passed check: unreadable means one check more
    ("quick-check", a_folder, False),
])
def test_our_other_files_damaged_never_stop_the_profile(synth_root, invoke, name, damage, warned):
    root, _ = synth_root
    home = home_of(root, "work")
    (home / ".hermes-admin").mkdir()
    damage(home / ".hermes-admin" / name)
    before = row_ids(home / "state.db")
    done = invoke("--root", str(root), "run", "-p", "work", "--yes", "--json")
    assert done.exit_code == (1 if warned else 0), done.stderr
    assert row_ids(home / "state.db") < before
    lines = [line for line in done.stderr.splitlines() if name in line]
    assert len(lines) == (1 if warned else 0), done.stderr
    if warned:
        assert "damaged" in lines[0] and "kept for inspection" in lines[0]
        assert any(n.startswith(f"{name}.set-aside-") for n in os.listdir(home / ".hermes-admin"))


def test_a_lock_whose_holder_record_cannot_be_written_is_still_taken_and_released(tmp_path, monkeypatch):
    """A failing disk while the holder is written: the lock is held, then released, never leaked
    (it was: the error left the flock on a descriptor nobody would close)."""
    from hermes_admin.profile.state_folder import Flock

    path = tmp_path / "lock"
    path.write_text('{"pid": 1, "acquired_at": 1.0, "and": "a longer record than ours, to be cut"}')

    def failing(fd, length):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", failing)
    lock = Flock(path, "test", record=True)
    lock.acquire()
    lock.release()
    monkeypatch.undo()
    again = Flock(path, "test", record=True)
    again.acquire()  # taken again: the first one let it go
    again.release()


@pytest.mark.parametrize("swap", ["fifo", "link"])
def test_what_is_swapped_in_after_the_check_never_holds_the_outbox_up(tmp_path, monkeypatch, swap):
    """The name is checked (a plain file, or nothing) and then opened by SQLite: in between, her
    process may put a FIFO or a link there. Neither is opened as the outbox, nor waited on: it is
    set aside as damage and a new outbox is made, at once."""
    from hermes_admin.profile.engine import outbox as module
    from hermes_admin.model import Profile

    home = tmp_path / "home"
    (home / ".hermes-admin").mkdir(parents=True)
    path = home / ".hermes-admin" / "outbox.db"
    target = tmp_path / "elsewhere.db"
    ours(target)
    monkeypatch.setattr(module, "regular_file", lambda *_args, **_kw: [])  # the check passed; then the swap
    os.mkfifo(path) if swap == "fifo" else path.symlink_to(target)
    box = never_blocks(lambda: module.Outbox(Profile(root=home, name="default", home=home)))  # a FIFO opened would wait forever
    assert path.is_file() and not path.is_symlink()
    assert len(box.notes) == 1 and "outbox.db" in box.notes[0], box.notes
    box.close()
    assert sqlite3.connect(target).execute("SELECT count(*) FROM events").fetchone() == (1,)  # untouched

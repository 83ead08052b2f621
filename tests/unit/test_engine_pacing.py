"""The engine's pacing pieces, each on a real SQLite store or real files: group commit,
taking turns with other writers, the checkpoint thread, file removal on a thread,
and the purge that selects a batch at a time."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import peewee
import pytest

from hermes_admin import stopping
from hermes_admin.profile import exports, parts
from hermes_admin.profile.engine import export_ahead
from hermes_admin.profile.engine.checkpointer import Checkpointer
from hermes_admin.profile.store.files import FileIndex
from hermes_admin.profile.engine.group_commit import GroupCommit
from hermes_admin import holders as holders_module
from hermes_admin.holders import WalPeers, held_by_its_owner, lock_holders, store_holders
from hermes_admin.profile.engine import remover as remover_module
from hermes_admin.profile.engine.remover import FileRemover
from hermes_admin.profile.store.connect import open_readwrite
from hermes_admin.profile.engine.turns import (ALONE_HELD_EVERY_S, HELD_EVERY_S, LOOK_SHARE, MAX_S, MIN_S, POLL_S,
                                               SLACK_S, Turns, poll_interval)
from tests.conftest import fts_problems
from tests.helpers import other_connection, HOST_PIDS, SleepClock, home_of, needs_host_pids, row_ids


def wal_store(path, journal="wal"):
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    return open_readwrite(path)


def synchronous(db: peewee.SqliteDatabase) -> int:
    return db.execute_sql("PRAGMA synchronous").fetchone()[0]


def checkpointed_store(tmp_path):
    """A WAL store whose only checkpoints are the checkpoint thread's, with group commit on it."""
    path = tmp_path / "s.db"
    db = wal_store(path)
    db.execute_sql("PRAGMA wal_autocheckpoint=0")
    checkpointer = Checkpointer(path)
    return path, db, checkpointer, GroupCommit(db, checkpointer)


def test_group_commit_holds_work_until_a_checkpoint_covers_it(tmp_path):
    path, db, checkpointer, commits = checkpointed_store(tmp_path)
    assert commits.enabled and commits.level == 2  # SQLite's default, FULL
    assert commits.before() is False
    assert synchronous(db) == 1
    db.execute_sql("INSERT INTO t VALUES (1)")
    released = commits.committed(False, wrote=True, work="a")  # asks the thread for a checkpoint
    checkpointer.wait_idle()
    assert released + commits.committed(False, wrote=False, work="b") == ["a", "b"]
    assert checkpointer.durable == 1
    busy, frames, copied = db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == copied
    checkpointer.close()
    db.close()


def test_group_commit_holds_work_while_a_reader_pins_old_frames(tmp_path):
    path, db, checkpointer, commits = checkpointed_store(tmp_path)
    db.execute_sql("INSERT INTO t VALUES (0)")
    released = commits.committed(False, wrote=True, work="z")
    checkpointer.wait_idle()
    assert released + commits.committed(False, wrote=False, work="y") == ["z", "y"]
    reader = other_connection(path)
    reader.execute("BEGIN")
    reader.execute("SELECT * FROM t").fetchall()  # a snapshot before the next commit
    db.execute_sql("INSERT INTO t VALUES (1)")
    assert commits.committed(False, wrote=True, work="a") == []
    checkpointer.wait_idle()
    assert checkpointer.durable == 1  # the reader kept the checkpoint from copying commit 2
    assert commits.committed(False, wrote=False, work="b") == []
    reader.execute("ROLLBACK")
    reader.close()
    assert commits.flush() == ["a", "b"]  # a checkpoint barrier, once the reader is gone
    assert checkpointer.durable == 2
    checkpointer.close()
    db.close()


def test_group_commit_last_transaction_syncs_and_flush_releases_the_rest(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    checkpointer = Checkpointer(path)
    commits = GroupCommit(db, checkpointer)
    assert commits.before(last=True) is True
    assert synchronous(db) == 2
    db.execute_sql("INSERT INTO t VALUES (1)")
    assert commits.committed(True, wrote=True, work="a") == ["a"]  # its own fsync
    assert commits.before() is False
    assert commits.committed(False, wrote=False, work="b") == ["b"]  # follows a durable commit
    assert commits.flush() == []
    assert synchronous(db) == 2  # the connection is left at the store's own level
    checkpointer.close()
    db.close()


def test_group_commit_leaves_rollback_journal_stores_alone(tmp_path):
    db = wal_store(tmp_path / "s.db", journal="delete")
    commits = GroupCommit(db, None)
    assert not commits.enabled
    assert all(commits.before() for _ in range(5))
    assert commits.committed(True, wrote=True, work=1) == [1]
    assert synchronous(db) == 2
    db.close()


def test_turns_token_pause_without_other_writers(tmp_path):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    turns = Turns(db, clock=clock, sleep=clock.sleep)
    turns.after_commit(clock(), held_s=0.020)
    assert clock.slept <= MIN_S  # nobody else writes: no real pause
    db.close()


def test_turns_pace_for_a_process_that_holds_the_store_open(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    code = "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1'); print(1, flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "1"  # a Hermes with the store open, writing nothing yet
        assert store_holders(path, others_count=False) == [holder.pid]
        clock = SleepClock()
        turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: held_by_its_owner(path))
        assert turns.others_may_write and not turns.others_writing  # idle-sized transactions, and a turn
        turns.after_commit(clock(), held_s=0.020)  # no commit of its own seen: still, it may write now
        assert clock.slept >= poll_interval(0.020)
    finally:
        holder.kill()
        holder.wait()
    assert not held_by_its_owner(path)
    turns._held_at = float("-inf")  # looked at again at once
    clock.sleeps.clear()
    turns.after_commit(clock(), held_s=0.020)
    assert clock.slept <= MIN_S  # nobody holds it: a token pause
    db.close()


def test_pacing_looks_only_into_the_owners_processes_and_a_failed_look_counts_as_held(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    db = wal_store(path)
    listdir = os.listdir

    def as_an_owner(folder):  # another user's process, as a home's owner sees it: no fd listing
        if folder == "/proc":
            return ["1", str(os.getpid())]
        if folder == "/proc/1/fd":
            raise PermissionError(13, "Permission denied", folder)
        return listdir(folder)

    monkeypatch.setattr(holders_module.os, "listdir", as_an_owner)
    assert store_holders(path) is None  # a rollback-journal store: unknown is held
    assert store_holders(path, wal=True) == ([] if HOST_PIDS else None)  # a WAL store: pid 1 holds no lock on it
    assert held_by_its_owner(path) is False  # pacing: nobody of the owner's holds it
    monkeypatch.setattr(holders_module.os, "listdir", listdir)

    def fails():
        raise OSError(5, "Input/output error")

    turns = Turns(db, held=fails)
    assert turns.others_may_write and not turns.others_writing  # cannot tell: as if it were held
    db.close()


def test_turns_wait_for_an_active_writer_and_end_when_it_has_written(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    clock = SleepClock()
    turns = Turns(db, clock=clock, sleep=clock.sleep)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("INSERT INTO t VALUES (1)")  # another connection writes: it is active
    turns.after_commit(clock(), held_s=0.001)  # sees it; the version moves on
    clock.sleeps.clear()
    turns.after_commit(clock(), held_s=0.020)  # active, but does not write now: up to held time
    assert clock.slept == pytest.approx(poll_interval(0.020) + SLACK_S)  # the writer's next poll, and a little

    def writes_while_we_sleep(seconds):  # the waiting writer takes its turn at its first poll
        clock.sleep(seconds)
        other.execute("INSERT INTO t VALUES (2)")

    turns.sleep = writes_while_we_sleep
    clock.sleeps.clear()
    turns.after_commit(clock(), held_s=0.100)  # the turn ends at its commit, not at the poll's end
    assert clock.sleeps == [POLL_S]
    other.close()
    db.close()


@pytest.mark.parametrize("holder, writer, alone", [
    ([False, False, False], False, [True, True, True]),  # nobody: alone throughout
    ([False, True, False], False, [True, False, False]),  # a holder once: never alone again
    ([False, False, False], True, [True, False, False]),  # a commit once (a Hermes we cannot look into)
])
def test_alone_is_nobody_else_seen_since_we_began_and_ends_for_the_run(tmp_path, holder, writer, alone):
    path = tmp_path / "s.db"
    db = wal_store(path)
    clock = SleepClock()
    held = iter(holder)
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: next(held))
    seen = []
    for n in range(3):
        turns._held_at = float("-inf")  # the holders looked at again at once
        if writer and n == 1:
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("INSERT INTO t VALUES (1)")
            other.close()
            turns.after_commit(clock(), held_s=0.001)  # sees the version move
        seen.append(turns.alone)
        clock.sleep(2 * 1.0)  # past ACTIVE_S: nobody is writing now
    assert seen == alone
    db.close()


@pytest.mark.parametrize("event", ["commit", "busy"])
def test_alone_ends_for_good_at_a_commit_or_a_taken_lock_whenever_it_is_read(tmp_path, event):
    path = tmp_path / "s.db"
    db = wal_store(path)
    clock = SleepClock()
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: False)
    assert turns.alone
    if event == "commit":
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("INSERT INTO t VALUES (1)")
        other.close()
        turns.after_commit(clock(), held_s=0.001)  # sees the version move
    else:
        turns.busy()  # our BEGIN found the lock taken
    assert not turns.nobody_seen  # at once, without a look: a retried transaction is careful
    clock.sleep(10 * 1.0)  # read long after that writer was last seen (ACTIVE_S)
    assert not turns.alone and not turns.others_writing
    db.close()


@pytest.mark.parametrize("free, held, alone, held_now", [
    (True, True, True, False),  # known free: the owner's look is not needed
    (False, False, False, False),  # not known free (a process that cannot be looked into): careful,
                                   # and the owner's look says whether to pause for a writer
    (False, True, False, True),
])
def test_alone_needs_the_store_known_free_and_the_owners_look_sets_the_pauses(tmp_path, free, held, alone,
                                                                              held_now):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: held, free=lambda: free)
    assert turns.alone is alone and turns.others_may_write is held_now
    db.close()


def _spend(seconds: float) -> None:
    """A look that costs `seconds` of CPU time (a look's cost: what it takes of a core, not waits)."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_a_look_too_dear_to_take_often_ends_being_alone(tmp_path):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: _spend(LOOK_SHARE * HELD_EVERY_S + 0.02))
    assert not turns.alone  # looked at less often than HELD_EVERY_S it would have to be
    db.close()


def _gated_looks(gate: threading.Event, looked: list, second_finds: bool):
    """`free` for Turns: the store free at the first look; the second waits for `gate`, then finds
    a holder if `second_finds`."""
    def free():
        looked.append(threading.current_thread().name)
        if len(looked) == 2:
            gate.wait(10)
            return not second_finds
        return True
    return free


def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_looks_run_on_a_thread_of_their_own_and_only_the_first_is_waited_for(tmp_path):
    from hermes_admin.profile.engine.turns import _Aside
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    gate, looked = threading.Event(), []
    held_on = []
    turns = Turns(db, clock=clock, sleep=clock.sleep, looks=_Aside(),
                  held=lambda: held_on.append(threading.current_thread().name) or False,
                  free=_gated_looks(gate, looked, second_finds=True))
    assert turns.alone and looked == ["hermes-admin-look"]  # the first answer waited for: it sizes the first transaction
    clock.sleep(ALONE_HELD_EVERY_S)
    began = time.monotonic()
    assert turns.alone and time.monotonic() - began < 5  # the second under way on its thread, not waited for
    _until(lambda: len(looked) == 2)
    clock.sleep(HELD_EVERY_S)
    assert turns.alone and len(looked) == 2  # none begins while one is under way
    gate.set()
    _until(lambda: turns._looking.done())
    assert not turns.alone  # its answer taken at the first call after it ended: a holder
    clock.sleep(HELD_EVERY_S)
    assert not turns.others_may_write and held_on[-1] == threading.current_thread().name  # careful: looked in place
    db.close()


def test_a_look_not_back_in_time_counts_as_one_that_failed(tmp_path, monkeypatch):
    from hermes_admin.profile.engine import turns as turns_module
    from hermes_admin.profile.engine.turns import ACTIVE_S, _Aside
    monkeypatch.setattr(turns_module, "LATE_S", LATE_S := 0.3)  # real time, whatever the turns' clock: shorter here
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    gate, looked = threading.Event(), []
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: False, looks=_Aside(),
                  free=_gated_looks(gate, looked, second_finds=False))
    assert turns.alone and not turns.others_may_write
    clock.sleep(ALONE_HELD_EVERY_S)
    assert turns.alone  # the second look begins
    _until(lambda: len(looked) == 2)
    time.sleep(LATE_S * 1.1)  # a starved thread, or a file system that does not answer
    assert not turns.alone and turns.others_may_write  # we cannot watch closely enough: as if held
    gate.set()
    _until(lambda: turns._looking.done())
    clock.sleep(ACTIVE_S)
    assert not turns.alone and not turns.others_may_write  # back, it says nobody holds it: no pauses, still careful
    db.close()


def test_the_first_look_is_waited_for_no_longer_than_a_late_one(tmp_path, monkeypatch):
    from hermes_admin.profile.engine import turns as turns_module
    from hermes_admin.profile.engine.turns import _Aside
    monkeypatch.setattr(turns_module, "LATE_S", LATE_S := 0.5)  # the bound read when waited: shorter here
    db = wal_store(tmp_path / "s.db")
    gate = threading.Event()
    turns = Turns(db, held=lambda: False, free=lambda: gate.wait(10), looks=_Aside())
    began = time.monotonic()
    assert not turns.alone and turns.others_may_write  # not back in time: as if held
    assert LATE_S <= time.monotonic() - began < 5
    gate.set()
    db.close()


def test_in_a_pid_namespace_of_its_own_the_engine_is_never_alone(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    db = wal_store(path)
    known = holders_module.look(holders_module.store_files(path), wal=True).holders == []
    assert Turns.of_store(db, path, wal=True).alone is known  # in WAL the kernel's lock table tells
    monkeypatch.setattr(holders_module, "in_the_host_pid_namespace", lambda: False)
    turns = Turns.of_store(db, path, wal=True)
    assert not turns.alone and not turns.others_may_write  # a Hermes outside would be seen by no scan
    db.close()


def test_while_alone_the_holders_are_looked_at_more_often_as_their_cost_allows(tmp_path):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    looks, answers = [], iter([False, False, False, False, True, False, False])

    def held(cost_s=0.0):
        looks.append(clock())
        _spend(cost_s)
        return next(answers)

    turns = Turns(db, clock=clock, sleep=clock.sleep, held=held)
    assert turns.alone and len(looks) == 1
    clock.sleep(ALONE_HELD_EVERY_S / 2)
    assert turns.alone and len(looks) == 1  # not yet
    clock.sleep(ALONE_HELD_EVERY_S / 2)
    assert turns.alone and len(looks) == 2  # a Hermes that starts meanwhile is seen within half a second
    turns._held = lambda: held(0.03)  # a look that costs 30 ms: at most LOOK_SHARE of the time
    clock.sleep(ALONE_HELD_EVERY_S)
    assert turns.alone and len(looks) == 3
    clock.sleep(ALONE_HELD_EVERY_S)
    assert turns.alone and len(looks) == 3  # 30 ms / 2 %: every 1.5 s
    clock.sleep(HELD_EVERY_S)  # however long the look took on a busy machine: never rarer than this
    assert turns.alone and len(looks) == 4
    turns._held = held
    clock.sleep(HELD_EVERY_S)
    assert not turns.alone and len(looks) == 5  # seen: careful for the rest of the run
    clock.sleep(ALONE_HELD_EVERY_S)
    assert turns.others_may_write and len(looks) == 5  # as last seen: looked at as seldom as before (HELD_EVERY_S)
    clock.sleep(HELD_EVERY_S)
    assert not turns.others_may_write and len(looks) == 6 and not turns.alone
    db.close()



HOLDS = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT * FROM t').fetchall(); "
         "print(1, flush=True); time.sleep(60)")  # another process with the WAL store open, idle
OUR_LOCK = ("import fcntl, os, struct, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "got = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)); "
            "print(struct.unpack('hhqqi4x', got)[4])")  # the pid whose lock is on the shared memory


def holding(command: list[str]) -> subprocess.Popen:
    holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "1"
    return holder


def test_wal_peers_see_another_process_connection_and_never_ours(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    db.execute_sql("SELECT * FROM t").fetchall()  # our connection maps the store's shared memory
    ours = other_connection(path)  # a second connection of this process: ours too
    ours.execute("SELECT * FROM t").fetchall()
    peers = WalPeers(Path(f"{path}-shm"))
    assert peers.taken() is False
    holder = holding([sys.executable, "-c", HOLDS, str(path)])
    try:
        assert peers.taken() is True  # an idle Hermes, holding no write lock, is seen
    finally:
        holder.kill()
        holder.wait()
    for _ in range(100):
        assert peers.taken() is False
    # asked through SQLite's own descriptor: our connections' locks are where they were
    seen = subprocess.run([sys.executable, "-c", OUR_LOCK, f"{path}-shm"], capture_output=True, text=True, check=True)
    assert int(seen.stdout) == os.getpid()
    shm = os.stat(f"{path}-shm").st_ino
    held = [line.split() for line in Path("/proc/locks").read_text().splitlines()]
    assert any(f[4] == str(os.getpid()) and f[5].endswith(f":{shm}") and f[6] == "128" for f in held)  # SQLite's DMS byte
    ours.close()
    db.close()


def can_unshare_pids() -> bool:
    """Can this process start one in a pid namespace of its own (root, unshare, and a host that lets it)?"""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "--kill-child", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not can_unshare_pids(), reason="no pid namespace of its own can be made here")
def test_wal_peers_see_a_connection_from_another_pid_namespace(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    db.execute_sql("SELECT * FROM t").fetchall()
    holder = holding(["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", HOLDS, str(path)])
    try:
        assert WalPeers(Path(f"{path}-shm")).taken() is True  # a container's Hermes, no /proc scan sees it
    finally:
        holder.kill()
        holder.wait()
    db.close()


def test_turns_ask_the_shared_memory_sqlite_opened_and_only_in_wal(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    db.execute_sql("SELECT * FROM t").fetchall()
    (tmp_path / "link.db").symlink_to(path)
    linked = open_readwrite(tmp_path / "link.db")  # SQLite resolves the link: its -shm is beside s.db
    linked.execute_sql("SELECT * FROM t").fetchall()
    turns = Turns.of_store(linked, tmp_path / "link.db", wal=True)
    assert turns._peers is not None and turns._peers() is False and turns._peers is not None
    holder = holding([sys.executable, "-c", HOLDS, str(path)])
    try:
        assert turns._peers() is True
    finally:
        holder.kill()
        holder.wait()
    assert Turns.of_store(db, path, wal=False)._peers is None  # a rollback journal: nobody asked that way
    linked.close()
    db.close()


def test_wal_peers_are_unknown_without_a_connection_of_ours(tmp_path):
    path = tmp_path / "s.db"
    wal_store(path).close()
    holder = holding([sys.executable, "-c", HOLDS, str(path)])
    try:  # the shared memory is there, but no connection of this process has it open
        with pytest.raises(OSError):
            WalPeers(Path(f"{path}-shm")).taken()  # unknown: never asked through a descriptor of our own
    finally:
        holder.kill()
        holder.wait()
    db = open_readwrite(path)
    db.execute_sql("SELECT * FROM t").fetchall()
    peers = WalPeers(Path(f"{path}-shm"))
    assert peers.taken() is False
    db.close()  # SQLite's descriptor closed (the number may come back for another file)
    with pytest.raises(OSError):
        peers.taken()
    os.unlink(f"{path}-shm") if os.path.exists(f"{path}-shm") else None
    os.symlink(path, f"{path}-shm")  # a link planted where the shared memory was: never followed
    with pytest.raises(OSError):
        WalPeers(Path(f"{path}-shm")).taken()


@pytest.mark.parametrize("answers, alone", [
    ([False, False, False], [True, True, True]),  # nobody: alone throughout
    ([False, True, False], [True, False, False]),  # another connection once: careful for the run
    ([True, False, False], [False, False, False]),
])
def test_with_peers_alone_is_asked_before_every_transaction(tmp_path, answers, alone):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    asked, looks = iter(answers), []
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: looks.append(clock()) or False,
                  peers=lambda: next(asked))
    seen = []
    for _ in answers:
        seen.append(turns.alone)  # no time passes: only the peers' answer changes
        clock.sleep(ALONE_HELD_EVERY_S)
    assert seen == alone
    # the /proc scan as often as ever while alone (it sees a Hermes whose SQLite lost its locks)
    assert len(looks) == (sum(alone) if alone[0] else 0)
    db.close()


def test_alone_with_peers_takes_no_pause_and_a_peer_seen_gets_its_turn(tmp_path):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    taken = [False]
    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: False, peers=lambda: taken[0])
    assert turns.alone
    turns.after_commit(clock(), held_s=0.080)
    assert clock.slept == 0  # whoever comes is seen before our next transaction
    taken[0] = True  # a Hermes opened the store and waits on our lock
    turns.after_commit(clock(), held_s=0.080)
    assert clock.slept == pytest.approx(poll_interval(0.080) + SLACK_S)  # its next poll finds the lock free
    assert not turns.alone
    taken[0] = False  # gone again: careful for the rest of the run, a token pause after each commit
    clock.sleeps.clear()
    turns.after_commit(clock(), held_s=0.020)
    assert clock.slept == pytest.approx(MIN_S)
    db.close()


@pytest.mark.parametrize("first_fails", [True, False])
def test_peers_that_fail_leave_the_pacing_of_a_store_they_cannot_ask(tmp_path, first_fails):
    db = wal_store(tmp_path / "s.db")
    clock = SleepClock()
    asked, looks = [], []

    def peers():
        asked.append(clock())
        if first_fails or len(asked) > 1:
            raise OSError(9, "Bad file descriptor")
        return False

    turns = Turns(db, clock=clock, sleep=clock.sleep, held=lambda: looks.append(clock()) or False, peers=peers)
    assert turns.alone
    assert turns.alone and turns._peers is None and len(asked) == (1 if first_fails else 2)  # not asked again
    turns.after_commit(clock(), held_s=0.080)
    assert clock.slept == pytest.approx(MIN_S)  # a token pause again, for one that may come
    clock.sleep(ALONE_HELD_EVERY_S)
    assert turns.alone and len(looks) == 2  # and the looks twice a second, as where nobody can be asked
    db.close()


def test_merge_steps_follow_one_another_and_the_turn_comes_after_them(tmp_path):
    now = [100.0]
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds

    db = wal_store(tmp_path / "s.db")
    turns = Turns(db, clock=lambda: now[0], sleep=sleep)
    turns._other_at = 100.0  # an active writer
    turns.after_step(100.0, held_s=0.002)  # a 2 ms merge step: the next one follows at once
    assert sleeps == []
    now[0] = 100.004
    turns.after_step(100.004, held_s=0.002)  # 6 ms since the first began (CHAIN_S): a turn
    assert sum(sleeps) >= poll_interval(0.006)
    sleeps.clear()
    turns.after_commit(now[0], held_s=0.020)  # a delete: its turn at once
    assert sum(sleeps) >= poll_interval(0.020)
    sleeps.clear()
    now[0] += 1.0
    turns._other_at = now[0]
    turns.after_step(now[0], held_s=0.001)  # a short step, then the steps stop: the turn comes then
    assert sleeps == []
    turns.end_chain()
    assert sleeps and sum(sleeps) >= MIN_S
    db.close()


def test_turns_never_spin_on_a_stopped_clock(tmp_path):
    db = wal_store(tmp_path / "s.db")
    sleeps = []
    turns = Turns(db, clock=lambda: 100.0, sleep=sleeps.append)
    turns._other_at = 100.0  # an active writer, and a clock that never moves (freezegun)
    turns.after_commit(99.99, held_s=0.020)
    assert len(sleeps) <= int((MAX_S + SLACK_S) / POLL_S) + 1
    db.close()


def test_checkpointer_copies_the_wal_into_the_store(tmp_path):
    path = tmp_path / "s.db"
    db = wal_store(path)
    db.execute_sql("PRAGMA wal_autocheckpoint=0")
    for i in range(200):
        db.execute_sql("INSERT INTO t VALUES (?)", [i])
    checkpointer = Checkpointer(path)
    checkpointer.nudge()
    checkpointer.wait_idle()
    checkpointer.close()
    busy, frames, copied = db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames == copied  # nothing was left to copy
    db.close()


def test_remover_unlinks_files_and_links_never_folders_or_targets(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    target = tmp_path / "outside.txt"
    target.write_text("keep me")
    (sessions / "a.jsonl").write_text("{}")
    (sessions / "b.jsonl").symlink_to(target)
    (sessions / "c.json").mkdir()
    remover = FileRemover(str(sessions))
    remover.remove([str(sessions / n) for n in ("a.jsonl", "b.jsonl", "c.json", "gone.json")])
    remover.drain()
    assert sorted(os.path.basename(p) for p in remover.removed) == ["a.jsonl", "b.jsonl"]
    assert remover.skipped == []
    remover.close()
    assert target.read_text() == "keep me" and (sessions / "c.json").is_dir()


def test_the_remover_process_handles_any_name_a_safe_id_can_make(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    names = ["new\nline.jsonl", "sp ace.json", "\u00e9t\u00e9.jsonl", "x" * 200 + ".json"]
    for name in names:
        (sessions / name).write_text("{}")
    remover = FileRemover(str(sessions))
    remover.remove([str(sessions / n) for n in names[:2]])
    remover.remove([str(sessions / n) for n in names[2:]])
    removed, skipped = remover.take()
    remover.close()
    assert sorted(os.path.basename(p) for p in removed) == sorted(names) and skipped == []
    assert list(sessions.iterdir()) == []


def test_remover_removes_here_when_its_process_cannot_start_or_dies(tmp_path, monkeypatch):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for name in ("a.json", "b.json", "c.json"):
        (sessions / name).write_text("{}")
    remover = FileRemover(str(sessions))
    remover.remove([str(sessions / "a.json")])
    remover.drain()
    remover._process.kill()  # dies: what follows is removed in this process
    remover._process.wait()
    remover.remove([str(sessions / "b.json")])
    removed, _ = remover.take()
    remover.close()
    assert sorted(os.path.basename(p) for p in removed) == ["a.json", "b.json"]

    def cannot_start(*args, **kwargs):
        raise OSError("no such interpreter")

    monkeypatch.setattr(remover_module.subprocess, "Popen", cannot_start)
    remover = FileRemover(str(sessions))
    remover.remove([str(sessions / "c.json")])
    removed, _ = remover.take()
    remover.close()
    assert [os.path.basename(p) for p in removed] == ["c.json"] and list(sessions.iterdir()) == []


def test_file_index_keeps_only_names_an_id_does_not_predict(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for name in ("s1.jsonl", "s1.json", "session_s2.json", "request_dump_s1_20260101_000000_000001.json",
                 "sessions.json", "notes.txt"):
        (sessions / name).write_text("{}")
    index = FileIndex.scan(sessions)
    assert index._other == {"s1": ["request_dump_s1_20260101_000000_000001.json"]}
    assert [f.name for f in index.files_of("s1")] == ["request_dump_s1_20260101_000000_000001.json",
                                                        "s1.json", "s1.jsonl"]
    assert [f.name for f in index.files_of("s2")] == ["session_s2.json"]
    assert {sid for part in index.names(2) for sid, _ in part} == {"s1", "s2"}
    assert index.paths_of("../x") == [] and index.files_of("nope") == []


def test_purge_in_small_batches_does_what_one_batch_does(synth_root, invoke, monkeypatch, tmp_path):
    """Batches of two rows against one batch of all, on identical copies: lineages and
    delegates go (or stay) whole either way."""
    root, kinds = synth_root
    whole = tmp_path / "whole"
    shutil.copytree(root, whole, symlinks=True)
    args = ("purge", "--older-than", "90", "--yes", "--json")
    assert invoke("--root", str(whole), *args).exit_code in (0, 1)
    monkeypatch.setattr(parts, "session_batches", functools.partial(parts.session_batches, size=2))
    taken = []  # the next part's first export, begun during the part before: each used, none made twice
    take = export_ahead.ExportAhead._with_primed

    def recorded(self, units, ask):
        found = take(self, units, ask)
        taken.append(found[1])
        return found

    monkeypatch.setattr(export_ahead.ExportAhead, "_with_primed", recorded)
    result = invoke("--root", str(root), *args)
    assert result.exit_code in (0, 1), result.stderr
    for name in ("default", "work", "legacy"):
        k = kinds[name]
        batched, single = home_of(root, name) / "state.db", home_of(whole, name) / "state.db"
        assert row_ids(batched) == row_ids(single)
        assert not row_ids(batched) & set(k["old_ended"] + k["delegate_parent"] + k["delegate_child"])
        assert set(k["lineage"]) <= row_ids(batched)
        assert fts_problems(batched) == []
    went = [i for r in json.loads(result.stdout)["results"] for d in r["done"] for i in d["ids"]]
    assert len(went) == len(set(went))  # no row listed twice across batches
    exported = [unit[0] for export in root.rglob(f"*{exports.SUFFIX}")
                for member in exports.load_manifest(export)["members"] for unit in member["units"]]
    assert sorted(exported) == sorted(set(exported)) and set(exported) >= {d["session_id"] for r in
                                                                         json.loads(result.stdout)["results"]
                                                                         for d in r["done"]}
    assert len([t for t in taken if t is not None]) >= 3  # parts of two sessions: most begin primed


def test_a_stop_between_batches_is_reported_and_leaves_the_rest(synth_root, invoke, monkeypatch):
    """A stop request (the daemon's SIGTERM) ends the purge after the batch in hand, and says so."""
    root, _ = synth_root
    batches = functools.partial(parts.session_batches, size=2)

    def stop_after_first(*args, **kwargs):
        for n, batch in enumerate(batches(*args, **kwargs)):
            yield batch
            if n == 0:
                stopping.request()

    monkeypatch.setattr(parts, "session_batches", stop_after_first)
    before = len(row_ids(home_of(root, "default") / "state.db"))
    try:
        result = invoke("--root", str(root), "purge", "-p", "default", "--older-than", "90", "--yes", "--json")
    finally:
        stopping.clear()
    (purge,) = [r for r in json.loads(result.stdout)["results"] if r["task"] == "purge"]
    assert any(note.startswith("stopped on request") for note in purge["notes"])
    assert purge["rows"] + len(purge["kept"]) < before  # the later batches were never looked at


def test_a_stop_as_a_profile_begins_still_names_it_in_the_report(synth_root, invoke, monkeypatch):
    """The stop comes after the profile loop looked, before its first task: the profile is reported
    (its task skipped, and why), never left out of the report."""
    from hermes_admin.profile import jobs

    root, _ = synth_root
    entered = jobs._enter

    def enter_then_stop(profile, isolated):
        entered(profile, isolated)
        stopping.request()

    monkeypatch.setattr(jobs, "_enter", enter_then_stop)
    before = row_ids(home_of(root, "default") / "state.db")
    try:
        result = invoke("--root", str(root), "purge", "-p", "default", "--older-than", "90", "--yes", "--json")
    finally:
        stopping.clear()
    (purge,) = [r for r in json.loads(result.stdout)["results"] if r["task"] == "purge"]
    assert purge["status"] == "skipped" and purge["why"] == "stopped on request before it began"
    assert row_ids(home_of(root, "default") / "state.db") == before


def test_compact_json_report_is_what_json_dump_writes(monkeypatch):
    from hermes_admin import report
    from hermes_admin.results import Done

    doc = {"results": [{"done": [Done(f"s{i}", (f"s{i}", "d"), "age") for i in range(10)],
                        "files_removed": [f"/s/{i}\n.json" for i in range(4)], "kept": {"a": "b"}}],
           "empty": [], "short": [1, 2], "nested": [[1, {"x": (True, None)}]], 7: 1.5}
    pieces: list[str] = []
    report._write_compact(doc, pieces.append)
    assert "".join(pieces) == json.dumps(doc, default=report._plain)



@needs_host_pids
def test_a_connection_the_owner_cannot_look_into_is_seen_by_its_lock(tmp_path, monkeypatch):
    """VACUUM's scan as a home's owner: another user's process (here one whose fds cannot be
    listed) with the WAL store open holds a lock on it, which /proc/locks shows to anyone."""
    path = tmp_path / "s.db"
    db = wal_store(path)
    code = "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT COUNT(*) FROM sqlite_master').fetchall(); print(1, flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    listdir = os.listdir

    def hidden(folder):
        if folder == f"/proc/{holder.pid}/fd":
            raise PermissionError(13, "Permission denied", folder)
        return listdir(folder)

    try:
        assert holder.stdout.readline().strip() == "1"
        monkeypatch.setattr(holders_module.os, "listdir", hidden)
        assert store_holders(path, wal=True) == [holder.pid]
        assert store_holders(path) is None
        assert held_by_its_owner(path) is False  # pacing looks at the owner's processes only
        real_open = open

        def no_locks_table(name, *args, **kwargs):
            if name == "/proc/locks":
                raise PermissionError(13, "Permission denied", name)
            return real_open(name, *args, **kwargs)

        monkeypatch.setattr("builtins.open", no_locks_table)
        assert store_holders(path, wal=True) is None  # cannot be read: unknown is held
    finally:
        monkeypatch.undo()
        holder.kill()
        holder.wait()
    assert store_holders(path, wal=True) == []
    db.close()


@pytest.mark.parametrize("table, expected", [
    ("1: POSIX  ADVISORY  READ 4321 fe:00:77 128 128\n", {4321}),
    ("1: POSIX  ADVISORY  WRITE 4321 fe:00:78 0 EOF\n1: -> POSIX  ADVISORY  WRITE 99 fe:00:77 0 EOF\n", {99}),
    ("2: OFDLCK ADVISORY  READ -1 fe:00:77 128 128\n", {-1}),
    ("2: OFDLCK ADVISORY  READ -1 00:2e:77 128 128\n", set()),  # the same inode on her tmpfs: not this file
    ("3: FLOCK  ADVISORY  WRITE 12 fe:00:5 0 EOF\n", set()),
    ("3: FLOCK  ADVISORY  WRITE 12 fe:00:77 0 EOF\n4: LEASE  ACTIVE    READ 13 fe:00:77 0 EOF\n", {12, 13}),
    ("5: POSIX  ADVISORY  WRITE 7 fe:00:9 0 EOF\n5: -> POSIX  ADVISORY  WRITE 8 fe:00:77 0 EOF\n"
     "5:  -> POSIX  ADVISORY  WRITE 9 fe:00:77 0 EOF\n", {8, 9}),
    ("", set()),
    ("1: garbage\n", None),
])
def test_the_locks_table_is_read_by_device_and_inode(table, expected, tmp_path, monkeypatch):
    locks = tmp_path / "locks"
    locks.write_text(table)
    real_open = open
    monkeypatch.setattr("builtins.open", lambda name, *a, **k: real_open(locks if name == "/proc/locks" else name, *a, **k))
    assert lock_holders({("fe:00", 77)}) == expected


def test_a_flooded_locks_table_is_unknown_and_said_once(tmp_path, monkeypatch):
    """Anyone can fill /proc/locks: read up to a bound, past it the table is unknown (no VACUUM)."""
    from hermes_admin import lockrecord

    locks = tmp_path / "locks"
    locks.write_text("".join(f"{n}: POSIX  ADVISORY  READ {n} fe:00:{n} 0 EOF\n" for n in range(1, 60)))
    real_open = open
    monkeypatch.setattr("builtins.open", lambda name, *a, **k: real_open(locks if name == "/proc/locks" else name, *a, **k))
    assert lock_holders({("fe:00", 7)}) == {7}
    monkeypatch.setattr(lockrecord, "LOCK_LINES", 50)
    said: list[str] = []
    assert lock_holders({("fe:00", 7)}, said) is None and lock_holders({("fe:00", 7)}, said) is None
    assert len(said) == 1 and "more than 50 lines" in said[0]  # once, however often it is read
    path = tmp_path / "s.db"
    db = wal_store(path)
    why: list[str] = []
    assert store_holders(path, wal=True, why=why) is None
    assert why == said
    db.close()


def test_a_descriptor_flood_bounds_the_holder_scan(tmp_path, monkeypatch):
    """100 processes with 20 000 descriptors each cannot make the scan take long: past its bound
    the answer is unknown (held: no VACUUM), with one line saying why."""
    from hermes_admin import lockrecord

    path = tmp_path / "s.db"
    db = wal_store(path)
    monkeypatch.setattr(lockrecord, "SCAN_FDS", 3)
    why: list[str] = []
    assert store_holders(path, wal=True, why=why) is None
    assert len(why) == 1 and "gave up" in why[0]
    monkeypatch.setattr(lockrecord, "SCAN_FDS", 10**6)
    monkeypatch.setattr(lockrecord, "SCAN_SECONDS", -1.0)
    assert store_holders(path, wal=True) is None
    db.close()


def test_what_the_scan_cannot_see_makes_it_careful(tmp_path, monkeypatch):
    """`hidepid` (other users' processes not listed, pid 1 among them), a pid namespace of our own
    (a Hermes outside it is in no table here), an fd link we may not stat: unknown, where a lock
    could not tell."""
    path = tmp_path / "s.db"
    db = wal_store(path)
    listdir = os.listdir
    monkeypatch.setattr(holders_module.os, "listdir",
                        lambda folder: [str(os.getpid())] if folder == "/proc" else listdir(folder))
    assert store_holders(path) is None  # rollback journal: an idle connection of theirs holds no lock
    assert store_holders(path, wal=True) == ([] if HOST_PIDS else None)  # WAL: theirs would show in /proc/locks
    monkeypatch.undo()
    assert store_holders(path, wal=True) == ([] if HOST_PIDS else None)
    monkeypatch.setattr(holders_module, "in_the_host_pid_namespace", lambda: False)
    assert store_holders(path, wal=True) is None
    assert held_by_its_owner(path) is False  # pacing looks at the owner's own processes only
    monkeypatch.undo()
    stat = os.stat

    def fd_link_refused(name, *args, **kwargs):
        if str(name).startswith("/proc/") and "/fd/" in str(name) and not str(name).startswith(f"/proc/{os.getpid()}/"):
            raise PermissionError(13, "Permission denied", name)
        return stat(name, *args, **kwargs)

    monkeypatch.setattr(holders_module.os, "stat", fd_link_refused)
    assert store_holders(path) is None  # (as root too: some sandboxes refuse the stat of pid 1's fds)
    assert store_holders(path, wal=True) == ([] if HOST_PIDS else None)
    db.close()

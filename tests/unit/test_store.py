import sqlite3
import threading
import time

import apsw
import peewee
import pytest

from hermes_admin.model import Profile
from hermes_admin.profile.store import Store, StoreError
from hermes_admin.profile.store import pragmas
from hermes_admin.profile.store.connect import SPILL_PAGES, WriteLockHeld, open_readwrite, write_transaction
from hermes_admin.synth.builder import SynthStore
from tests.helpers import SleepClock, other_connection


def profile_at(tmp_path, name="p"):
    home = tmp_path / name
    home.mkdir(parents=True, exist_ok=True)
    return Profile(root=tmp_path, name=name, home=home)


@pytest.mark.parametrize("version, has_pinned", [(22, False), (30, True)])
def test_open_introspects_either_schema(tmp_path, version, has_pinned):
    profile = profile_at(tmp_path)
    SynthStore(profile.store_path, version=version).close()
    with Store.open(profile) as store:
        assert store.schema.version == version
        assert store.schema.has_column("sessions", "pinned") is has_pinned
        assert store.schema.has_column("sessions", "last_activity_at") is has_pinned
        assert store.schema.has_table("system_prompts") is has_pinned


def test_garbage_file_is_a_one_line_error_naming_profile_and_file(tmp_path):
    profile = profile_at(tmp_path, "junk")
    profile.store_path.write_bytes(b"this is not sqlite\n" * 200)
    before = profile.store_path.read_bytes()
    with pytest.raises(StoreError) as err:
        Store.open(profile)
    message = str(err.value)
    assert "\n" not in message
    assert "'junk'" in message and str(profile.store_path) in message
    assert "not a database" in message
    assert profile.store_path.read_bytes() == before


@pytest.mark.parametrize("setup, expected", [
    (lambda c: None, "no sessions table"),  # an empty (zero-byte) file
    (lambda c: c.execute("CREATE TABLE other(x)"), "no sessions table"),
    (lambda c: c.execute("CREATE TABLE sessions(id)"), "no messages table"),
])
def test_sqlite_files_that_are_not_hermes_stores(tmp_path, setup, expected):
    profile = profile_at(tmp_path)
    conn = sqlite3.connect(profile.store_path)
    setup(conn)
    conn.commit(), conn.close()
    with pytest.raises(StoreError, match=expected):
        Store.open(profile)


def _newer(profile, *ddl):
    SynthStore(profile.store_path, version=30).close()
    conn = sqlite3.connect(profile.store_path)
    conn.execute("UPDATE schema_version SET version = 40")
    for statement in ddl:
        conn.execute(statement)
    conn.commit(), conn.close()


def test_newer_schema_holding_only_what_is_understood_is_maintained(tmp_path):
    profile = profile_at(tmp_path)
    # a new table that names no session (Hermes adds such tables without a thought for us)
    _newer(profile, "CREATE TABLE gateway_metrics(name TEXT, value REAL)")
    with Store.open(profile) as store:
        assert store.schema.version == 40


@pytest.mark.parametrize("ddl, named", [
    ("CREATE TABLE session_notes(session_id TEXT, note TEXT)", "table session_notes"),
    ("CREATE TABLE inbox(conversation_id TEXT)", "table inbox"),
    ("CREATE VIEW recent AS SELECT id FROM sessions", "view recent"),
    ("CREATE TRIGGER messages_audit AFTER DELETE ON messages BEGIN SELECT 1; END", "trigger messages_audit"),
])
def test_newer_schema_with_what_is_not_understood_is_refused_naming_it(tmp_path, ddl, named):
    profile = profile_at(tmp_path)
    _newer(profile, ddl)
    before = profile.store_path.read_bytes()
    with pytest.raises(StoreError) as err:
        Store.open(profile)
    message = str(err.value)
    assert "schema version 40" in message and named in message and "\n" not in message
    assert str(profile.store_path) in message
    assert profile.store_path.read_bytes() == before


def test_missing_store(tmp_path):
    with pytest.raises(StoreError, match="no state.db"):
        Store.open(profile_at(tmp_path))


def test_readonly_connection_cannot_write(tmp_path):
    profile = profile_at(tmp_path)
    SynthStore(profile.store_path, version=30).close()
    with Store.open(profile) as store:
        with pytest.raises(peewee.OperationalError):
            store.db.execute_sql("DELETE FROM sessions")


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_write_transaction_keeps_journal_mode_and_retries_on_lock(tmp_path, mode):
    path = tmp_path / "state.db"
    SynthStore(path, version=30).close()
    conn = other_connection(path)
    conn.execute(f"PRAGMA journal_mode={mode}")
    conn.execute("BEGIN IMMEDIATE")  # another process holds the write lock...
    # Timed from before the release is armed: the lock is held at least 0.4 s of it, however
    # slowly this machine opens the store, so no lower bound below that can be missed.
    started = time.monotonic()
    release = threading.Timer(0.4, lambda: conn.execute("COMMIT"))
    release.start()
    db = open_readwrite(path)
    attempts = []

    def work(d):
        attempts.append(1)
        d.execute_sql("INSERT INTO state_meta(key, value) VALUES ('k', 'v')")
        return "done"

    assert write_transaction(db, work, patience_s=5) == "done"
    release.join()
    assert time.monotonic() - started >= 0.3  # ...so we waited for it
    assert db.execute_sql("PRAGMA foreign_keys").fetchone()[0] == 1
    db.close()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == mode
    assert conn.execute("SELECT value FROM state_meta WHERE key='k'").fetchone() == ("v",)
    conn.close()


def test_write_transaction_gives_up_after_patience(tmp_path):
    path = tmp_path / "state.db"
    SynthStore(path, version=22).close()
    holder = other_connection(path)
    holder.execute("BEGIN IMMEDIATE")
    db = open_readwrite(path)
    with pytest.raises(WriteLockHeld, match="held the write lock"):
        write_transaction(db, lambda d: d.execute_sql("DELETE FROM state_meta"), patience_s=0.3)
    holder.execute("ROLLBACK")
    db.close(), holder.close()


def test_write_transaction_rolls_back_on_error(tmp_path):
    path = tmp_path / "state.db"
    SynthStore(path, version=30).close()
    db = open_readwrite(path)

    def fails(d):
        d.execute_sql("INSERT INTO state_meta(key, value) VALUES ('x', '1')")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_transaction(db, fails)
    assert db.execute_sql("SELECT COUNT(*) FROM state_meta WHERE key='x'").fetchone()[0] == 0
    db.close()


def test_a_writer_that_makes_progress_is_waited_out_past_patience(tmp_path):
    """Hermes' FTS optimize holds the lock for as long as it takes, writing as it goes: that is
    progress, and it is waited out however much longer than lock_wait it holds the lock. On a clock
    of the test's: the holder writes during each of our pauses, and lets go 1.2 s of them later."""
    path = tmp_path / "state.db"
    SynthStore(path, version=30).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE busywork (x BLOB)")
    holder.execute("PRAGMA cache_size=1")  # each insert goes to the WAL at once: the file grows
    clock = SleepClock()

    def the_holder_works_on(seconds):
        clock.sleep(seconds)
        if holder.in_transaction:
            holder.execute("COMMIT" if clock.slept >= 1.2 else "INSERT INTO busywork VALUES (zeroblob(20000))")

    db = open_readwrite(path, lock_wait_s=0.5)
    assert write_transaction(db, lambda d: d.execute_sql("DELETE FROM state_meta") and "done",
                             sleep=the_holder_works_on, clock=clock) == "done"
    assert clock.slept >= 1.2  # over twice the patience, and never given up
    db.close(), holder.close()


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_the_write_locks_holder_is_named_from_proc_locks(tmp_path, mode):
    import subprocess
    import sys

    from hermes_admin.lockrecord import command_of
    from hermes_admin.holders import write_lock_holder

    path = tmp_path / "state.db"
    SynthStore(path, version=30).close()
    if mode == "delete":
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
    code = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); c.execute(\"INSERT INTO state_meta VALUES ('h', 'x')\"); "
            "print('holding', flush=True); sys.stdin.readline()")
    other = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "holding"
        assert write_lock_holder(path) == other.pid
        assert "BEGIN IMMEDIATE" in command_of(other.pid, 4096)
        db = open_readwrite(path)
        with pytest.raises(WriteLockHeld, match=f"pid {other.pid} "):
            write_transaction(db, lambda d: d.execute_sql("DELETE FROM state_meta"), patience_s=0.3)
        db.close()
    finally:
        other.communicate("\n", timeout=10)
    assert write_lock_holder(path) is None


@pytest.mark.parametrize("step_mib, at_most_mib", [(64, 4.1), (2, 9.5)])
def test_a_wal_another_writer_blew_up_is_cut_back_at_our_next_commit(tmp_path, monkeypatch, step_mib, at_most_mib):
    """Hermes' FTS optimize leaves a WAL of hundreds of MB that stays until its last connection
    closes; the first commit of ours after the WAL starts over cuts it back, by at most a step."""
    from hermes_admin.profile.store import connect

    monkeypatch.setattr(connect, "WAL_CUT_STEP", step_mib << 20)
    path = tmp_path / "state.db"
    holder = other_connection(path)  # the live process that keeps the WAL
    holder.execute("PRAGMA journal_mode=WAL")
    holder.execute("CREATE TABLE t (x BLOB)")
    holder.execute("BEGIN")
    holder.executemany("INSERT INTO t VALUES (?)", [(bytes(4000),) for _ in range(2800)])
    holder.execute("COMMIT")  # one big transaction: about 11.5 MiB of WAL
    holder.execute("PRAGMA wal_checkpoint(PASSIVE)")  # copied back: the next writer starts the WAL over
    wal = tmp_path / "state.db-wal"
    assert wal.stat().st_size > 11 << 20
    db = open_readwrite(path)
    try:
        write_transaction(db, lambda d: d.execute_sql("INSERT INTO t VALUES (1)"))
        assert wal.stat().st_size <= at_most_mib * (1 << 20)
        assert db.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute_sql("SELECT COUNT(*) FROM t").fetchone()[0] == 2801
    finally:
        db.close()
        holder.close()


def _spills(db) -> int:
    """How many times this connection's page cache has written pages out before a COMMIT."""
    return db.connection().status(apsw.SQLITE_DBSTATUS_CACHE_SPILL)[0]


@pytest.mark.parametrize("spill", ["as opened", "as SQLite does by default"])
def test_a_write_transaction_waits_for_no_reader_before_its_commit(tmp_path, spill):
    """In a rollback journal, changed pages written out before COMMIT (a cache spill) take the
    exclusive lock: with a reader holding the store, each spilling statement would wait out the
    busy timeout with the write lock held. Ours keep their pages until COMMIT, the one place that
    waits for readers."""
    path = tmp_path / "state.db"
    SynthStore(path, version=30, journal="delete").close()
    reader = other_connection(path)
    db = open_readwrite(path)
    db.execute_sql("PRAGMA cache_size=20")  # outgrown by these inserts, as the default is by a big delete
    if spill != "as opened":
        db.execute_sql("PRAGMA cache_spill=20")  # past the cache, as SQLite's default
    spills = _spills(db)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM sessions").fetchall()  # its read lock, held
    took = []

    def work(d):
        started = time.monotonic()
        for n in range(5):  # five statements, ~150 KB of pages in all
            d.execute_sql("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 10) "
                          "INSERT INTO state_meta(key, value) SELECT ? || '-' || i, randomblob(3000) FROM s",
                          [f"k{n}"])
        took.append(time.monotonic() - started)
        reader.execute("COMMIT")  # the reader done: our COMMIT goes through

    write_transaction(db, work, patience_s=5)
    spilled = _spills(db) - spills
    assert db.execute_sql("SELECT COUNT(*) FROM state_meta WHERE key LIKE 'k%'").fetchone() == (50,)
    db.close()
    reader.close()
    if spill == "as opened":
        assert spilled == 0 and took[0] < 0.4
    else:  # the test's own check: these statements do spill, and each waits the busy timeout
        assert spilled > 0 and took[0] >= 0.6


def test_a_vacuum_spills_as_sqlite_does_and_the_connection_keeps_its_setting(tmp_path):
    """A VACUUM changes every page: kept in memory to its COMMIT, as the engine's short transactions
    keep theirs, they would all add to the run's memory."""
    path = tmp_path / "state.db"
    SynthStore(path, version=30, journal="delete").close()
    db = open_readwrite(path)
    db.execute_sql("CREATE TABLE filler(x)")
    db.execute_sql("WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 300) "
                   "INSERT INTO filler SELECT randomblob(3000) FROM s")  # ~300 pages, under SPILL_PAGES
    db.execute_sql("PRAGMA cache_size=20")
    spills = _spills(db)
    pragmas.vacuum(db)
    assert _spills(db) > spills
    assert db.execute_sql("PRAGMA cache_spill").fetchone() == (SPILL_PAGES,)
    db.close()


@pytest.mark.parametrize("writable", [False, True])
def test_a_read_outside_our_transactions_waits_for_a_rollback_journal_commit(tmp_path, writable):
    """In a rollback journal a reader meets "database is locked" while another connection holds the
    lock to commit: our statements wait for it as the write transaction does, then go on."""
    profile = profile_at(tmp_path)
    SynthStore(profile.store_path, version=30, journal="delete").close()
    holder = other_connection(profile.store_path)
    with Store.open(profile, writable=writable, lock_wait_s=30) as store:
        holder.execute("BEGIN EXCLUSIVE")  # what a commit takes: no reader gets in
        started = time.monotonic()  # before the release is armed: it comes at least 1.2 s from here
        release = threading.Timer(1.2, lambda: holder.execute("COMMIT"))
        release.start()
        assert store.db.execute_sql("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
        assert store.db.execute_sql("PRAGMA data_version").fetchone()[0] >= 1
        release.join()
        assert time.monotonic() - started >= 1.0
    holder.close()


@pytest.mark.parametrize("writable", [False, True])
def test_a_read_gives_up_after_lock_wait_naming_the_lock(tmp_path, writable):
    """The lock wait is the one the store was opened with, read-only or not (the job's --lock-wait,
    passed down: no module default is changed per job)."""
    profile = profile_at(tmp_path)
    SynthStore(profile.store_path, version=30, journal="delete").close()
    holder = other_connection(profile.store_path)
    with Store.open(profile, writable=writable, lock_wait_s=0.5) as store:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(WriteLockHeld, match="held the write lock"):
            store.db.execute_sql("SELECT COUNT(*) FROM sessions")
        holder.execute("ROLLBACK")
    holder.close()

import sqlite3
import threading
import time

import peewee
import pytest

from hermes_admin.protocol import Profile
from hermes_admin.profile.store import Store, StoreError
from hermes_admin.profile.store.connect import open_readwrite, write_transaction
from hermes_admin.synth.builder import SynthStore


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


def test_newer_schema_is_refused(tmp_path):
    profile = profile_at(tmp_path)
    SynthStore(profile.store_path, version=30).close()
    conn = sqlite3.connect(profile.store_path)
    conn.execute("UPDATE schema_version SET version = 31")
    conn.commit(), conn.close()
    with pytest.raises(StoreError, match="schema version 31 is newer"):
        Store.open(profile)


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
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA journal_mode={mode}")
    conn.execute("BEGIN IMMEDIATE")  # another process holds the write lock...
    release = threading.Timer(0.4, lambda: conn.execute("COMMIT"))
    release.start()
    db = open_readwrite(path)
    attempts = []

    def work(d):
        attempts.append(1)
        d.execute_sql("INSERT INTO state_meta(key, value) VALUES ('k', 'v')")
        return "done"

    started = time.monotonic()
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
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    db = open_readwrite(path)
    with pytest.raises(peewee.OperationalError, match="locked"):
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

"""No connection of ours is ever the one that checkpoints and deletes a store's WAL when it closes.

SQLite deletes `-wal` and `-shm` when a connection closes and takes the database's exclusive lock:
alone on the file here, as it would be beside a Hermes whose own locks are gone. So each way we
connect to a store is closed alone on a WAL store with frames in it, and the WAL must stay, whole.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import apsw
import pytest

from hermes_admin.profile.store import keep_wal
from hermes_admin.profile.store.errors import SQLITE_ERRORS
from hermes_admin.profile.store.connect import open_for_checkpoints, open_readonly, open_readwrite, readonly_uri


def wal_store(path: Path) -> Path:
    """A WAL store whose last commits are only in its WAL (no checkpoint yet), left by a process
    whose close did not delete it (as a live Hermes leaves it)."""
    conn = keep_wal.connect(path, keep_wal.READ_WRITE | apsw.SQLITE_OPEN_CREATE)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    conn.executemany("INSERT INTO sessions VALUES (?)", [(f"s{i}",) for i in range(50)])
    conn.close()
    assert Path(f"{path}-wal").stat().st_size > 0
    return path


def plain_close_deletes_it(path: Path) -> bool:
    conn = sqlite3.connect(path)
    conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    conn.close()
    return not Path(f"{path}-wal").exists()


def read_write(path):
    db = open_readwrite(path)
    with db.atomic():
        db.execute_sql("INSERT INTO sessions VALUES ('ours')")
    return db


WAYS = {
    "write (peewee)": read_write,
    "read (peewee, mode=ro)": lambda path: open_readonly(path),
    "checkpoints": lambda path: open_for_checkpoints(path),
    "export reads (peewee, shared by threads)": lambda path: open_readonly(path, shared=True),
    "plain": lambda path: keep_wal.connect(path),
    "plain, mode=ro": lambda path: keep_wal.connect(readonly_uri(path), keep_wal.READ_ONLY),
}


@pytest.mark.parametrize("way", WAYS)
def test_closing_alone_keeps_the_wal(tmp_path, way):
    path = wal_store(tmp_path / "state.db")
    wal = os.stat(f"{path}-wal")
    conn = WAYS[way](path)
    (getattr(conn, "execute_sql", None) or conn.execute)("SELECT COUNT(*) FROM sessions").fetchone()
    conn.close()
    after = os.stat(f"{path}-wal")  # still there, the same file
    assert (after.st_dev, after.st_ino) == (wal.st_dev, wal.st_ino)
    assert Path(f"{path}-shm").exists()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as check:
        assert check.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] >= 50


def test_the_hazard_is_real_for_a_plain_connection(tmp_path):
    """What the guard stands against: a plain connection, alone, deletes the WAL on close."""
    assert plain_close_deletes_it(wal_store(tmp_path / "state.db"))


def test_the_setting_reads_back_on(tmp_path):
    conn = keep_wal.connect(tmp_path / "x.db", keep_wal.READ_WRITE | apsw.SQLITE_OPEN_CREATE)
    try:
        assert conn.config(keep_wal.NO_CKPT_ON_CLOSE, -1) == 1  # -1: read it back, change nothing
    finally:
        conn.close()


@pytest.mark.parametrize("way", [w for w in WAYS if not w.startswith("plain")])
def test_every_store_connection_runs_on_a_sqlite_without_the_wal_reset_bug(tmp_path, way):
    """The library comes with hermes-admin's own install (apsw's wheels): 3.51.3 or later, whatever
    the system's sqlite3 is (3.40.1 on Debian 12)."""
    path = wal_store(tmp_path / "state.db")
    conn = WAYS[way](path)
    try:
        run = getattr(conn, "execute_sql", None) or conn.execute
        version = run("SELECT sqlite_version()").fetchone()[0]
    finally:
        conn.close()
    assert tuple(int(p) for p in version.split(".")) >= keep_wal.FIXED
    assert not keep_wal.has_wal_reset_bug(version)


@pytest.mark.parametrize("version, bug", [("3.7.0", True), ("3.40.1", True), ("3.44.5", True), ("3.44.6", False),
                                          ("3.50.4", True), ("3.50.7", False), ("3.51.2", True), ("3.51.3", False),
                                          ("3.54.1", False), ("3.6.23", False)])
def test_which_libraries_carry_the_wal_reset_bug(version, bug):
    assert keep_wal.has_wal_reset_bug(version) is bug


def test_no_ctypes_in_the_store_layer():
    import ast
    import hermes_admin.profile.store as store

    for path in Path(store.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("ctypes", "sqlite3", "_sqlite3") for n in names) or \
                path.name == "errors.py", f"{path.name} imports {names}"


def test_a_connection_that_cannot_be_guarded_is_refused_before_it_reads(tmp_path, monkeypatch):
    path = wal_store(tmp_path / "state.db")

    def refuse(conn):
        raise keep_wal.WalGuardError("test: no way to keep the WAL")

    monkeypatch.setattr(keep_wal, "keep_wal_on_close", refuse)
    with pytest.raises(apsw.Error, match="keep the WAL"):
        keep_wal.connect(path)
    with pytest.raises(SQLITE_ERRORS, match="keep the WAL"):
        open_readwrite(path)
    assert Path(f"{path}-wal").exists()

"""One SQLite in the test process: `sqlite3.connect` made on apsw's library, hermes-admin's own.

hermes-admin runs on apsw's SQLite (store/keep_wal.py). Two copies of SQLite in one process never
see each other's POSIX locks (a lock belongs to the process), so a test's connection of Python's
own sqlite3 beside an in-process run of ours would neither wait for our locks nor keep them: its
close, believing itself the last, checkpoints and deletes a WAL our connection has mapped (a bus
error), and a "holder" it plays holds nothing against us. So the tests' `sqlite3.connect` is this
small stand-in with the part of sqlite3's interface the tests use (legacy implicit transactions
included), and its errors are sqlite3's. `system_connect` is Python's own, for what must be read
by the system's library (an older reader's check), once no connection of ours is open.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import apsw

system_connect = sqlite3.connect

_ERRORS = {apsw.BusyError: sqlite3.OperationalError, apsw.LockedError: sqlite3.OperationalError,
           apsw.SQLError: sqlite3.OperationalError, apsw.ConstraintError: sqlite3.IntegrityError,
           apsw.ReadOnlyError: sqlite3.OperationalError, apsw.CantOpenError: sqlite3.OperationalError,
           apsw.IOError: sqlite3.OperationalError, apsw.FullError: sqlite3.OperationalError}
_DML = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _translated(exc: apsw.Error) -> sqlite3.Error:
    kind = next((ours for theirs, ours in _ERRORS.items() if isinstance(exc, theirs)), sqlite3.DatabaseError)
    return kind(str(exc))


class Cursor:
    def __init__(self, conn: "Connection", cursor, rows_changed: int):
        self._conn, self._cursor, self.rowcount = conn, cursor, rows_changed
        self.lastrowid = conn._apsw.last_insert_rowid()
        try:
            self.description = cursor.description
        except apsw.ExecutionCompleteError:
            self.description = None

    def __iter__(self):
        try:
            yield from self._cursor
        except apsw.Error as exc:
            raise _translated(exc) from None

    def fetchone(self):
        try:
            return next(iter(self._cursor), None)
        except apsw.Error as exc:
            raise _translated(exc) from None

    def fetchall(self):
        return list(self)

    def close(self) -> None:
        self._cursor.close()


class Connection:
    def __init__(self, database, timeout: float = 5.0, isolation_level: str | None = "", uri: bool = False,
                 check_same_thread: bool = True, **_ignored):
        name = str(database) if isinstance(database, (str, Path)) else database
        flags = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE | (apsw.SQLITE_OPEN_URI if uri else 0)
        if uri and "mode=ro" in name:
            flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
        try:
            self._apsw = apsw.Connection(name, flags=flags)
        except apsw.Error as exc:
            raise _translated(exc) from None
        self._apsw.set_busy_timeout(int(timeout * 1000))
        self.isolation_level = isolation_level

    @property
    def in_transaction(self) -> bool:
        return not self._apsw.get_autocommit()

    @property
    def total_changes(self) -> int:
        return self._apsw.total_changes()

    def execute(self, sql: str, params=()) -> Cursor:
        if self.isolation_level is not None and not self.in_transaction and sql.lstrip().upper().startswith(_DML):
            self._run("BEGIN " + self.isolation_level, ())  # sqlite3's legacy implicit transaction
        return self._run(sql, params)

    def _run(self, sql: str, params) -> Cursor:
        before = self._apsw.total_changes()
        try:
            cursor = self._apsw.execute(sql, params)
        except apsw.Error as exc:
            raise _translated(exc) from None
        return Cursor(self, cursor, self._apsw.total_changes() - before)

    def executemany(self, sql: str, rows) -> Cursor:
        if self.isolation_level is not None and not self.in_transaction and sql.lstrip().upper().startswith(_DML):
            self._run("BEGIN " + self.isolation_level, ())
        before = self._apsw.total_changes()
        try:
            cursor = self._apsw.executemany(sql, list(rows))
        except apsw.Error as exc:
            raise _translated(exc) from None
        return Cursor(self, cursor, self._apsw.total_changes() - before)

    def executescript(self, script: str) -> Cursor:
        if self.in_transaction:
            self.commit()
        return self._run(script, ())

    def commit(self) -> None:
        if self.in_transaction:
            self._run("COMMIT", ())

    def rollback(self) -> None:
        if self.in_transaction:
            self._run("ROLLBACK", ())

    def backup(self, target: "Connection") -> None:
        with target._apsw.backup("main", self._apsw, "main") as copying:
            while not copying.done:
                copying.step(-1)

    def close(self) -> None:
        self._apsw.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.commit()
        else:
            self.rollback()


def connect(database, timeout: float = 5.0, isolation_level: str | None = "", uri: bool = False, **kwargs) -> Connection:
    return Connection(database, timeout=timeout, isolation_level=isolation_level, uri=uri, **kwargs)


def install() -> None:
    """From now on, `sqlite3.connect` in this process is the stand-in (the tests' conftest calls it)."""
    sqlite3.connect = connect

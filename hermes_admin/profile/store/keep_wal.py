"""SQLite connections to a store that can never be the one that removes its `-wal` and `-shm`, on
the SQLite that comes with hermes-admin.

When a connection to a WAL store closes and SQLite can take an exclusive lock on the database
file, it believes it is the last connection: it checkpoints, then deletes `-wal` and `-shm`. A
Hermes process whose POSIX locks were dropped (any `open()`/`close()` of the file in that process
drops them all) is invisible to that lock, and goes on writing into the deleted WAL: every write
"succeeds" and none is ever seen again (README, "How it treats a live store").

`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE` switches that off for one connection: its close neither
checkpoints nor takes the lock nor deletes anything. Every connection we open to a store is made
through `connect()` here, and one that cannot be switched is closed before it ever reads the
file, with an error, rather than used.

The library is apsw's own SQLite (its wheels build it in), not the one Python's `sqlite3` links:
Debian 12's 3.40.1, like every SQLite from 3.7.0 to 3.51.2, carries the WAL-reset bug (a WAL
store corrupted when one connection checkpoints right after another finished one while a third
commits), and ours checkpoint beside a live Hermes. apsw also sets the connection option through
its own API, so nothing here reaches into a library by hand.
"""

from __future__ import annotations

from pathlib import Path

import apsw

NO_CKPT_ON_CLOSE = apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
# The first SQLite without the WAL-reset bug (backports: 3.50.7, 3.44.6); ours must be at least this.
FIXED = (3, 51, 3)
READ_ONLY = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
READ_WRITE = apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI


class WalGuardError(apsw.Error):
    """The connection could not be told to keep the WAL on close: it was closed unused."""


def library_version() -> str:
    """The SQLite every connection of ours runs on."""
    return apsw.sqlite_lib_version()


def has_wal_reset_bug(version: str) -> bool:
    """Does a SQLite of this version carry the WAL-reset bug (3.7.0 to 3.51.2, but the backports)?"""
    try:
        parts = tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return False
    if parts < (3, 7, 0) or parts >= FIXED:
        return False
    return not ((3, 50, 7) <= parts < (3, 51, 0) or (3, 44, 6) <= parts < (3, 45, 0))


def connect(path: str | Path, flags: int = READ_WRITE, busy_timeout_ms: int = 0) -> apsw.Connection:
    """A connection to a store or its copy (a path, or a `file:` URI); it never checkpoints or
    deletes on close. `flags`: READ_ONLY or READ_WRITE (the file must exist either way)."""
    conn = apsw.Connection(str(path), flags=flags)
    try:
        keep_wal_on_close(conn)
        conn.set_busy_timeout(busy_timeout_ms)
    except BaseException:
        conn.close()  # nothing was read yet: the file is not open in WAL mode, the close does nothing
        raise
    return conn


def copy_to(source: apsw.Connection, path: str | Path) -> None:
    """A consistent copy of `source` (SQLite's online backup) into the file at `path` (a new or
    empty file of ours, made beforehand without following links)."""
    target = connect(path, READ_WRITE | apsw.SQLITE_OPEN_CREATE)
    try:
        with target.backup("main", source, "main") as backup:
            while not backup.done:
                backup.step(-1)
    finally:
        target.close()


def keep_wal_on_close(conn: apsw.Connection) -> None:
    if has_wal_reset_bug(apsw.sqlite_lib_version()):  # a build of apsw against a system library
        raise WalGuardError(f"SQLite {apsw.sqlite_lib_version()} carries the WAL-reset bug; "
                            "hermes-admin needs apsw with its own SQLite 3.51.3 or later")
    if conn.config(NO_CKPT_ON_CLOSE, 1) != 1:
        raise WalGuardError("SQLite would not keep the WAL on close (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE)")

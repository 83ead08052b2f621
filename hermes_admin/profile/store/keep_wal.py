"""SQLite connections to a store that can never be the one that removes its `-wal` and `-shm`.

When a connection to a WAL store closes and SQLite can take an exclusive lock on the database
file, it believes it is the last connection: it checkpoints, then deletes `-wal` and `-shm`. A
Hermes process whose POSIX locks were dropped (any `open()`/`close()` of the file in that process
drops them all) is invisible to that lock, and goes on writing into the deleted WAL: every write
"succeeds" and none is ever seen again (README, "How it treats a live store").

`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE` switches that off for one connection: its close neither
checkpoints nor takes the lock nor deletes anything. Every connection we open to a store is made
through `connect()` here, and one that cannot be switched is closed before it ever reads the
file, with an error, rather than used.

Python 3.12 has `Connection.setconfig`. Python 3.11 (Debian 12's) does not, so there the
connection's `sqlite3 *` is read from the `sqlite3.Connection` object (its first field after the
object header in every CPython since the module was written) and `sqlite3_db_config` is called
through ctypes on the very library `_sqlite3` is linked to. No library does this for 3.11, hence
the hand-written call; it is checked before it is trusted: the same library version as Python's, a handle read that
way names the file of a probe connection, and the setting reads back as on.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sqlite3
import tempfile
from pathlib import Path

NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, in sqlite3.h since SQLite 3.16


class WalGuardError(sqlite3.OperationalError):
    """The connection could not be told to keep the WAL on close: it was closed unused."""


def connect(path: str | Path, **kwargs) -> sqlite3.Connection:
    """`sqlite3.connect` for a store or its copy; the connection never checkpoints or deletes on close."""
    conn = sqlite3.connect(path, **kwargs)
    try:
        keep_wal_on_close(conn)
    except BaseException:
        conn.close()  # nothing was read yet: the file is not open in WAL mode, the close does nothing
        raise
    return conn


class KeepWalConnection(sqlite3.Connection):
    """The same, as a connection factory (what peewee's `connect_params` takes)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        try:
            keep_wal_on_close(self)
        except BaseException:
            self.close()
            raise


def keep_wal_on_close(conn: sqlite3.Connection) -> None:
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:  # Python 3.12+
        setconfig(NO_CKPT_ON_CLOSE, True)
        if not conn.getconfig(NO_CKPT_ON_CLOSE):
            raise WalGuardError("SQLite would not keep the WAL on close (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE)")
        return
    _native_keep_wal(conn)


def _native_keep_wal(conn: sqlite3.Connection) -> None:
    lib = _library()
    now = ctypes.c_int(-1)
    rc = lib.sqlite3_db_config(_handle(conn), NO_CKPT_ON_CLOSE, ctypes.c_int(1), ctypes.byref(now))
    if rc != 0 or now.value != 1:
        raise WalGuardError(f"SQLite refused SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (rc {rc})")


def _handle(conn: sqlite3.Connection) -> ctypes.c_void_p:
    """The connection's `sqlite3 *`: the first field after the object header."""
    return ctypes.c_void_p(ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value)


_LIB = None  # the SQLite library _sqlite3 uses, found once (3.11 only)


def _library():
    """The SQLite library the `_sqlite3` module is linked to (or built into), typed for our calls,
    once it has shown that a handle read by `_handle` is what it takes: on a file of our own, in a
    folder of our own, the handle must name that file. Reading it does not touch the file."""
    global _LIB
    if _LIB is None:
        if platform.python_implementation() != "CPython":
            raise WalGuardError(f"cannot keep the WAL on close under {platform.python_implementation()}")
        import _sqlite3

        try:
            lib = ctypes.CDLL(_sqlite3.__file__)  # its own dependencies' symbols are found through it
            lib.sqlite3_libversion.restype = ctypes.c_char_p
            lib.sqlite3_db_filename.restype = ctypes.c_char_p
            lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
            lib.sqlite3_db_config.restype = ctypes.c_int
        except (OSError, AttributeError) as exc:
            raise WalGuardError(f"cannot reach SQLite's C API to keep the WAL on close: {exc}") from None
        if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
            raise WalGuardError("the SQLite library reached through ctypes is not the one Python uses")
        with tempfile.TemporaryDirectory(prefix="hermes-admin-") as folder:
            probe = os.path.realpath(os.path.join(folder, "probe.db"))
            conn = sqlite3.connect(probe)
            try:
                named = lib.sqlite3_db_filename(_handle(conn), b"main")
            finally:
                conn.close()
        if named is None or os.path.realpath(os.fsdecode(named)) != probe:
            raise WalGuardError("cannot find a connection's SQLite handle in this Python build")
        _LIB = lib
    return _LIB

"""The store's and the connection's settings and counters the engine reads and sets (its PRAGMAs),
and the space-giving commands (VACUUM, incremental vacuum, checkpoints): engine/space.py,
group_commit.py and turns.py decide when, these say how."""

from __future__ import annotations

import peewee

INCREMENTAL = 2  # PRAGMA auto_vacuum's value for incremental auto-vacuum


def data_version(db: peewee.SqliteDatabase) -> int:
    """SQLite's count of other connections' commits, as this connection sees them."""
    return db.execute_sql("PRAGMA data_version").fetchone()[0]


def synchronous(db: peewee.SqliteDatabase) -> int:
    return int(db.execute_sql("PRAGMA synchronous").fetchone()[0])


def set_synchronous(db: peewee.SqliteDatabase, level: int) -> None:
    db.execute_sql(f"PRAGMA synchronous={int(level)}")


def auto_vacuum(db: peewee.SqliteDatabase) -> int:
    return db.execute_sql("PRAGMA auto_vacuum").fetchone()[0]


def switch_to_incremental(db: peewee.SqliteDatabase) -> None:
    """Incremental auto-vacuum, from the next VACUUM on."""
    db.execute_sql("PRAGMA auto_vacuum = INCREMENTAL")


def page_count(db: peewee.SqliteDatabase) -> int:
    return db.execute_sql("PRAGMA page_count").fetchone()[0]


def free_pages(db: peewee.SqliteDatabase) -> int:
    return db.execute_sql("PRAGMA freelist_count").fetchone()[0]


def free_one_page(db: peewee.SqliteDatabase) -> None:
    """One free page given back (incremental auto-vacuum). One page a statement: Python's sqlite3 steps
    a statement once, and this pragma frees a page per step, reporting each as a row without
    columns that Python never steps past."""
    db.execute_sql("PRAGMA incremental_vacuum(1)").close()


def vacuum(db: peewee.SqliteDatabase) -> None:
    """VACUUM, its pages spilled as SQLite does by default (past the page cache). It changes every
    page, and runs only while nobody else is seen holding the store (or on `compact --force`, whose
    writers wait for the whole of it anyway): held in memory up to the write connection's threshold
    (connect.SPILL_PAGES), they added ~30 MB to its peak RSS. The connection's setting comes back after."""
    kept = int(db.execute_sql("PRAGMA cache_spill").fetchone()[0])
    db.execute_sql("PRAGMA cache_spill = 1")  # SQLite's own: spill once the page cache is full
    try:
        db.execute_sql("VACUUM")
    finally:
        db.execute_sql(f"PRAGMA cache_spill = {kept}")


def checkpoint(db: peewee.SqliteDatabase, mode: str = "PASSIVE") -> tuple[int, int, int]:
    """A WAL checkpoint (`mode`: PASSIVE or TRUNCATE): (busy, frames in the WAL, frames copied back)."""
    if mode not in ("PASSIVE", "TRUNCATE"):
        raise ValueError(f"no such checkpoint: {mode}")
    return db.execute_sql(f"PRAGMA wal_checkpoint({mode})").fetchone()


def page_size(db: peewee.SqliteDatabase) -> int:
    return db.execute_sql("PRAGMA page_size").fetchone()[0]


def lock_free(db: peewee.SqliteDatabase) -> bool:
    """Can this connection take the store's write lock now (no other writer)? Taken and let go at
    once (`BEGIN IMMEDIATE`: readers, Hermes' included, are never held off by it), within the
    connection's short busy timeout."""
    conn = db.connection()
    try:
        conn.execute("BEGIN IMMEDIATE")
    except Exception as exc:  # apsw's BusyError, or a lock error by its text
        if type(exc).__name__ in ("BusyError", "LockedError") or "locked" in str(exc).lower():
            return False
        raise
    conn.execute("ROLLBACK")
    return True

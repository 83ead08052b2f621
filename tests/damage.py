"""Damage a store the way disks and copies do, for the tests of damaged stores (issue 45).

Pages are found through SQLite's own map of the file (`dbstat`: which b-tree each page belongs
to, and whether it is a leaf), then overwritten outside SQLite while no connection is open, as a
torn write or a bad sector leaves them. The store is checkpointed first (WAL stores) so the pages
overwritten are the ones every reader sees.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

GARBAGE = bytes(range(256))


def _conn(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True)


def settle(db: Path) -> None:
    """Copy a WAL store's WAL back into the file (nothing else holds it in the tests)."""
    conn = sqlite3.connect(db)
    try:
        if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def page_size(db: Path) -> int:
    conn = _conn(db)
    try:
        return conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def pages_of(db: Path, name: str, leaves: bool = True) -> list[int]:
    """The pages of one b-tree (a table, an index, an FTS shadow table), leaves first."""
    conn = _conn(db)
    try:
        rows = conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ? ORDER BY pageno", [name]).fetchall()
    finally:
        conn.close()
    wanted = [p for p, kind in rows if kind == "leaf"] if leaves else []
    return wanted or [p for p, _ in rows]


def root_page(db: Path, name: str) -> int:
    conn = _conn(db)
    try:
        return conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", [name]).fetchone()[0]
    finally:
        conn.close()


def overwrite(db: Path, page: int, fill: bytes = GARBAGE) -> None:
    """Page `page` (1-based) overwritten with `fill` repeated: no connection may be open."""
    size = page_size(db)
    data = (fill * (size // len(fill) + 1))[:size]
    fd = os.open(db, os.O_WRONLY)
    try:
        os.pwrite(fd, data, (page - 1) * size)
        os.fsync(fd)
    finally:
        os.close(fd)


def tear(db: Path, name: str, count: int = 1, leaves: bool = True) -> list[int]:
    """`count` pages of the b-tree `name` overwritten (its leaves unless `leaves` is False: then
    its root, which loses every row below it); returns them."""
    settle(db)
    pages = pages_of(db, name, leaves)[:count] if leaves else [root_page(db, name)]
    for page in pages:
        overwrite(db, page)
    return pages


def cut_short(db: Path, keep: float = 0.6) -> int:
    """The file cut to `keep` of its pages, as an interrupted copy leaves it; returns its new size."""
    settle(db)
    size = page_size(db)
    pages = max(2, int(os.stat(db).st_size // size * keep))
    os.truncate(db, pages * size)
    return pages * size


def half_migrate(db: Path, table: str = "session_model_usage") -> int:
    """A table rebuild of Hermes' migrations cut short after its first two steps (older releases
    made them without one transaction): the table renamed aside as `<table>_legacy_pk` and made
    anew, empty; its rows stranded aside. Returns how many."""
    settle(db)
    conn = sqlite3.connect(db)
    try:
        ddl = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", [table]).fetchone()[0]
        rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        conn.execute(f"ALTER TABLE {table} RENAME TO {table}_legacy_pk")
        conn.execute(ddl)
        conn.commit()
    finally:
        conn.close()
    return rows


def belie_version(db: Path) -> tuple[int, int]:
    """A `schema_version` row that says more than the tables hold, as a migration cut short after
    its row was written leaves it: a store of 22 or 26 told it is of the next release's version with
    only one of that version's columns added; a store of 31 with one of 31's columns taken away.
    Returns (the version it says, the one its tables hold)."""
    settle(db)
    conn = sqlite3.connect(db)
    try:
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        if version == 31:
            conn.execute("ALTER TABLE sessions DROP COLUMN transport_profile")
            said, held = 31, 26
        else:
            column, said = {22: ("pinned INTEGER DEFAULT 0", 26), 26: ("created_source TEXT", 31)}[version]
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
            conn.execute("UPDATE schema_version SET version = ?", [said])
            held = version
        conn.commit()
    finally:
        conn.close()
    return said, held

"""SQLite's own accounting of a store's pages, read-only (`hermes-admin usage`, profile/usage.py)."""

from __future__ import annotations

from typing import NamedTuple

import peewee


class Pages(NamedTuple):
    size: int  # bytes a page
    count: int  # pages the database holds
    free: int  # of them, on the free list


def pages(db: peewee.SqliteDatabase) -> Pages:
    return Pages(*(db.execute_sql(f"PRAGMA {name}").fetchone()[0]
                   for name in ("page_size", "page_count", "freelist_count")))


def btree_bytes(db: peewee.SqliteDatabase) -> dict[str, int]:
    """Each table's and index's b-tree, by name: the bytes of its pages (`dbstat`)."""
    return dict(db.execute_sql("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE").fetchall())


def schema_entries(db: peewee.SqliteDatabase) -> list[tuple[str, str, str, str | None]]:
    """The schema's entries: (type, name, the table it belongs to, its SQL)."""
    return db.execute_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()

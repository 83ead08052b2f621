"""SQLite's own accounting of a store's pages, read-only (`hermes-admin usage`, profile/usage.py)."""

from __future__ import annotations

from typing import NamedTuple

import peewee

from hermes_admin.profile.store import pragmas


class Pages(NamedTuple):
    size: int  # bytes a page
    count: int  # pages the database holds
    free: int  # of them, on the free list


def pages(db: peewee.SqliteDatabase) -> Pages:
    return Pages(pragmas.page_size(db), pragmas.page_count(db), pragmas.free_pages(db))


def btree_bytes(db: peewee.SqliteDatabase) -> dict[str, int]:
    """Each table's and index's b-tree, by name: the bytes of its pages (`dbstat`)."""
    return dict(db.execute_sql("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE").fetchall())


def schema_entries(db: peewee.SqliteDatabase) -> list[tuple[str, str, str, str | None]]:
    """The schema's entries: (type, name, the table it belongs to, its SQL)."""
    return db.execute_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()

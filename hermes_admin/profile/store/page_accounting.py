"""SQLite's own accounting of a store's pages, read-only (`hermes-admin usage`, profile/usage.py)."""

from __future__ import annotations

from typing import NamedTuple

import peewee

from hermes_admin.profile.store import pragmas


class Pages(NamedTuple):
    size: int  # bytes a page
    count: int  # pages the database holds
    free: int  # of them, on the free list


    @property
    def free_bytes(self) -> int:
        """The free pages, in bytes: the one figure for them (`usage`, `run`'s report, `compact`)."""
        return self.free * self.size

    @property
    def used_bytes(self) -> int:
        """The pages in use: what the store's content takes (`max_store_mb` counts this)."""
        return (self.count - self.free) * self.size


def pages(db: peewee.SqliteDatabase) -> Pages:
    return Pages(pragmas.page_size(db), pragmas.page_count(db), pragmas.free_pages(db))


def free_bytes(db: peewee.SqliteDatabase) -> int:
    """The store's free pages, in bytes (freelist_count × page_size)."""
    return pages(db).free_bytes


def btree_bytes(db: peewee.SqliteDatabase) -> dict[str, int]:
    """Each table's and index's b-tree, by name: the bytes of its pages (`dbstat`)."""
    return dict(db.execute_sql("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE").fetchall())


def schema_entries(db: peewee.SqliteDatabase) -> list[tuple[str, str, str, str | None]]:
    """The schema's entries: (type, name, the table it belongs to, its SQL)."""
    return db.execute_sql("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()

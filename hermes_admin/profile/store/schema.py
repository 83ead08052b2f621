"""What a store holds, read from `sqlite_master` and `PRAGMA table_info`.

Hermes' PyPI release writes schema v22, upstream writes v30, and newer
runtimes add tables without bumping the number. So nothing in hermes-admin
hard-codes a column list: it asks the store, then adapts its SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

import peewee

# The newest `schema_version` whose layout hermes-admin understands.
KNOWN_SCHEMA_VERSION = 30


@dataclass(frozen=True)
class Schema:
    version: int | None
    tables: frozenset[str]
    views: frozenset[str]
    triggers: frozenset[str]
    columns: dict[str, frozenset[str]]

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, frozenset())

    @property
    def has_cjk_triggers(self) -> bool:
        return any(t.startswith("messages_fts_cjk") for t in self.triggers)


def read_schema(db: peewee.SqliteDatabase) -> Schema:
    """Introspect a store. Raises peewee.DatabaseError for a file that is not a database."""
    objects = db.execute_sql("SELECT type, name FROM sqlite_master").fetchall()
    tables = frozenset(n for t, n in objects if t == "table")
    views = frozenset(n for t, n in objects if t == "view")
    triggers = frozenset(n for t, n in objects if t == "trigger")
    # Every table's columns in one statement (FTS shadow tables are many and uninteresting).
    named: dict[str, set[str]] = {t: set() for t in tables if not t.startswith(("messages_fts", "sqlite_"))}
    for table, column in db.execute_sql(
            "SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table' AND m.name NOT LIKE 'messages_fts%' AND m.name NOT LIKE 'sqlite_%'").fetchall():
        named.setdefault(table, set()).add(column)
    columns = {table: frozenset(names) for table, names in named.items()}
    version = None
    if "schema_version" in tables:
        row = db.execute_sql("SELECT MAX(version) FROM schema_version").fetchone()
        version = int(row[0]) if row and row[0] is not None else None
    return Schema(version, tables, views, triggers, columns)

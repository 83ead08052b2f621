"""What a store holds, read from `sqlite_master` and `PRAGMA table_info`.

Hermes 0.19.0 writes schema 22, 0.20.1 schema 26, 0.22.2 schema 31; newer runtimes add tables
without bumping the number, and a store's number never tells its layout (a 0.19 store opened once by
0.22.2 says 31 and keeps its old FTS tables). So nothing in hermes-admin hard-codes a column list or
reads a layout from the number: it asks the store, then adapts its SQL. A store newer than every
release known here is judged by what it holds (`not_understood`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import peewee

# The newest `schema_version` of a Hermes release whose stores hermes-admin was checked against.
KNOWN_SCHEMA_VERSION = 31

# Every table, view and trigger of those releases (and of their stores' optional parts: the CJK
# index, the trash of `optimize-storage`, Telegram's topic bindings) that names a session. The
# engine's statements, guards and exports were checked against each. In a newer store, anything
# else that names a session may hold a meaning (or a trigger an effect) deleting would break.
UNDERSTOOD = frozenset({
    "sessions", "messages", "session_model_usage", "system_prompts", "compression_locks",
    "session_turn_leases", "async_delegations", "gateway_routing", "gateway_hygiene_state",
    "conversation_generations", "gateway_heartbeats", "telegram_dm_topic_bindings", "state_meta",
    "schema_version", "messages_fts_src", "messages_fts_trigram_src",
    "messages_display_identity_delete", "messages_display_identity_update", "messages_display_order_insert",
    "messages_display_visibility_update", "messages_message_uid_insert",
})
UNDERSTOOD_PREFIXES = ("messages_fts", "fts_v22_trash_", "sqlite_")


@dataclass(frozen=True)
class Schema:
    version: int | None
    tables: frozenset[str]
    views: frozenset[str]
    triggers: frozenset[str]
    columns: dict[str, frozenset[str]]
    sql: dict[str, str] = field(default_factory=dict)  # each view's and trigger's text (what it reads)

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column in self.columns.get(table, frozenset())

    @property
    def has_cjk_triggers(self) -> bool:
        return any(t.startswith("messages_fts_cjk") for t in self.triggers)


def read_schema(db: peewee.SqliteDatabase) -> Schema:
    """Introspect a store. Raises peewee.DatabaseError for a file that is not a database."""
    objects = db.execute_sql("SELECT type, name, sql FROM sqlite_master").fetchall()
    tables = frozenset(n for t, n, _ in objects if t == "table")
    views = frozenset(n for t, n, _ in objects if t == "view")
    triggers = frozenset(n for t, n, _ in objects if t == "trigger")
    sql = {n: text or "" for t, n, text in objects if t in ("view", "trigger")}
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
    return Schema(version, tables, views, triggers, columns, sql)


def names_a_session(schema: Schema, name: str) -> bool:
    """Does this table, view or trigger hold or read session ids (by a column, a key or its text)?"""
    if name in schema.tables:
        return any("session" in c or c == "conversation_id" for c in schema.columns.get(name, ()))
    text = schema.sql.get(name, "").lower()
    return "session" in text or "messages" in text


def not_understood(schema: Schema) -> list[str]:
    """What a store holds that names a session and is none of the known releases' (sorted, described)."""
    found = []
    for kind, names in (("table", schema.tables), ("view", schema.views), ("trigger", schema.triggers)):
        for name in sorted(names):
            if name in UNDERSTOOD or name.startswith(UNDERSTOOD_PREFIXES):
                continue
            if names_a_session(schema, name):
                found.append(f"{kind} {name}")
    return found


# Where Hermes' migrations rebuild a table (RENAME it aside, CREATE it anew, copy, DROP the old): the
# name the old one has while aside, by the live table's name. One left beside its live table is a
# migration cut short (older releases made these steps without one transaction): its rows are
# stranded there, still referencing their sessions.
def migration_leftovers(schema: Schema) -> list[tuple[str, str]]:
    """(leftover, live table) for each table a rebuild cut short left aside, beside its live table."""
    found = []
    for name in sorted(schema.tables):
        live = name[: -len("_legacy_pk")] if name.endswith("_legacy_pk") else (
            "session_model_usage" if re.fullmatch(r"session_model_usage_v\d+", name) else None)
        if live and live in schema.tables:
            found.append((name, live))
    return found


# What the releases' migrations add, by the version that has it (read from the stores 0.19.0,
# 0.20.1 and 0.22.2 write and from those they upgrade: the same tables and columns): a store whose
# `schema_version` says at least `to` holds every one. A version row that says more than its
# tables hold is a migration cut short after its row was written (or a row from another store).
MIGRATED = (
    (22, 26, ("system_prompts", "session_turn_leases", "gateway_hygiene_state",
              "sessions.system_prompt_hash", "sessions.title_source", "sessions.last_activity_at",
              "sessions.last_activity_description", "sessions.last_activity_provenance", "sessions.pinned",
              "sessions.hidden", "sessions.last_read_at", "sessions.compression_ineffective_count",
              "sessions.git_metadata_generation", "messages.display_kind", "messages.display_metadata")),
    (26, 31, ("conversation_generations", "gateway_heartbeats",
              "sessions.auto_archived", "sessions.created_source", "sessions.tool_names", "sessions.transport_profile",
              "sessions.compression_overload_streak", "sessions.compression_recovery_deadline",
              "messages.message_uid", "messages.display_identity", "messages.display_order", "messages.tool_call_uid",
              "messages.tool_call_uids", "messages.absorbed_message_uids", "messages._compressed_summary")),
)


@dataclass(frozen=True)
class MigrationGap:
    """A `schema_version` that says more than the store's tables hold."""

    says: int  # the version the row says
    holds: int  # the last version whose tables and columns the store all has
    missing: tuple[str, ...]  # what the versions past `holds` add that it lacks ("table", "table.column")

    def text(self) -> str:
        shown = ", ".join(self.missing[:4]) + (f" and {len(self.missing) - 4} more" if len(self.missing) > 4 else "")
        return (f"says {self.says}, but the store holds the tables of {self.holds}: {shown} of {self.holds}->"
                f"{self.says} missing, a migration cut short")


def _lacks(schema: Schema, part: str) -> bool:
    table, _, column = part.partition(".")
    return not schema.has_table(table) if not column else (
        schema.has_table(table) and not schema.has_column(table, column))


def migration_gap(schema: Schema) -> MigrationGap | None:
    """The gap between what `schema_version` says and what the store holds (MIGRATED), if any."""
    if schema.version is None or schema.version > KNOWN_SCHEMA_VERSION:  # a newer one is judged by what it holds
        return None
    holds, missing = schema.version, []
    for before, after, added in MIGRATED:
        if schema.version < after:
            break
        lacking = [part for part in added if _lacks(schema, part)]
        if lacking and not missing:
            holds = before
        missing += lacking
    return MigrationGap(schema.version, holds, tuple(missing)) if missing else None

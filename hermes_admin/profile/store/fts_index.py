"""The statements that read and steer Hermes' FTS5 indexes: their settings (`%_config`), their
structure record (`%_data`), and FTS5's own commands (automerge, merge). engine/fts_merges.py
decides when; these say how."""

from __future__ import annotations

import apsw
import peewee

STRUCTURE_ROWID = 10  # the %_data row that holds an index's structure record


def config_writable(db: peewee.SqliteDatabase, table: str) -> bool:
    """May this connection write the index's settings (SQLite's defensive mode refuses writes to
    shadow tables)? Asked of SQLite without writing anything."""
    try:
        db.execute_sql(f"EXPLAIN DELETE FROM {table}_config WHERE 0").fetchall()
    except Exception:
        return False
    return True


def config_row(db: peewee.SqliteDatabase, table: str, key: str) -> tuple | None:
    """The index's stored setting `key` as a row (its value first), None when it is not stored."""
    return db.execute_sql(f"SELECT v FROM {table}_config WHERE k = ?", (key,)).fetchone()


def set_automerge(db: peewee.SqliteDatabase, table: str, value: int) -> None:
    db.execute_sql(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', ?)", (value,))


def forget_automerge(db: peewee.SqliteDatabase, table: str) -> None:
    """The stored automerge row gone: FTS5's default applies again."""
    db.execute_sql(f"DELETE FROM {table}_config WHERE k = 'automerge'")


def write_out_pending(db: peewee.SqliteDatabase) -> None:
    """Inside a transaction: FTS5 writes out what it holds pending (a savepoint's release makes it)."""
    db.execute_sql("SAVEPOINT hermes_admin_fts")
    db.execute_sql("RELEASE hermes_admin_fts")


def structure_block(db: peewee.SqliteDatabase, table: str) -> bytes | None:
    """The index's structure record (its segments by level), None when it has none."""
    row = db.execute_sql(f"SELECT block FROM {table}_data WHERE id = ?", (STRUCTURE_ROWID,)).fetchone()
    return row[0] if row and row[0] else None


def merge(db: peewee.SqliteDatabase, table: str, pages: int) -> int:
    """FTS5's 'merge' command, asked for `pages` pages: returns the rows of the index it wrote."""
    before = db.connection().total_changes()
    db.execute_sql(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))
    return db.connection().total_changes() - before


def integrity_problems(conn, tables: tuple[str, ...]) -> list[str]:
    """FTS5's 'integrity-check' of each of these indexes the store has, on `conn` (an apsw
    connection that may write: FTS5 asks for one); one line per index that fails it."""
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    problems = []
    for table in tables:
        if table in present:
            try:
                conn.execute(f"INSERT INTO \"{table}\"(\"{table}\", rank) VALUES ('integrity-check', 1)")
            except apsw.Error as exc:
                problems.append(f"{table}: {exc}")
    return problems


def rebuild(db: peewee.SqliteDatabase, table: str) -> None:
    """FTS5's 'rebuild': the index made again from its content, inside the caller's transaction."""
    db.execute_sql(f"INSERT INTO {table}({table}) VALUES ('rebuild')")

"""A damaged store, named: which structure SQLite cannot read, and how many rows are still there.

SQLite says "database disk image is malformed" at the first statement that touches a damaged
page, whichever page it is; that line names neither the file's part nor what can be done. So
when a statement meets damage (`is_damage`) the store is looked at once more, read-only
(`diagnose`):

- the file's length: a file cut short (an interrupted copy, a full disk) is refused by SQLite
  as a whole; read with `writable_schema` it opens, and the pages past its end are missing;
- each b-tree's pages (SQLite's `dbstat` map of the file names the b-tree of every page and
  marks those whose header it cannot read `corrupted`), grouped by what they belong to: a table,
  an index (rebuilt from its table without loss), a full-text index's own tables (rebuilt from
  the rows without loss), or the schema itself;
- where every page reads, SQLite's `quick_check` for what a page's header does not show (an
  index that disagrees with its table).

`readable_rows` counts a table's rows that can still be read, range by range of rowids around
the damaged ones: the salvage `repair` reports, which writes nothing.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import apsw
import peewee

from hermes_admin.profile.store import keep_wal
from hermes_admin.profile.store.connect import readonly_uri
from hermes_admin.profile.store.errors import StoreError

TABLE, INDEX, FTS, SCHEMA, LENGTH, NOT_A_DATABASE, MIGRATION = (
    "table", "index", "fts", "schema", "length", "not_a_database", "migration")
# What repair restores without losing a row: an index or full-text index rebuilt from the rows, a
# migration's copy finished.
LOSSLESS = (INDEX, FTS, MIGRATION)
WORDS = {TABLE: "table", INDEX: "index", FTS: "full-text index", SCHEMA: "schema",
         LENGTH: "file length", NOT_A_DATABASE: "file", MIGRATION: "schema migration"}
FTS_SHADOWS = ("_data", "_idx", "_docsize", "_config", "_content")
ROWID_MIN, ROWID_MAX = -(1 << 63), (1 << 63) - 1
# The tables whose readable rows `repair` counts: what Hermes' own recovery calls canonical, those
# a store has.
CANONICAL = ("sessions", "messages", "session_model_usage", "system_prompts")
PROBE_BUDGET = 1500  # seeks a count may spend around damaged ranges (each one is a few page reads)

_DAMAGE_WORDS = ("malformed", "not a database", "corrupt", "disk i/o error", "short read")


def is_damage(exc: BaseException) -> bool:
    """Did SQLite refuse for damage in the file (not for a lock, a bad statement, a full disk)?"""
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return True
    if isinstance(exc, (peewee.DatabaseError, sqlite3.DatabaseError, apsw.IOError)) \
            and not isinstance(exc, (peewee.OperationalError, sqlite3.OperationalError)):
        return any(word in str(exc).lower() for word in _DAMAGE_WORDS)
    cause = getattr(exc, "__cause__", None) or getattr(exc, "orig", None)
    return cause is not None and cause is not exc and is_damage(cause)


@dataclass(frozen=True)
class Damaged:
    kind: str  # TABLE, INDEX, FTS, SCHEMA, LENGTH, NOT_A_DATABASE, MIGRATION
    name: str  # the structure: a table, an index, a full-text index's table, or the file
    pages: int = 0  # its pages SQLite cannot read (0: not counted)
    detail: str = ""  # what SQLite or the file says, when the kind alone does not

    def text(self) -> str:
        said = f"{WORDS[self.kind]} {self.name}" if self.kind in (TABLE, INDEX, FTS, MIGRATION) else WORDS[self.kind]
        more = [f"{self.pages} page{'s' if self.pages != 1 else ''} unreadable"] if self.pages else []
        more += [self.detail] if self.detail else []
        return said + (f" ({'; '.join(more)})" if more else "")


@dataclass(frozen=True)
class Diagnosis:
    damaged: tuple[Damaged, ...]
    said: str = ""  # SQLite's own words, when it refused and nothing more precise was found

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.said

    @property
    def lossless(self) -> bool:
        """Only indexes and full-text indexes are damaged: rebuilt from the rows, nothing lost."""
        return bool(self.damaged) and all(d.kind in LOSSLESS for d in self.damaged)

    def kinds(self) -> set[str]:
        return {d.kind for d in self.damaged}

    def line(self) -> str:
        """`damaged: table messages (2 pages unreadable), index idx_x (1 page unreadable)`."""
        if self.damaged:
            return "damaged: " + ", ".join(d.text() for d in self.damaged)
        return f"damaged: {self.said}" if self.said else "no damage found"


def _connect(path: Path, writable_schema: bool = False) -> apsw.Connection:
    conn = keep_wal.connect(readonly_uri(path), keep_wal.READ_ONLY, 5000)
    if writable_schema:  # SQLite then reads a file shorter than its header says (read-only: nothing is written)
        conn.execute("PRAGMA writable_schema = ON")
    return conn


def _owners(conn: apsw.Connection) -> dict[str, tuple[str, str]]:
    """Each b-tree's name -> (kind, what it belongs to): an index, a full-text index's own
    table (named for its FTS5 table), a table, or the schema."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    fts = [name for kind, name, _, sql in rows
           if kind == "table" and sql and re.search(r"USING\s+fts5", sql, re.IGNORECASE)]
    owners = {"sqlite_schema": (SCHEMA, "sqlite_schema"), "sqlite_master": (SCHEMA, "sqlite_schema")}
    for kind, name, _, _ in rows:
        owner = next((f for f in fts if name != f and name.startswith(f) and name[len(f):] in FTS_SHADOWS), None)
        if owner:
            owners[name] = (FTS, owner)
        elif kind == "index":
            owners[name] = (INDEX, name)
        elif kind == "table":
            owners[name] = (TABLE, name)
    return owners


def _corrupted_pages(conn: apsw.Connection) -> dict[str, int]:
    """b-tree name -> how many of its pages SQLite cannot read (dbstat walks every b-tree)."""
    return dict(conn.execute("SELECT name, count(*) FROM dbstat WHERE pagetype = 'corrupted' GROUP BY name").fetchall())


_INDEX_SAID = re.compile(r"(?:missing from index|entries in index|entry in index|index) (\w+)")


def _check_says(conn: apsw.Connection) -> list[str]:
    """`quick_check`'s lines (empty when it says ok); SQLite's refusal as a line of its own."""
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check(20)").fetchall()]
    except apsw.Error as exc:
        return [str(exc)]
    return [] if rows == ["ok"] else [line for row in rows for line in row.splitlines() if line.strip()]


def _migration_state(conn: apsw.Connection) -> list[Damaged]:
    """Tables a migration cut short left aside (schema.migration_leftovers), with their rows."""
    from hermes_admin.profile.store.schema import Schema, migration_leftovers

    tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall())
    found = []
    for leftover, live in migration_leftovers(Schema(None, tables, frozenset(), frozenset(), {})):
        try:
            rows = conn.execute(f'SELECT count(*) FROM "{leftover}"').fetchall()[0][0]
        except apsw.Error:
            rows = None
        found.append(Damaged(MIGRATION, leftover, 0, f"left beside {live} by a migration cut short"
                             + ("" if rows is None else f", {rows} row(s) stranded there")))
    return found


def diagnose(path: Path) -> Diagnosis:
    """What is damaged in the store at `path`; reads only (mode=ro), never writes or checkpoints."""
    path = Path(path)
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return Diagnosis((), f"cannot be read: {exc.strerror}")
    try:
        conn = _connect(path)
        try:
            conn.execute("PRAGMA page_count").fetchall()
            short = None
        except apsw.CorruptError:
            conn.close()
            conn = _connect(path, writable_schema=True)
            pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
            short = Damaged(LENGTH, path.name, 0, f"{size} bytes: cut short, SQLite reads only {pages} "
                            f"of the pages its header counts")
    except apsw.NotADBError:
        return Diagnosis((Damaged(NOT_A_DATABASE, path.name, 0, f"{size} bytes, not a database: no SQLite header"),))
    except apsw.Error as exc:
        return Diagnosis((), " ".join(str(exc).split()))
    try:
        found: list[Damaged] = [short] if short else []
        try:
            owners = _owners(conn)
        except apsw.Error as exc:
            return Diagnosis((*found, Damaged(SCHEMA, "sqlite_schema", 0, " ".join(str(exc).split()))))
        try:
            bad = _corrupted_pages(conn)
        except apsw.Error as exc:
            bad, found = {}, found + [Damaged(SCHEMA, "sqlite_schema", 0, " ".join(str(exc).split()))]
        grouped: dict[tuple[str, str], int] = {}
        for name, pages in bad.items():
            kind, owner = owners.get(name, (TABLE, name))
            grouped[(kind, owner)] = grouped.get((kind, owner), 0) + pages
        order = {SCHEMA: 0, TABLE: 1, INDEX: 2, FTS: 3}  # (a migration's leftovers follow)
        found += [Damaged(kind, name, pages) for (kind, name), pages in
                  sorted(grouped.items(), key=lambda item: (order[item[0][0]], item[0][1]))]
        found += _migration_state(conn)
        if not bad and short is None:
            said = _check_says(conn)
            indexes = sorted({m.group(1) for line in said for m in [_INDEX_SAID.search(line)]
                              if m and owners.get(m.group(1), (None,))[0] == INDEX})
            if indexes:
                found += [Damaged(INDEX, name, 0, "disagrees with its table") for name in indexes]
            elif said:
                return Diagnosis(tuple(found), "; ".join(said[:3]))
        return Diagnosis(tuple(found))
    finally:
        conn.close()


# -- what can still be read ------------------------------------------------------------------

def _columns(conn: apsw.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")').fetchall()]


def _has_rowid(conn: apsw.Connection, table: str) -> bool:
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchall()
    return bool(sql) and not re.search(r"WITHOUT\s+ROWID", sql[0][0] or "", re.IGNORECASE)


class _Rows:
    """Whole rows of one table read in rowid order (every column read, overflow pages too), in
    ranges that step around the damaged ones."""

    def __init__(self, conn: apsw.Connection, table: str, budget: int = PROBE_BUDGET):
        self.conn, self.table = conn, table
        columns = ", ".join(f'"{c}"' for c in _columns(conn, table))
        self.select = f'SELECT rowid, {columns} FROM "{table}" NOT INDEXED'
        self.budget = budget
        self.skipped = 0  # damaged ranges stepped over

    def _run(self, where: str, order: str, bound: int, limit: int) -> list[tuple]:
        return self.conn.execute(f"{self.select} WHERE {where} ORDER BY rowid {order} LIMIT ?", [bound, limit]).fetchall()

    def scan(self, lo: int, hi: int, batch: int = 256):
        """Every readable row with lo <= rowid <= hi, in rowid order; steps around damaged ranges."""
        rows, stop = self._forward(lo, hi, batch)
        yield from rows
        if stop is None:
            return
        # the rows past the damage, read down from `hi` until it meets the damage from above
        back = self._backward(stop, hi)
        yield from self._inside(stop, back[-1][0] - 1 if back else hi, batch)
        yield from reversed(back)

    def _forward(self, lo: int, hi: int, batch: int) -> tuple[list[tuple], int | None]:
        """Rows from lo up, until hi or the first damage; (rows, the first rowid not read or None)."""
        rows: list[tuple] = []
        at = lo
        while True:
            try:
                got = self._run("rowid >= ? AND rowid <= " + str(hi), "ASC", at, batch)
            except apsw.Error:
                # the batch met damage: one row at a time up to it
                try:
                    while True:
                        one = self._run("rowid >= ? AND rowid <= " + str(hi), "ASC", at, 1)
                        if not one:
                            return rows, None
                        rows.append(one[0])
                        at = one[0][0] + 1
                except apsw.Error:
                    self.skipped += 1
                    return rows, at
            rows += got
            if len(got) < batch:
                return rows, None
            at = got[-1][0] + 1

    def _backward(self, lo: int, hi: int) -> list[tuple]:
        """Rows from hi down, until lo or the first damage (highest first)."""
        rows: list[tuple] = []
        at = hi
        try:
            while at >= lo:
                one = self._run(f"rowid >= {lo} AND rowid <= ?", "DESC", at, 1)
                if not one:
                    break
                rows.append(one[0])
                at = one[0][0] - 1
        except apsw.Error:
            pass
        return rows

    def _inside(self, lo: int, hi: int, batch: int):
        """The readable rows of a range the damage is in: its middle probed, then each side (a
        seek into a damaged page fails at once), while the budget of probes lasts."""
        if lo > hi or self.budget <= 0:
            return
        self.budget -= 1
        mid = lo + (hi - lo) // 2
        try:
            self._run(f"rowid <= {hi} AND rowid >= ?", "ASC", mid, 1)
            readable = True
        except apsw.Error:
            readable = False
        if readable:
            yield from self._inside(lo, mid - 1, batch)
            yield from self.scan(mid, hi, batch)
        elif hi - lo > 0:
            yield from self._inside(lo, mid - 1, batch)
            yield from self._inside(mid + 1, hi, batch)


def scan_rows(conn: apsw.Connection, table: str):
    """Every readable row of `table`, rowid first, then its columns in table_info order."""
    if not _has_rowid(conn, table):
        try:
            yield from conn.execute(f'SELECT NULL, * FROM "{table}"')
        except apsw.Error:
            return
        return
    yield from _Rows(conn, table).scan(ROWID_MIN, ROWID_MAX)


def _open_as_it_is(path: Path) -> apsw.Connection:
    """A read-only connection that reads what there is, a file cut short included."""
    conn = _connect(path)
    try:
        conn.execute("PRAGMA page_count").fetchall()
        return conn
    except apsw.CorruptError:
        conn.close()
        return _connect(path, writable_schema=True)
    except BaseException:
        conn.close()
        raise


def readable_rows(path: Path, tables: list[str]) -> dict[str, int | None]:
    """How many rows of each table can still be read (None: the table itself cannot be found)."""
    try:
        conn = _open_as_it_is(path)
    except apsw.Error:
        return {}
    try:
        counts: dict[str, int | None] = {}
        for table in tables:
            try:
                if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchall():
                    continue
                counts[table] = sum(1 for _ in scan_rows(conn, table))
            except apsw.Error:
                counts[table] = None
        return counts
    finally:
        conn.close()


# -- said to the operator ------------------------------------------------------------------------

DAMAGED_STORE = "damaged_store"  # a Problem's kind for a damaged store, on every command


def next_step(diagnosis: Diagnosis, profile_arg: str, in_repair: bool = False) -> str:
    """The one command (or act) that fixes what `diagnosis` found, for the profile `-p profile_arg`."""
    if NOT_A_DATABASE in diagnosis.kinds():
        return ("no SQLite database is left to repair: restore state.db from a backup (Hermes keeps copies in "
                "backups/ and state-snapshots/), or move it aside (`mv state.db state.db.not-a-database`) and "
                "Hermes starts a new, empty store")
    if diagnosis.kinds() == {MIGRATION}:
        return f"`hermes-admin repair --apply -p {profile_arg}` finishes it, losing nothing"
    if diagnosis.lossless:
        return f"`hermes-admin repair --apply -p {profile_arg}` rebuilds it from the rows, losing nothing"
    if not in_repair:
        return f"`hermes-admin repair -p {profile_arg}` says what can be saved"
    return ("the rows on the damaged pages are lost unless a backup holds them (backups/, state-snapshots/: "
            "restore one while Hermes is stopped)")


def damage_error(profile, said: str | None = None) -> StoreError:
    """The StoreError a damaged store is, for every command: the damage diagnosed (read-only),
    one line naming the structure, and the next step. `said`: SQLite's refusal. Where the store
    reads whole (the damage is in another file the work opened), SQLite's words, as they are."""
    diagnosis = diagnose(profile.store_path)
    if diagnosis.ok:
        return StoreError(profile.shown, profile.store_path, f"{said or 'SQLite refused a read'} (state.db itself "
                          "reads whole: another file this work opened is damaged)", kind="sqlite")
    return StoreError(profile.shown, profile.store_path, f"{diagnosis.line()}; {next_step(diagnosis, profile.shown)}",
                      kind=DAMAGED_STORE)


def indexed_ids(path: Path, table: str = "sessions", column: str = "id") -> set | None:
    """The values of `column` an intact index of `table` still holds (the ids of rows whose own
    pages may be lost), or None when no index of it reads whole."""
    try:
        conn = _open_as_it_is(path)
    except apsw.Error:
        return None
    try:
        names = [r[1] for r in conn.execute(f'PRAGMA index_list("{table}")').fetchall()]
        for name in names:
            cols = [r[2] for r in conn.execute(f'PRAGMA index_info("{name}")').fetchall()]
            if cols[:1] != [column]:
                continue
            try:
                return {r[0] for r in conn.execute(
                    f'SELECT "{column}" FROM "{table}" INDEXED BY "{name}" WHERE "{column}" IS NOT NULL').fetchall()}
            except apsw.Error:
                continue
        return None
    finally:
        conn.close()

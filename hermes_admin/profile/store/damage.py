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
the damaged ones, then, where an intact index still names rowids the ranges stepped over, row by
row: the salvage `repair` reports, which writes nothing. Only damage is stepped around: a lock
goes up, so no row is ever taken for lost because it was busy.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from pathlib import Path

import apsw

from hermes_admin.profile.store import keep_wal
from hermes_admin.profile.store.connect import readonly_uri
from hermes_admin.profile.store.errors import MAYBE_DAMAGE_ERRORS, NEVER_DAMAGE_ERRORS, StoreError

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
# Where a damaged store still names its sessions: the sessions' own ids, and the session ids of
# the rows that belong to one (an index of them may read where the table's pages do not).
SESSION_COLUMNS = (("sessions", "id"), ("messages", "session_id"), ("session_model_usage", "session_id"))
# Hermes' rows that guard a conversation and name its session without a foreign key: a rebuild
# makes a lost session of theirs again too, so the guard keeps meaning what it meant.
GUARDS = (("compression_locks", "session_id"), ("session_turn_leases", "conversation_id"))
PROBE_BUDGET = 1500  # seeks a count may spend around damaged ranges (each one is a few page reads)

_DAMAGE_WORDS = ("malformed", "not a database", "corrupt", "disk i/o error", "short read")


def is_damage(exc: BaseException) -> bool:
    """Did SQLite refuse for damage in the file (not for a lock, a bad statement, a full disk)?"""
    if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
        return True
    if isinstance(exc, MAYBE_DAMAGE_ERRORS) and not isinstance(exc, NEVER_DAMAGE_ERRORS):
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
    """Tables a migration cut short left aside (schema.migration_leftovers), with their rows; a
    `schema_version` that says more than the tables hold (schema.migration_gap)."""
    from hermes_admin.profile.store.schema import Schema, migration_gap, migration_leftovers

    tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall())
    found = []
    gap = migration_gap(_schema_said(conn, tables))
    if gap is not None:
        found.append(Damaged(MIGRATION, "schema_version", 0, gap.text()))
    for leftover, live in migration_leftovers(Schema(None, tables, frozenset(), frozenset(), {})):
        try:
            rows = conn.execute(f'SELECT count(*) FROM "{leftover}"').fetchall()[0][0]
        except apsw.Error:
            rows = None
        found.append(Damaged(MIGRATION, leftover, 0, f"left beside {live} by a migration cut short"
                             + ("" if rows is None else f", {rows} row(s) stranded there")))
    return found


def _schema_said(conn: apsw.Connection, tables: frozenset[str]):
    """The version the store says and the columns of the tables that say it wrong (a read that
    meets damage leaves the version unsaid: the damage is what is named then)."""
    from hermes_admin.profile.store.schema import Schema

    version, columns = None, {}
    try:
        if "schema_version" in tables:
            row = conn.execute("SELECT MAX(version) FROM schema_version").fetchall()
            version = row[0][0] if row and isinstance(row[0][0], int) else None
        for table in ("sessions", "messages"):
            columns[table] = frozenset(_columns(conn, table)) if table in tables else frozenset()
    except apsw.Error:
        version = None
    return Schema(version, tables, frozenset(), frozenset(), columns)


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
    ranges that step around the damaged ones. Only damage is stepped around: any other refusal
    (a lock, above all) goes up, so that no row is ever taken for lost because it was busy."""

    def __init__(self, conn: apsw.Connection, table: str, budget: int = PROBE_BUDGET):
        self.conn, self.table = conn, table
        columns = ", ".join(f'"{c}"' for c in _columns(conn, table))
        self.select = f'SELECT rowid, {columns} FROM "{table}" NOT INDEXED'
        self.budget = budget
        self.met_damage = False
        self.covered: list[tuple[int, int]] = []  # rowid ranges whose every row was read

    def _run(self, lo: int, hi: int, order: str, limit: int, at: int) -> list[tuple]:
        """Up to `limit` rows from `at` on, in `order`, within lo..hi."""
        args = [at, hi] if order == "ASC" else [lo, at]
        return self.conn.execute(f"{self.select} WHERE rowid >= ? AND rowid <= ? ORDER BY rowid {order} LIMIT ?",
                                 [*args, limit]).fetchall()

    def _tried(self, *args) -> list[tuple] | None:
        """The rows, or None where the read met damage."""
        try:
            return self._run(*args)
        except apsw.Error as exc:
            if not is_damage(exc):
                raise
            self.met_damage = True
            return None

    def scan(self, lo: int, hi: int, batch: int = 256):
        """Every readable row with lo <= rowid <= hi (not in rowid order around damage). A range is
        read up from its start until it meets damage; past it, seeks one, two, four, ... rowids on
        find where the table reads again (a seek into a damaged page fails at once), the rows just
        below that point are read down to the damage, and what lies between the two is a range of
        its own. The probes are bounded by the budget."""
        ranges = [(lo, hi)]
        while ranges:
            lo, hi = ranges.pop()
            rows, stop = self._forward(lo, hi, batch)
            yield from rows
            if stop is None:
                continue
            again = self._reads_again(stop, hi)
            if again is None:
                continue
            back = self._backward(stop, again - 1, batch)
            yield from back
            if again <= hi:
                ranges.append((again, hi))
            if back and back[-1][0] - 1 > stop:  # between the damage and what was read down to
                ranges.append((stop + 1, back[-1][0] - 1))

    def _reads_again(self, stop: int, hi: int) -> int | None:
        """The first rowid past `stop` (a rowid whose read met damage) from which a seek reads again,
        found by doubling steps; None when none does up to `hi` (or the budget is spent)."""
        step = 1
        while self.budget > 0:
            at = stop + step if stop + step <= hi else hi
            self.budget -= 1
            if at > stop and self._tried(stop, hi, "ASC", 1, at) is not None:
                return at
            if at >= hi:
                return None
            step *= 2
        return None

    def _forward(self, lo: int, hi: int, batch: int) -> tuple[list[tuple], int | None]:
        """Rows from lo up, until hi or the first damage; (rows, the first rowid not read or None)."""
        rows: list[tuple] = []
        at = lo
        while True:
            got = self._tried(lo, hi, "ASC", batch, at)
            if got is None:  # the batch met damage: one row at a time up to it
                while True:
                    one = self._tried(lo, hi, "ASC", 1, at)
                    if one is None:
                        self.covered.append((lo, at - 1))
                        return rows, at
                    if not one:
                        self.covered.append((lo, hi))
                        return rows, None
                    rows.append(one[0])
                    at = one[0][0] + 1
            rows += got
            if len(got) < batch:
                self.covered.append((lo, hi))
                return rows, None
            at = got[-1][0] + 1

    def _backward(self, lo: int, hi: int, batch: int) -> list[tuple]:
        """Rows from hi down, until lo or the first damage (highest first)."""
        rows: list[tuple] = []
        at = hi
        while at >= lo:
            got = self._tried(lo, hi, "DESC", batch, at)
            if got is None:  # the batch met damage: one row at a time down to it
                got = self._tried(lo, hi, "DESC", 1, at)
                if got is None:
                    break
            if not got:
                at = lo - 1  # nothing more down to lo
                break
            rows += got
            at = got[-1][0] - 1
        if at < hi:
            self.covered.append((max(at + 1, lo), hi))
        return rows


def scan_rows(conn: apsw.Connection, table: str):
    """Every readable row of `table`, rowid first, then its columns in table_info order."""
    if not _has_rowid(conn, table):
        try:
            yield from conn.execute(f'SELECT NULL, * FROM "{table}"')
        except apsw.Error as exc:
            if not is_damage(exc):
                raise
        return
    reader = _Rows(conn, table)
    yield from reader.scan(ROWID_MIN, ROWID_MAX)
    if not reader.met_damage:
        return
    runs = sorted(reader.covered)
    # A readable page between two damaged ones that the seeks stepped over: an intact index still
    # names each row's rowid, and a row not read yet is read by its rowid alone.
    runs.sort()
    firsts = [first for first, _ in runs]
    extra: set[int] = set()
    for rowid in _indexed_rowids(conn, table):
        n = bisect.bisect_right(firsts, rowid) - 1
        if (n >= 0 and runs[n][0] <= rowid <= runs[n][1]) or rowid in extra:
            continue
        got = reader._tried(rowid, rowid, "ASC", 1, rowid)
        if got:
            extra.add(rowid)
            yield got[0]


def _indexed_rowids(conn: apsw.Connection, table: str):
    """The rowids the first of the table's whole (not partial) indexes that reads through names."""
    for _, name, _, _, partial in conn.execute(f'PRAGMA index_list("{table}")').fetchall():
        if partial:
            continue
        try:
            yield from (r[0] for r in conn.execute(f'SELECT rowid FROM "{table}" INDEXED BY "{name}"').fetchall())
            return
        except apsw.Error as exc:
            if not is_damage(exc):
                raise


def open_as_it_is(path: Path) -> apsw.Connection:
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


def session_links(conn: apsw.Connection) -> list[tuple[str, str]]:
    """The (table, column) of every row that belongs to a session: each column of another table
    with a foreign key to `sessions` (a parent link aside), and the guards' (GUARDS). A rebuild makes
    a session row again for the readable ones whose session row was lost (store/rebuild.py)."""
    links: list[tuple[str, str]] = []
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid").fetchall():
        if table == "sessions":
            continue
        columns = [fk[3] for fk in conn.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()
                   if fk[2] == "sessions" and fk[3] != "parent_session_id"]
        columns += [column for guarded, column in GUARDS if guarded == table]
        links += [(table, column) for column in dict.fromkeys(columns)]
    return links


def readable_rows(path: Path, tables: list[str], session_ids: set[str] | None = None) -> dict[str, int | None]:
    """How many rows of each table can still be read (None: the table itself cannot be found).
    `session_ids`: filled, in the same reads, with the session ids of every readable row that keeps
    its session in a rebuild: the sessions' own, and those of `session_links` (their tables read
    for it when not among `tables`), so what `repair` says a rebuild keeps is what it keeps."""
    try:
        conn = open_as_it_is(path)
    except apsw.Error:
        return {}
    try:
        named: dict[str, list[str]] = {}
        if session_ids is not None:
            named["sessions"] = ["id"]
            try:
                for table, column in session_links(conn):
                    named.setdefault(table, []).append(column)
            except apsw.Error:  # a schema that cannot be read: each table's own read says so below
                pass
        counts: dict[str, int | None] = {}
        for table in [*tables, *(t for t in named if t not in tables)]:
            try:
                if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchall():
                    continue
                columns = _columns(conn, table)
                at = [columns.index(c) + 1 for c in named.get(table, ()) if c in columns]  # (rowid first)
                n = 0
                for row in scan_rows(conn, table):
                    n += 1
                    if at and session_ids is not None:
                        session_ids.update(row[i] for i in at if isinstance(row[i], str))
                if table in tables:
                    counts[table] = n
            except apsw.Error:
                if table in tables:
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
        conn = open_as_it_is(path)
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


def indexed_counts(path: Path, tables: list[str]) -> dict[str, int]:
    """How many rows each table had, as the first of its whole indexes that reads through counts
    them (the rows whose own pages are lost included); a table without one is left out."""
    try:
        conn = open_as_it_is(path)
    except apsw.Error:
        return {}
    counts: dict[str, int] = {}
    try:
        for table in tables:
            try:
                indexes = conn.execute(f'PRAGMA index_list("{table}")').fetchall()
            except apsw.Error:
                continue
            for _, name, _, _, partial in indexes:
                if partial:
                    continue
                try:
                    counts[table] = conn.execute(f'SELECT count(*) FROM "{table}" INDEXED BY "{name}"').fetchall()[0][0]
                    break
                except apsw.Error as exc:
                    if not is_damage(exc):
                        raise
        return counts
    finally:
        conn.close()



def indexed_session_ids(path: Path) -> set[str]:
    """The session ids any intact index of SESSION_COLUMNS still holds (those of lost rows included)."""
    found: set[str] = set()
    for table, column in SESSION_COLUMNS:
        found |= {i for i in indexed_ids(path, table, column) or () if isinstance(i, str)}
    return found


def readable_session_ids(path: Path) -> set[str]:
    """The session ids of every row that can still be read and keeps its session in a rebuild
    (readable_rows): what a rebuild keeps (a session row made again for readable messages, usage
    rows or guards whose own was lost)."""
    found: set[str] = set()
    readable_rows(path, [table for table, _ in SESSION_COLUMNS], found)
    return found

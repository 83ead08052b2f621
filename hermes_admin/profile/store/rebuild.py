"""A damaged store rebuilt from every row that can still be read, written back into the same file.

A torn page cannot be cleared where it is: REINDEX, DROP and FTS5's 'rebuild' all read it first
and fail. So the store is made again, beside it, from its own `sqlite_master` DDL: every table's
readable rows copied range by range of rowids around the damage (store/damage.py), then its
indexes, views, full-text indexes (rebuilt from the rows, never copied) and triggers, with the
store's page size, `user_version`, `application_id` and journal mode. Foreign keys a lost row
leaves dangling are settled as Hermes' own recovery settles them: a lost parent or system prompt
link cleared, and a session row made again (`source = 'recovered'`) for readable messages and usage
rows whose session row was lost, so no readable message is dropped.

The new file is checked (`integrity_check`, `foreign_key_check`, each FTS5 `integrity-check`) before
anything of the store changes. Then it is copied into the store file itself through SQLite's
backup (one transaction of SQLite's own journal: the same file and inode, so a Hermes that opens
it later sees the store it knows; a crash in the middle leaves the store as it was, its journal
rolled back by the next opener). The caller keeps the damaged bytes first (`keep_damaged`), holds
the locks and decides only while no other process holds the store.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import apsw

from hermes_admin.profile.store import fts_index, keep_wal
from hermes_admin.profile.store.damage import FTS_SHADOWS, open_as_it_is, scan_rows, session_links

SIDECARS = ("-wal", "-journal")  # what holds a store's content besides the file (the -shm holds none)
BATCH = 500


class RebuildRefused(Exception):
    """Nothing was written to the store: why, in one line."""


@dataclass
class Rebuilt:
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows in the rebuilt store
    recovered_sessions: list[str] = field(default_factory=list)  # session rows made again for readable messages
    cleared_links: int = 0  # parent / system prompt links to a lost row, set NULL


def _fts_tables(entries) -> dict[str, str]:
    return {name: sql for kind, name, _, sql in entries
            if kind == "table" and sql and re.search(r"USING\s+fts5", sql, re.IGNORECASE)}


def _is_shadow(name: str, fts: dict[str, str]) -> bool:
    return any(name != f and name.startswith(f) and name[len(f):] in FTS_SHADOWS for f in fts)


def _contentful(sql: str) -> bool:
    """An FTS5 table that keeps its own copy of the text (no `content=` option): its `_content`
    rows are what 'rebuild' indexes."""
    return not re.search(r"\bcontent\s*=", sql, re.IGNORECASE)


def room_needed(path: Path) -> int:
    """Bytes a rebuild writes beside the store: its copy of the damaged files and the new store."""
    size = sum(os.stat(f"{path}{s}").st_size for s in ("", *SIDECARS) if os.path.exists(f"{path}{s}"))
    return 2 * size + (1 << 20)


def check_room(path: Path) -> None:
    """Refused before anything is written when the file system lacks the room."""
    st = os.statvfs(path.parent)
    free, need = st.f_bavail * st.f_frsize, room_needed(path)
    if free < need:
        raise RebuildRefused(f"{path.parent} has {free} bytes free; rebuilding the store needs about {need} "
                             "(its damaged copy kept and the new store): make room, then run it again")


def _reading(path: Path):
    """A store file opened to be copied, never through a link."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")


def keep_damaged(path: Path) -> Path:
    """The damaged file and its sidecars kept beside it, named for what they are and for their
    content (`state.db.damaged-<sha256>`): a second run over the same damage keeps no second copy.
    Read with plain file reads: only while no SQLite connection of this process has the store open
    (a close would drop its POSIX locks)."""
    digest = hashlib.sha256()
    with _reading(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    kept = path.with_name(f"{path.name}.damaged-{digest.hexdigest()[:16]}")
    for suffix in ("", *SIDECARS):
        source = Path(f"{path}{suffix}")
        target = Path(f"{kept}{suffix}")
        if not source.exists() or target.exists():
            continue
        temp = target.with_name(f".{target.name}.{os.getpid()}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out, _reading(source) as src:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    return kept


def _meta(conn: apsw.Connection) -> dict:
    one = lambda pragma: conn.execute(f"PRAGMA {pragma}").fetchall()[0][0]  # noqa: E731
    return {p: one(p) for p in ("page_size", "user_version", "application_id", "journal_mode", "auto_vacuum")}


def _insert_rows(source: apsw.Connection, target: apsw.Connection, table: str) -> int:
    columns = [r[1] for r in source.execute(f'PRAGMA table_info("{table}")').fetchall()]
    rowid = not re.search(r"WITHOUT\s+ROWID", source.execute(
        "SELECT sql FROM sqlite_master WHERE name = ?", [table]).fetchall()[0][0] or "", re.IGNORECASE)
    names = (["rowid"] if rowid else []) + [f'"{c}"' for c in columns]
    sql = f'INSERT INTO "{table}" ({", ".join(names)}) VALUES ({", ".join("?" * len(names))})'
    count, batch = 0, []
    for row in scan_rows(source, table):
        batch.append(row if rowid else row[1:])
        if len(batch) >= BATCH:
            target.executemany(sql, batch)
            count, batch = count + len(batch), []
    if batch:
        target.executemany(sql, batch)
        count += len(batch)
    return count


def _settle_foreign_keys(target: apsw.Connection, done: Rebuilt) -> None:
    """What a lost row leaves dangling: links cleared, sessions made again for the readable rows
    of `session_links` (the one rule `repair`'s report reads too: damage.readable_rows)."""
    tables = [r[0] for r in target.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
    links = session_links(target)
    for table in tables:
        keys = [(fk[2], fk[3], fk[4]) for fk in target.execute(f'PRAGMA foreign_key_list("{table}")').fetchall()]
        keys += [("sessions", column, "id") for linked, column in links
                 if linked == table and all(k[1] != column for k in keys)]
        for parent, column, key in keys:
            key = key or "rowid"
            dangling = (f'"{column}" IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "{parent}" p '
                        f'WHERE p."{key}" = "{table}"."{column}")')
            if parent == "sessions" and (table, column) in links:
                ids = [r[0] for r in target.execute(f'SELECT DISTINCT "{column}" FROM "{table}" WHERE {dangling}')]
                for sid in ids:
                    _recovered_session(target, sid, table, column)
                done.recovered_sessions += [i for i in ids if i not in done.recovered_sessions]
            else:
                target.execute(f'UPDATE "{table}" SET "{column}" = NULL WHERE {dangling}')
                done.cleared_links += target.changes()


def _recovered_session(target: apsw.Connection, sid: str, table: str, column: str) -> None:
    """A session row made again for readable rows whose own was lost, as Hermes' recovery marks
    them (`source = 'recovered'`), timed by its messages when they say."""
    have = {r[1] for r in target.execute('PRAGMA table_info("sessions")').fetchall()}
    first = last = 0.0
    if table == "messages" and "timestamp" in {r[1] for r in target.execute('PRAGMA table_info("messages")')}:
        first, last = target.execute(f'SELECT min(timestamp), max(timestamp) FROM messages WHERE "{column}" = ?',
                                     [sid]).fetchall()[0]
    row = {"id": sid, "source": "recovered", "started_at": first or 0.0, "ended_at": last or first or 0.0,
           "end_reason": "recovered"}
    row = {k: v for k, v in row.items() if k in have}
    target.execute(f'INSERT OR IGNORE INTO sessions ({", ".join(row)}) VALUES ({", ".join("?" * len(row))})',
                   list(row.values()))


def check(conn: apsw.Connection, fts: list[str]) -> list[str]:
    """What SQLite finds wrong in a store: integrity_check, foreign keys, each FTS5 index."""
    problems = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall() if r[0] != "ok"]
    problems += [f"foreign key: {r[0]} row {r[1]} -> {r[2]}" for r in conn.execute("PRAGMA foreign_key_check")]
    return problems + fts_index.integrity_problems(conn, tuple(fts))


def build(path: Path, new: Path) -> Rebuilt:
    """The store at `path` made again at `new` (a path not yet used) from what can be read; checked.
    Raises RebuildRefused (the new file removed) when the result does not pass SQLite's checks."""
    source = open_as_it_is(path)
    done = Rebuilt()
    try:
        meta = _meta(source)
        entries = source.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid").fetchall()
        fts = _fts_tables(entries)
        remove_new(new)
        target = keep_wal.connect(new, keep_wal.READ_WRITE | apsw.SQLITE_OPEN_CREATE | apsw.SQLITE_OPEN_NOFOLLOW)
        try:
            target.execute(f"PRAGMA page_size = {int(meta['page_size'])}")
            target.execute(f"PRAGMA auto_vacuum = {int(meta['auto_vacuum'])}")
            target.execute("PRAGMA journal_mode = DELETE").fetchall()
            target.execute("BEGIN")
            tables = [(n, sql) for kind, n, _, sql in entries if kind == "table" and sql and n not in fts
                      and not _is_shadow(n, fts) and not n.startswith("sqlite_")]
            for name, sql in tables:
                target.execute(sql)
            for name, _ in tables:
                done.rows[name] = _insert_rows(source, target, name)
            if any(n == "sqlite_sequence" for _, n, _, _ in entries):
                target.executemany("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                                   [r[1:] for r in scan_rows(source, "sqlite_sequence")])
            _settle_foreign_keys(target, done)
            for kind in ("index", "view"):
                for k, _, _, sql in entries:
                    if k == kind and sql:
                        target.execute(sql)
            for name, sql in fts.items():
                target.execute(sql)
                if _contentful(sql):  # its own copy of the text is its source: but of the rows still there
                    done.rows[f"{name}_content"] = _insert_rows(source, target, f"{name}_content")
                    mirrored = _mirrored_table(entries, name)
                    if mirrored:
                        target.execute(f'DELETE FROM "{name}_content" WHERE id NOT IN (SELECT rowid FROM "{mirrored}")')
                for key, value in _config_rows(source, name):
                    target.execute(f'INSERT OR REPLACE INTO "{name}_config" (k, v) VALUES (?, ?)', [key, value])
                target.execute(f"INSERT INTO \"{name}\"(\"{name}\") VALUES ('rebuild')")
            for k, _, _, sql in entries:
                if k == "trigger" and sql:
                    target.execute(sql)
            target.execute(f"PRAGMA user_version = {int(meta['user_version'])}")
            target.execute(f"PRAGMA application_id = {int(meta['application_id'])}")
            target.execute("COMMIT")
            problems = check(target, list(fts))
            if problems:
                raise RebuildRefused("the rebuilt store does not pass SQLite's checks: " + "; ".join(problems[:3]))
            if meta["journal_mode"] == "wal":  # the file's header says WAL, as the store's does
                target.execute("PRAGMA journal_mode = WAL").fetchall()  # built in DELETE: its WAL is empty
        finally:
            target.close()
    except BaseException:
        remove_new(new)
        raise
    finally:
        source.close()
    return done


def _mirrored_table(entries, fts: str) -> str | None:
    """The table whose rows a contentful FTS5 index mirrors: the one whose trigger inserts into it."""
    for kind, _, table, sql in entries:
        if kind == "trigger" and sql and re.search(rf'INSERT\s+INTO\s+"?{re.escape(fts)}"?\s*\(', sql, re.IGNORECASE):
            return table
    return None


def _config_rows(source: apsw.Connection, table: str) -> list[tuple]:
    """An FTS5 index's stored settings but its version (the new index writes its own)."""
    try:
        return [r for r in source.execute(f'SELECT k, v FROM "{table}_config"').fetchall() if r[0] != "version"]
    except apsw.Error:
        return []


def new_path(path: Path) -> Path:
    """Where the rebuilt store is made, beside the store (hidden; ours alone)."""
    return path.with_name(f".{path.name}.rebuild-{os.getpid()}")


def remove_leftovers(path: Path) -> None:
    """What an earlier rebuild that died left of its new file (nothing else ever opens one)."""
    prefix = f".{path.name}.rebuild-"
    for name in os.listdir(path.parent):
        if name.startswith(prefix) and name[len(prefix):].split("-")[0].isdigit():
            stem = path.with_name(prefix + name[len(prefix):].split("-")[0])
            remove_new(stem)


def remove_new(new: Path) -> None:
    """The new file of a rebuild (ours alone: nobody else ever opened it) and its sidecars."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{new}{suffix}")
        except FileNotFoundError:
            pass


def put_in_place(new: Path, path: Path, step: Callable[[str], None] = lambda where: None, pages: int = 256) -> None:
    """The rebuilt store copied into the store's own file by SQLite's backup, in one transaction
    of the store's journal (the file and its inode stay; a crash leaves the store as it was).
    `step(where)` is called after each of the backup's steps of `pages` pages (tests stop there)."""
    source = keep_wal.connect(new, keep_wal.READ_ONLY)
    target = keep_wal.connect(path, keep_wal.READ_WRITE, 5000)
    try:
        target.execute("PRAGMA writable_schema = ON")  # a file cut short is still written to, not refused
        with target.backup("main", source, "main") as backup:
            while not backup.done:
                backup.step(pages)
                step("backup")
    finally:
        target.close()
        source.close()


def finish_migration(path: Path) -> str:
    """What a migration cut short left aside (schema.migration_leftovers) put where it was going, in
    one transaction, as Hermes' own rebuild does: the rows the live table does not hold yet copied
    into it (the columns both have), then the leftover dropped. A `schema_version` that says more
    than the tables hold (schema.migration_gap) is set back, in the same transaction, to the last
    version whose tables and columns the store all has: the release's own migration then adds the
    rest when it next opens the store (each release adds what a table lacks by its own DDL and runs
    the version's steps from there), and only the version row changes here. Returns what it did."""
    from hermes_admin.profile.store.damage import _schema_said
    from hermes_admin.profile.store.schema import Schema, migration_gap, migration_leftovers

    conn = keep_wal.connect(path, keep_wal.READ_WRITE, 5000)
    try:
        tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        said = []
        conn.execute("BEGIN IMMEDIATE")
        try:
            for leftover, live in migration_leftovers(Schema(None, tables, frozenset(), frozenset(), {})):
                have = [r[1] for r in conn.execute(f'PRAGMA table_info("{live}")').fetchall()]
                old = {r[1] for r in conn.execute(f'PRAGMA table_info("{leftover}")').fetchall()}
                columns = ", ".join(f'"{c}"' for c in have if c in old)
                conn.execute(f'INSERT OR IGNORE INTO "{live}" ({columns}) SELECT {columns} FROM "{leftover}"')
                moved = conn.changes()
                # its indexes went aside with it (a RENAME takes them): made again on the live table
                indexes = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND "
                                                      "tbl_name = ? AND sql IS NOT NULL", [leftover]).fetchall()]
                conn.execute(f'DROP TABLE "{leftover}"')
                for sql in indexes:
                    conn.execute(re.sub(rf'\bON\s+"?{re.escape(leftover)}"?', f'ON "{live}"', sql, count=1,
                                        flags=re.IGNORECASE).replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1)
                                 .replace("CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX IF NOT EXISTS", 1))
                said.append(f"{moved} row(s) of {leftover} copied into {live}, the leftover dropped")
            gap = migration_gap(_schema_said(conn, tables))
            if gap is not None:
                conn.execute("UPDATE schema_version SET version = ? WHERE version > ?", [gap.holds, gap.holds])
                said.append(f"schema_version set back from {gap.says} to {gap.holds}, the last version whose tables "
                            f"it holds: Hermes' own migration adds the rest ({len(gap.missing)} missing) when it "
                            "next opens the store, losing nothing")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return "finished the migration cut short: " + "; ".join(said)

"""What must hold of a store after any command of ours, whichever Hermes release wrote it.

- SQLite: `PRAGMA integrity_check`, `PRAGMA foreign_key_check`, and every FTS5 table's
  'integrity-check' both plain and with rank = 1 (which also checks an external-content index
  against its content);
- no orphan row, by Hermes' own rules: rows Hermes deletes or detaches with their session
  (messages, session_model_usage, sessions.parent_session_id, telegram_dm_topic_bindings, a
  word index row of a message that is gone, system prompts no session refers to) must not outlive
  it, and no live turn lease or compression lock may name a session that is gone (Hermes never
  deletes under one). Rows Hermes itself leaves behind on a delete (expired leases and locks,
  gateway_routing, async_delegations, conversation_generations) are not orphans;
- the release's own SessionDB, in its venv, opens the store, lists its sessions, searches both
  full-text indexes (a word, and CJK text that Hermes sends to the trigram index), loads every
  transcript, and appends a message.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tempfile
import time
from pathlib import Path

from tests import one_sqlite, peer

SEARCH_WORD = "zebracorn"
SEARCH_CJK = "数据库迁移计划"

# Tables whose rows go (or are detached) with their session, and the column naming it.
DEPENDENT = (("messages", "session_id"), ("session_model_usage", "session_id"),
             ("telegram_dm_topic_bindings", "session_id"))


def _ro(db: Path) -> sqlite3.Connection:
    """The system's own SQLite (3.40.1 on Debian 12), an older reader than ours: what we wrote must
    read there too. Used once our command is over (no connection of ours open in this process)."""
    return one_sqlite.system_connect(f"file:{db}?mode=ro", uri=True)


def _tables(conn) -> dict[str, str]:
    return {name: sql or "" for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}


def _columns(conn, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def fts_tables(conn) -> dict[str, str]:
    return {name: sql for name, sql in _tables(conn).items() if re.search(r"using\s+fts5", sql, re.I)}


def sqlite_problems(db: Path) -> list[str]:
    """integrity_check, foreign_key_check, and both FTS5 integrity-checks of every FTS5 table."""
    problems = []
    conn = _ro(db)
    try:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            problems.append(f"integrity_check: {result[:5]}")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        if fk:
            problems.append(f"foreign_key_check: {fk[:5]}")
        tables = fts_tables(conn)
    finally:
        conn.close()
    # An FTS5 integrity-check is written as an INSERT: it changes nothing but needs a writable
    # handle, so it runs on a private copy (SQLite's backup: a consistent snapshot).
    with tempfile.TemporaryDirectory(prefix="hermes-admin-checks-") as tmp:
        copy = Path(tmp) / "copy.db"
        src, dst = _ro(db), one_sqlite.system_connect(copy)
        try:
            src.backup(dst)
        finally:
            src.close()
        try:
            for table in sorted(tables):
                for label, sql in (("integrity-check", f"INSERT INTO {table}({table}) VALUES ('integrity-check')"),
                                   ("integrity-check rank=1",
                                    f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")):
                    try:
                        dst.execute(sql)
                    except sqlite3.DatabaseError as exc:
                        problems.append(f"{table} {label}: {exc}")
        finally:
            dst.close()
    return problems


def _holder_dead(holder: str) -> bool:
    """A holder Hermes would call provably dead: a pid of this pid namespace that is gone."""
    match = re.search(r"(?:^|:)pid=(\d+)(?::|$)", holder or "")
    if not match or "pidns=" in (holder or ""):
        return False  # unstamped, or another namespace: Hermes waits for the TTL
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def live_guards(db: Path, now: float | None = None) -> dict[str, list[str]]:
    """Live rows of compression_locks and session_turn_leases: {table: [session or conversation id]}."""
    now = time.time() if now is None else now
    conn = _ro(db)
    try:
        tables = _tables(conn)
        out = {}
        for table, key in (("compression_locks", "session_id"), ("session_turn_leases", "conversation_id")):
            if table in tables:
                out[table] = [sid for sid, holder, expires in conn.execute(
                    f"SELECT {key}, holder, expires_at FROM {table}") if float(expires) > now and not _holder_dead(holder)]
        return out
    finally:
        conn.close()


def guarded_sessions(db: Path, now: float | None = None) -> set[str]:
    """Every session whose conversation holds a live compression lock or turn lease, as Hermes 0.22.2
    reads them: a lock guards its own session; a lease is keyed by the compression chain's root and
    guards every segment of that chain (children that continue a compression-ended parent, not
    delegate, branch or reset forks, nor tool sessions)."""
    guards = live_guards(db, now)
    conn = _ro(db)
    try:
        rows = {sid: (parent, end_reason, source, model_config) for sid, parent, end_reason, source, model_config in
                conn.execute("SELECT id, parent_session_id, end_reason, source, model_config FROM sessions")}
    finally:
        conn.close()

    def continues(child: str) -> bool:
        parent, _, source, model_config = rows[child]
        if not parent or parent not in rows or rows[parent][1] != "compression" or source == "tool":
            return False
        try:
            config = json.loads(model_config or "{}") or {}
        except ValueError:
            config = {}
        return not any(config.get(m) == parent for m in ("_branched_from", "_delegate_from", "_reset_from"))

    def root_of(sid: str) -> str:
        seen = {sid}
        while continues(sid) and rows[sid][0] not in seen:
            sid = rows[sid][0]
            seen.add(sid)
        return sid

    guarded = {sid for sid in guards.get("compression_locks", []) if sid in rows}
    leased = set(guards.get("session_turn_leases", []))
    guarded |= {sid for sid in rows if root_of(sid) in leased}
    return guarded


def orphan_problems(db: Path, now: float | None = None) -> list[str]:
    problems = []
    conn = _ro(db)
    try:
        tables = _tables(conn)
        for table, column in DEPENDENT:
            if table in tables:
                n = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} NOT IN (SELECT id FROM sessions)").fetchone()[0]
                if n:
                    problems.append(f"{n} {table} row(s) of a session that is gone")
        n = conn.execute("SELECT COUNT(*) FROM sessions WHERE parent_session_id IS NOT NULL "
                         "AND parent_session_id NOT IN (SELECT id FROM sessions)").fetchone()[0]
        if n:
            problems.append(f"{n} session(s) whose parent_session_id names a session that is gone")
        for table, sql in fts_tables(conn).items():
            # A contentful index (v22's) holds its own copy: a row of a message that is gone is an orphan.
            # External-content indexes are checked against their content by integrity-check rank=1.
            if table.startswith("messages_fts") and "content=" not in sql.replace(" ", "").lower():
                n = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE rowid NOT IN (SELECT id FROM messages)").fetchone()[0]
                if n:
                    problems.append(f"{n} {table} row(s) of a message that is gone")
        if "system_prompts" in tables:
            refs = ["system_prompt_hash"] + (["tool_names"] if "tool_names" in _columns(conn, "sessions") else [])
            where = " AND ".join(f"hash NOT IN (SELECT {c} FROM sessions WHERE {c} IS NOT NULL)" for c in refs)
            n = conn.execute(f"SELECT COUNT(*) FROM system_prompts WHERE {where}").fetchone()[0]
            if n:
                problems.append(f"{n} system prompt(s) no session refers to")
        ids = {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()
    for table, names in live_guards(db, now).items():
        gone = sorted(set(names) - ids)
        if gone:
            problems.append(f"live {table} row(s) naming a session that is gone: {gone}")
    return problems


HERMES_CHECK = r'''
import json, sqlite3, sys, time
from pathlib import Path
spec = json.loads(sys.argv[1])
from hermes_state import SessionDB
problems = []
path = Path(spec["db"])
ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
ids = [r[0] for r in ro.execute("SELECT id FROM sessions")]
counts = dict(ro.execute("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id").fetchall())
def having(text):
    return {r[0] for r in ro.execute(
        "SELECT DISTINCT m.session_id FROM messages m WHERE m.content LIKE ? AND m.role <> 'tool' AND m.active = 1",
        (f"%{text}%",))}
expect_word, expect_cjk = having(spec["word"]), having(spec["cjk"])
target = ro.execute(
    "SELECT id FROM sessions WHERE COALESCE(end_reason, '') <> 'compression' AND id NOT IN "
    "(SELECT session_id FROM compression_locks) ORDER BY ended_at IS NULL DESC, started_at DESC LIMIT 1").fetchone()
ro.close()

db = SessionDB(path)
try:
    listed = db.list_sessions_rich(limit=100000, include_archived=True, include_children=True)
    unknown = {s["id"] for s in listed} - set(ids)
    if unknown:
        problems.append(f"list_sessions_rich lists sessions that are not in the store: {sorted(unknown)[:5]}")
    if ids and not listed:
        problems.append("list_sessions_rich lists nothing")
    describe = getattr(db, "_describe_search_path", None)
    for label, query, expected in (("word index", spec["word"], expect_word), ("trigram index", spec["cjk"], expect_cjk)):
        found = {m["session_id"] for m in db.search_messages(query, limit=1000)}
        if found != expected:
            problems.append(f"search_messages({query!r}) ({label}) found {sorted(found)}, the store holds {sorted(expected)}")
    if describe is not None:  # 0.20.1 and later name the route a query takes
        for query, route in ((spec["word"], "fts5"), (spec["cjk"], "trigram")):
            if describe(query) != route:
                problems.append(f"Hermes routes {query!r} to {describe(query)}, not its {route} index")
    for sid in ids:
        got = db.get_messages(sid, include_inactive=True)
        if len(got) != counts.get(sid, 0):
            problems.append(f"get_messages({sid}) loaded {len(got)} of {counts.get(sid, 0)} rows")
        db.get_messages_as_conversation(sid)
    if spec.get("write", True) and target:
        sid = target[0]
        before = len(db.get_messages(sid, include_inactive=True))
        db.append_message(sid, "user", "written by the release after hermes-admin", timestamp=time.time())
        if len(db.get_messages(sid, include_inactive=True)) != before + 1:
            problems.append(f"append_message({sid}) did not land")
finally:
    db.close()
print(json.dumps({"problems": problems, "sessions": len(ids)}))
'''


def hermes_problems(home: Path, release: str, write: bool = True, timeout: float = 180) -> list[str]:
    """The release's own SessionDB on the store of `home`: open, list, search both indexes, load
    every transcript, append a message (unless write=False)."""
    spec = {"db": str(home / "state.db"), "word": SEARCH_WORD, "cjk": SEARCH_CJK, "write": write}
    done = peer.run_script(HERMES_CHECK, home=home, release=release, args=[json.dumps(spec)], timeout=timeout)
    if done.returncode != 0:
        return [f"Hermes {release}'s SessionDB failed on {home}: {done.stderr.strip()[-3000:]}"]
    return json.loads(done.stdout.strip().splitlines()[-1])["problems"]


def store_problems(home: Path, release: str | None = None, write: bool = True) -> list[str]:
    """Every check of this module on one profile home (the Hermes one when `release` is given)."""
    db = home / "state.db"
    problems = sqlite_problems(db) + orphan_problems(db)
    if release is not None:
        problems += hermes_problems(home, release, write=write)
    return problems

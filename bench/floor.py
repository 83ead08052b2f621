"""The plain-SQL floor: the least work that deletes what `hermes-admin purge --older-than DAYS` deletes.

Usage: python floor.py HOME [DAYS] [TRANSACTIONS] [--apsw] [--by-sessions]  -> prints one JSON line

--by-sessions: TRANSACTIONS of about as many sessions each, a unit always whole in one (the floor
until issue 50's last figures; see 2. below).

--apsw: the same statements on apsw's own SQLite (what hermes-admin runs on since it moved to apsw;
`0ac9e84` and before ran on Python's sqlite3), so that "ours / the floor" compares the same library.

Nothing else may run on the store. Plain sqlite3 (foreign keys on, SQLite's
default synchronous=FULL, the store's own journal mode), no chunking unless
TRANSACTIONS asks for it (2. below), no events, no safety checks:

1. select the sessions retention purges (tasks/retention.py): every member of
   a unit ended, not pinned, not live (a compression lock), last activity
   (the newest of `last_activity_at`, the newest message, else `started_at`)
   before the cutoff. A unit here is a connected group of parent links, which
   is the same as hermes-admin's units when every child is a delegate or a
   compression continuation (true of the bench workloads);
2. one transaction, set-based, in the engine's order (`_delete_rows`):
   orphan surviving children, delete messages, usage rows, sessions, then
   system prompts nobody references any more; then a PASSIVE checkpoint
   (hermes-admin checkpoints its own commits too). With TRANSACTIONS, the
   same statements in that many transactions of about equal weight (the
   characters of the messages' text, plus hermes-admin's own cost of a row and
   of a unit: exports.ROW_WEIGHT, UNIT_WEIGHT), one after the other, as
   hermes-admin paces its own: units whole while they fit, and a unit heavier
   than one transaction's share deleted in steps, its messages by id a share
   at a time, its sessions with the last of them (so no transaction holds the
   lock much longer than the others, as none of hermes-admin's may); committed
   as hermes-admin commits (synchronous=NORMAL), SQLite checkpointing and FTS5
   merging as they always do (inside the commits): what the same SQL costs once
   no transaction may hold the lock for long;
3. unlink the sessions' files found by one scan of sessions/ (the names
   hermes-admin's files.py matches).

Every step is timed; `seconds` is the whole, from opening the store to the last unlink.
"""

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

DAY = 86400.0
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hermes_admin.profile.exports import ROW_WEIGHT, UNIT_WEIGHT  # noqa: E402  (what a row and a unit cost)
from hermes_admin.profile.store.files import session_id_of  # noqa: E402  (the file names Hermes uses)
from hermes_admin.profile.store.unit_rows import TEXT_COLUMNS  # noqa: E402  (what FTS5 indexes, as ours weighs)


def delete(conn, doomed: list[str], cols: set[str], tables: set[str]) -> dict[str, int]:
    """One transaction: the engine's statements, set-based, for these sessions."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY)")
    conn.execute("DELETE FROM temp.doomed")  # the sessions of the transaction before
    conn.executemany("INSERT INTO temp.doomed VALUES (?)", [(sid,) for sid in doomed])
    ids = "(SELECT id FROM temp.doomed)"
    refs = [c for c in ("system_prompt_hash", "tool_names") if c in cols] if "system_prompts" in tables else []
    hashes = set()
    for column in refs:
        hashes.update(r[0] for r in conn.execute(
            f"SELECT DISTINCT {column} FROM sessions WHERE id IN {ids} AND {column} IS NOT NULL"))
    counts = {"orphaned": conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN "
                                       f"{ids} AND id NOT IN {ids}").rowcount}
    counts["messages"] = conn.execute(f"DELETE FROM messages WHERE session_id IN {ids}").rowcount
    if "session_model_usage" in tables:
        counts["usage"] = conn.execute(f"DELETE FROM session_model_usage WHERE session_id IN {ids}").rowcount
    counts["sessions"] = conn.execute(f"DELETE FROM sessions WHERE id IN {ids}").rowcount
    if hashes:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS gone_prompts (hash TEXT PRIMARY KEY)")
        conn.execute("DELETE FROM temp.gone_prompts")
        conn.executemany("INSERT INTO temp.gone_prompts VALUES (?)", [(h,) for h in hashes])
        unused = " AND ".join(f"NOT EXISTS (SELECT 1 FROM sessions WHERE {c} = system_prompts.hash)" for c in refs)
        counts["system_prompts"] = conn.execute(
            f"DELETE FROM system_prompts WHERE hash IN (SELECT hash FROM temp.gone_prompts) AND {unused}").rowcount
    conn.execute("COMMIT")
    return counts


def units_of(sessions: list[str], links: dict[str, list[str]]) -> list[list[str]]:
    """The sessions in connected groups of parent links, in the order they first appear."""
    seen: set[str] = set()
    units = []
    for sid in sessions:
        if sid in seen:
            continue
        unit, todo = [], [sid]
        seen.add(sid)
        while todo:
            member = todo.pop()
            unit.append(member)
            for other in links.get(member, ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        units.append(unit)
    return units


def chunks(units: list[list[str]], wanted: int) -> list[list[str]]:
    """The units' sessions in `wanted` lists (fewer if there are fewer units), each of whole units
    and about as many sessions; one list when `wanted` is 1, empty or not, as the one-transaction
    floor always ran."""
    sessions = [sid for unit in units for sid in unit]
    if wanted == 1:
        return [sessions]
    if wanted >= len(units):
        return units
    lists, current, done = [], [], 0
    for unit in units:
        current += unit
        done += len(unit)
        if done >= len(sessions) * (len(lists) + 1) / wanted:
            lists.append(current)
            current = []
    return lists + ([current] if current else [])


def weighed(units: list[list[str]], wanted: int, messages: dict[str, list[tuple[int, int]]]) -> list[tuple[str, list]]:
    """The units in `wanted` transactions of about equal weight (as near as whole units and steps
    allow, never more), in order: the share each may carry is the least for which `shared` makes
    no more than `wanted` of them."""
    def weight(unit: list[str]) -> int:
        return UNIT_WEIGHT + sum(b + ROW_WEIGHT for sid in unit for _, b in messages.get(sid, ()))

    weights = [weight(unit) for unit in units]
    low, high = max(1.0, sum(weights) / wanted), float(sum(weights) + 1)
    for _ in range(24):  # bisection on the share: a heavier one makes fewer transactions
        middle = (low + high) / 2
        if len(shared(units, weights, middle, messages)) > wanted:
            low = middle
        else:
            high = middle
    return shared(units, weights, high, messages)


def shared(units: list[list[str]], weights: list[int], share: float,
           messages: dict[str, list[tuple[int, int]]]) -> list[tuple[str, list]]:
    """The units in transactions of at most `share` of weight where a unit allows: ("units",
    sessions) deletes whole units; ("messages", ids) the messages of a unit heavier than `share`, a
    share at a time (its sessions, and the messages left, go in a "units" one after).
    `messages`: each session's (id, characters of text)."""
    done: list[tuple[str, list]] = []
    current: list[str] = []
    current_w = 0
    for unit, w in zip(units, weights):
        if current and current_w + w > share:
            done.append(("units", current))
            current, current_w = [], 0
        if w <= share:
            current, current_w = current + unit, current_w + w
            continue
        step, step_w = [], 0
        for mid, size in sorted(m for sid in unit for m in messages.get(sid, ())):  # few: the heavy units
            step.append(mid)
            step_w += size + ROW_WEIGHT
            if step_w >= share:
                done.append(("messages", step))
                step, step_w = [], 0
        done.append(("units", unit))
    return done + ([("units", current)] if current else [])


def delete_messages(conn, ids: list[int]) -> dict[str, int]:
    """One transaction: these messages (a step of a unit too heavy for one)."""
    conn.execute("BEGIN IMMEDIATE")
    n = 0
    for at in range(0, len(ids), 500):
        part = ids[at:at + 500]
        n += conn.execute(f"DELETE FROM messages WHERE id IN ({','.join('?' * len(part))})", part).rowcount
    conn.execute("COMMIT")
    return {"messages": n}


def message_weights(conn, doomed: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Each doomed session's messages: (id, the characters of its text)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(messages)")}
    size = " + ".join(f"COALESCE(LENGTH({c}), 0)" for c in TEXT_COLUMNS if c in have) or "0"
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS weighed (id TEXT PRIMARY KEY)")
    conn.executemany("INSERT OR IGNORE INTO temp.weighed VALUES (?)", [(sid,) for sid in doomed])
    found: dict[str, list[tuple[int, int]]] = {}
    for sid, mid, b in conn.execute(f"SELECT session_id, id, {size} FROM messages "
                                    "WHERE session_id IN (SELECT id FROM temp.weighed)"):
        found.setdefault(sid, []).append((mid, b))
    conn.execute("DROP TABLE temp.weighed")
    return found


class _ApswConnection:
    """The few calls of sqlite3's connection this script makes, on an apsw connection (autocommit,
    as sqlite3's isolation_level=None): `execute` returns its rows and `rowcount`."""

    def __init__(self, path: Path):
        import apsw

        self._conn = apsw.Connection(str(path))

    def execute(self, sql: str, params=()) -> "_Rows":
        rows = list(self._conn.cursor().execute(sql, params))
        return _Rows(rows, self._conn.changes())

    def executemany(self, sql: str, seq) -> None:
        self._conn.cursor().executemany(sql, seq)

    def close(self) -> None:
        self._conn.close()


class _Rows(list):
    def __init__(self, rows: list, changes: int):
        super().__init__(rows)
        self.rowcount = changes

    def fetchall(self) -> list:
        return list(self)

    def fetchone(self):
        return self[0] if self else None


def main() -> None:
    on_apsw, by_sessions = "--apsw" in sys.argv, "--by-sessions" in sys.argv
    argv = [a for a in sys.argv if a not in ("--apsw", "--by-sessions")]
    home = Path(argv[1])
    days = float(argv[2]) if len(argv) > 2 else 90.0
    started = time.monotonic()
    cutoff = time.time() - days * DAY
    if on_apsw:
        conn = _ApswConnection(home / "state.db")
    else:
        conn = sqlite3.connect(home / "state.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    pinned = "s.pinned" if "pinned" in cols else "0"
    activity = "s.last_activity_at" if "last_activity_at" in cols else "NULL"
    live = "s.id IN (SELECT session_id FROM compression_locks)" if "compression_locks" in tables else "0"
    rows = conn.execute(
        f"SELECT s.id, s.parent_session_id, s.ended_at IS NOT NULL AND NOT {pinned} AND NOT ({live}) AND "
        f"MAX(COALESCE({activity}, 0), COALESCE((SELECT MAX(m.timestamp) FROM messages m "
        f"WHERE m.session_id = s.id), s.started_at)) < ? FROM sessions s", (cutoff,)).fetchall()
    # a unit (a connected group of parent links) goes whole or not at all: one kept member keeps it
    ok = {sid: bool(good) for sid, _, good in rows}
    parent = {sid: p for sid, p, _ in rows}
    links: dict[str, list[str]] = {}
    for sid, p in parent.items():
        if p in parent:
            links.setdefault(sid, []).append(p)
            links.setdefault(p, []).append(sid)
    doomed_units = [unit for unit in units_of(list(parent), links) if all(ok[sid] for sid in unit)]
    doomed = [sid for unit in doomed_units for sid in unit]
    wanted = int(argv[3]) if len(argv) > 3 else 1
    if wanted < 1:
        sys.exit(f"floor.py: TRANSACTIONS must be 1 or more, not {wanted}")
    planning = time.monotonic()
    if wanted == 1 or by_sessions:
        plan = [("units", chunk) for chunk in chunks(doomed_units, wanted)]
    else:
        plan = weighed(doomed_units, wanted, message_weights(conn, doomed))
    selected = time.monotonic()
    plan_s = selected - planning  # the bench's own work, not the floor's: left out of its time (run.py)

    if wanted > 1:
        conn.execute("PRAGMA synchronous=NORMAL")  # as hermes-admin commits: a sync at checkpoints only
    counts: dict[str, int] = {}
    transactions, longest = 0, 0.0
    for kind, chunk in plan:
        began = time.monotonic()
        done = delete(conn, chunk, cols, tables) if kind == "units" else delete_messages(conn, chunk)
        for key, n in done.items():
            counts[key] = counts.get(key, 0) + n
        transactions += 1
        longest = max(longest, time.monotonic() - began)
    committed = time.monotonic()
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    conn.close()
    checkpointed = time.monotonic()

    doomed_set, unlinked = set(doomed), 0
    folder = home / "sessions"
    if folder.is_dir():
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if session_id_of(e.name) in doomed_set]
        for name in names:
            try:
                os.unlink(folder / name)
                unlinked += 1
            except FileNotFoundError:
                pass
    ended = time.monotonic()
    print(json.dumps({"seconds": round(ended - started, 3), "select_s": round(selected - started, 3),
                      "delete_s": round(committed - selected, 3), "checkpoint_s": round(checkpointed - committed, 3),
                      "files_s": round(ended - checkpointed, 3), "plan_s": round(plan_s, 3), "files": unlinked, "deleted": len(doomed),
                      "rows": sum(counts.values()), "counts": counts,
                      "transactions": transactions, "longest_ms": round(longest * 1000, 1),
                      "sessions_per_transaction": round(len(doomed) / max(1, transactions), 1),
                      "sqlite": __import__("apsw").sqlite_lib_version() if on_apsw else sqlite3.sqlite_version}))


if __name__ == "__main__":
    main()

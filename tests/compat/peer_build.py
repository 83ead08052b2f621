"""Build a Hermes root with a real Hermes Agent release's SessionDB (run inside that release's venv).

Usage: python peer_build.py SPEC_JSON  -> prints {profile: {kind: [ids]}} as JSON.

SPEC: {"root": PATH, "now": EPOCH, "profiles": [NAME, ...], "plugins_enabled": [...], "sessions": {...},
       "orphans": true | false | [NAME, ...], "scenario": "standard" | "releases"}
Every row is written through the release's own API (create_session, append_message,
end_session, set_session_archived, set_session_pinned, try_acquire_session_turn_lease,
save_gateway_routing_entry, ...), so schema, triggers and FTS indexes are its own. Ages are then
set with UPDATEs on Hermes' own connection, since Hermes stamps rows with the wall clock and no
release has an API to backdate them (started_at, ended_at, last_activity_at).

"standard" is the scenario the single-release tests expect; "releases" adds what the newer
releases have where the release has it (pins, turn leases keyed by the chain root, routing
entries, big tool results, text for both full-text indexes, a chain ended whole long ago, a row
Hermes' own startup reap closed). Works with 0.19.0, 0.20.1 and 0.22.2.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

DAY = 86400.0
HOUR = 3600.0


def sid_at(ts: float, salt: str) -> str:
    return time.strftime("%Y%m%d_%H%M%S", time.gmtime(ts)) + "_" + hashlib.sha1(salt.encode()).hexdigest()[:6]


def write_files(sessions_dir: Path, sid: str, kinds, mtime: float) -> None:
    sessions_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(mtime)) + "_000123"
    names = {"json": f"{sid}.json", "jsonl": f"{sid}.jsonl", "snapshot": f"session_{sid}.json",
             "dump": f"request_dump_{sid}_{stamp}.json"}
    for kind in kinds:
        path = sessions_dir / names[kind]
        path.write_text(json.dumps({"session_id": sid}) + "\n")
        os.utime(path, (mtime, mtime))


def build_profile(home: Path, name: str, now: float, plugins_enabled: list[str], sessions: dict,
                  orphans: bool = True, scenario: str = "standard") -> dict:
    # HERMES_HOME (and HOME) first: 0.22.2 creates ~/.hermes at import otherwise, and reads the
    # profile's config.yaml through it.
    os.environ["HERMES_HOME"] = str(home)
    os.environ["HOME"] = str(home)
    from hermes_state import SessionDB

    for folder in ("sessions", "logs", "memories", "skills", "cron"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    config = {"model": {"default": "peer/model"}}
    if plugins_enabled:
        config["plugins"] = {"enabled": plugins_enabled}
    if sessions:
        config["sessions"] = sessions
    (home / "config.yaml").write_text(json.dumps(config) + "\n")  # JSON is valid YAML
    sessions_dir = home / "sessions"
    db = SessionDB(home / "state.db")
    kinds: dict[str, list[str]] = {}
    counter = iter(range(10_000))

    def columns(table):
        return {row[1] for row in db._conn.execute(f"PRAGMA table_info({table})")}

    session_columns = columns("sessions")

    def set_times(sid, started, ended=None, extra_sql="", args=()):
        # No release can backdate a row: SQL on Hermes' own connection.
        def work(conn):
            conn.execute(f"UPDATE sessions SET started_at = ?, ended_at = ? {extra_sql} WHERE id = ?",
                         (started, ended, *args, sid))
        db._execute_write(work)

    def talk(sid, count, first, text="message"):
        for i in range(count):
            db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"{text} {i} of {sid}",
                              timestamp=first + i * 60)

    def new(kind, started, *, source="cli", ended=None, end_reason="user_exit", title=None, parent=None,
            delegate_from=None, archived=False, session_key=None, msgs=None):
        sid = sid_at(started, f"{name}:{kind}:{next(counter)}")
        model_config = {"_delegate_from": delegate_from} if delegate_from else None
        db.create_session(sid, source, model="peer/model", model_config=model_config,
                          parent_session_id=parent, session_key=session_key)
        if title:
            db.set_session_title(sid, title)
        if msgs:  # before the end: newer releases refuse appends to a segment compression closed
            talk(sid, *msgs)
        if ended is not None:
            db.end_session(sid, end_reason)
        set_times(sid, started, ended)
        if archived:
            db.set_session_archived(sid, True)
        kinds.setdefault(kind, []).append(sid)
        return sid


    for age in (120, 200):
        sid = new("old_ended", now - age * DAY, ended=now - age * DAY + HOUR, title=f"old chat {age}d {name}")
        talk(sid, 6, now - age * DAY)
        db.update_token_counts(sid, input_tokens=100, output_tokens=50, model="peer/model")
        write_files(sessions_dir, sid, ("json", "jsonl", "snapshot", "dump"), now - age * DAY)
    sid = new("old_archived", now - 100 * DAY, ended=now - 100 * DAY + HOUR, archived=True, source="telegram")
    talk(sid, 4, now - 100 * DAY)
    write_files(sessions_dir, sid, ("jsonl",), now - 100 * DAY)
    sid = new("recent", now - 2 * DAY, ended=now - 2 * DAY + HOUR, title=f"recent chat {name}")
    talk(sid, 8, now - 2 * DAY)
    write_files(sessions_dir, sid, ("json", "jsonl", "snapshot"), now - 2 * DAY)
    for age in (45, 70):
        sid = new("inactive", now - age * DAY, ended=now - age * DAY + HOUR, end_reason="idle", source="discord")
        talk(sid, 4, now - age * DAY)
    sid = new("old_open", now - 200 * DAY, source="slack")
    talk(sid, 4, now - 200 * DAY)
    sid = new("revived", now - 200 * DAY, ended=now - 1 * DAY)
    talk(sid, 2, now - 200 * DAY)
    talk(sid, 2, now - 1 * DAY, text="again")

    new("empty_ended", now - 5 * DAY, ended=now - 5 * DAY + 60)
    new("empty_open", now - 3 * DAY, source="desktop")
    new("tui_ghost", now - 3 * DAY, source="tui", ended=now - 3 * DAY + 5, end_reason="tui_shutdown")
    new("just_ended_empty", now - 20 * 60, ended=now - 10 * 60)

    root = new("lineage", now - 150 * DAY, ended=now - 140 * DAY, end_reason="compression", title=f"long project {name}",
               msgs=(6, now - 150 * DAY))
    mid = new("lineage", now - 140 * DAY, ended=now - 130 * DAY, end_reason="compression", parent=root,
              msgs=(4, now - 140 * DAY))
    tip = new("lineage", now - 130 * DAY, parent=mid)
    talk(tip, 4, now - 1 * DAY)
    write_files(sessions_dir, root, ("jsonl",), now - 140 * DAY)

    parent = new("delegate_parent", now - 110 * DAY, ended=now - 110 * DAY + HOUR)
    talk(parent, 4, now - 110 * DAY)
    write_files(sessions_dir, parent, ("json", "dump"), now - 110 * DAY)
    for _ in range(2):
        child = new("delegate_child", now - 110 * DAY + 60, source="subagent", ended=now - 110 * DAY + 600,
                    end_reason="done", parent=parent, delegate_from=parent)
        talk(child, 2, now - 110 * DAY + 60)
        write_files(sessions_dir, child, ("jsonl",), now - 110 * DAY)

    sid = new("locked_old", now - 130 * DAY, ended=now - 130 * DAY + HOUR)
    talk(sid, 2, now - 130 * DAY)
    db.try_acquire_compression_lock(sid, "peer:1", ttl_seconds=7 * DAY)

    namespace = "main" if name == "default" else name
    sid = new("keyed", now - 4 * DAY, source="telegram", ended=now - 4 * DAY + HOUR, end_reason="idle",
              session_key=f"agent:{namespace}:telegram:dm:7")
    talk(sid, 2, now - 4 * DAY)

    if scenario == "releases":
        extras(db, name, now, home, new, talk, kinds, session_columns)

    # Hermes dates activity with the wall clock (newer releases keep sessions.last_activity_at):
    # bring it back to the backdated rows' own last message, with SQL since no API can.
    if "last_activity_at" in session_columns:
        def activity(conn):
            conn.execute("UPDATE sessions SET last_activity_at = (SELECT MAX(v) FROM (SELECT started_at AS v "
                         "UNION ALL SELECT MAX(timestamp) FROM messages WHERE session_id = sessions.id)) "
                         "WHERE last_activity_at IS NOT NULL")
        db._execute_write(activity)

    # Crash leftovers: rows of a session that is gone (foreign keys off, as an old build had them).
    gone = sid_at(now - 95 * DAY, f"{name}:orphan")
    if not orphans:
        gone = None
    db._conn.execute("PRAGMA foreign_keys=OFF")

    def leftovers(conn):
        if gone is None:
            return
        for i in range(3):
            conn.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                         (gone, f"orphan {i}", now - 95 * DAY + i))
        conn.execute("INSERT INTO session_model_usage(session_id, model, input_tokens) VALUES (?, 'peer/model', 5)",
                     (gone,))
    db._execute_write(leftovers)
    db._conn.execute("PRAGMA foreign_keys=ON")
    kinds["orphan_rows"] = [gone] if gone else []

    stale = sid_at(now - 40 * DAY, f"{name}:stale-file")
    write_files(sessions_dir, stale, ("jsonl", "snapshot"), now - 30 * DAY)
    kinds["orphan_file_old"] = [stale]
    fresh = sid_at(now - HOUR, f"{name}:fresh-file")
    write_files(sessions_dir, fresh, ("jsonl",), now - HOUR)
    kinds["orphan_file_fresh"] = [fresh]
    (sessions_dir / "sessions.json").write_text(json.dumps({"agent:main:cli": {"session_id": tip}}) + "\n")
    db.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{home / 'state.db'}{suffix}")
        if path.exists():
            os.chmod(path, 0o600)
    return kinds

SEARCH_WORD = "zebracorn"        # for the word index (messages_fts)
SEARCH_CJK = "数据库迁移计划"     # seven CJK characters: Hermes searches them in the trigram index
BIG = 50_000                     # characters of the big tool results


def routing_entry(session_key: str, sid: str, platform: str, chat_id: str, at: float) -> str:
    """The routing entry the release's gateway would write (its own SessionEntry when it imports)."""
    from datetime import datetime, timezone
    stamp = datetime.fromtimestamp(at, tz=timezone.utc)
    try:
        from gateway.config import Platform
        from gateway.session import SessionEntry, SessionSource
        source = SessionSource(platform=Platform(platform), chat_id=chat_id, chat_type="dm")
        entry = SessionEntry(session_key=session_key, session_id=sid, created_at=stamp, updated_at=stamp,
                             origin=source, platform=Platform(platform), chat_type="dm")
        return json.dumps(entry.to_dict())
    except Exception:  # the shape every release reads back: session_key, session_id and the times
        return json.dumps({"session_key": session_key, "session_id": sid, "created_at": stamp.isoformat(),
                           "updated_at": stamp.isoformat(), "platform": platform, "chat_type": "dm"})


def extras(db, name, now, home, new, talk, kinds, session_columns) -> None:
    """What the newer releases have, written with the release's own API where it has one."""
    namespace = "main" if name == "default" else name
    has_pins = hasattr(db, "set_session_pinned") and "pinned" in session_columns
    has_leases = hasattr(db, "try_acquire_session_turn_lease")

    def tool_turn(sid, at, size):
        db.append_message(sid, "user", f"please read the log of {sid}", timestamp=at)
        call = {"id": f"call_{sid[-6:]}", "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": "/var/log/big.log"})}}
        db.append_message(sid, "assistant", None, tool_calls=[call], timestamp=at + 1)
        body = ("log line " + sid + " ") * (size // (10 + len(sid)) + 1)
        db.append_message(sid, "tool", body[:size], tool_name="read_file", tool_call_id=call["id"], timestamp=at + 2)
        db.append_message(sid, "assistant", "the log is long", timestamp=at + 3)

    # Big tool results: one past retention, one recent.
    sid = new("big_tool_old", now - 160 * DAY, ended=now - 160 * DAY + HOUR)
    tool_turn(sid, now - 160 * DAY, BIG)
    sid = new("big_tool_recent", now - 6 * DAY, ended=now - 6 * DAY + HOUR)
    tool_turn(sid, now - 6 * DAY, BIG)

    # Text for both indexes (a word, and CJK that goes to the trigram index), kept and past retention.
    for kind, age in (("search_recent", 3), ("search_old", 180)):
        sid = new(kind, now - age * DAY, ended=now - age * DAY + HOUR, title=f"{kind} {name}")
        db.append_message(sid, "user", f"{SEARCH_WORD} plan: {SEARCH_CJK} for {kind}", timestamp=now - age * DAY)
        db.append_message(sid, "assistant", f"{SEARCH_CJK} noted ({SEARCH_WORD})", timestamp=now - age * DAY + 60)

    # An open conversation in use today.
    sid = new("open_recent", now - HOUR, source="cli")
    talk(sid, 4, now - HOUR)

    # A compression chain ended whole long ago: every segment past retention.
    root = new("old_chain", now - 160 * DAY, ended=now - 155 * DAY, end_reason="compression", msgs=(4, now - 160 * DAY))
    mid = new("old_chain", now - 155 * DAY, ended=now - 150 * DAY, end_reason="compression", parent=root,
              msgs=(2, now - 155 * DAY))
    tip = new("old_chain", now - 150 * DAY, ended=now - 145 * DAY, parent=mid)
    talk(tip, 2, now - 150 * DAY)

    # A row Hermes' own startup reap closed lately: old activity, a recent end.
    sid = new("reaped_old", now - 200 * DAY, ended=now - 2 * DAY, end_reason="startup_orphan_reap")
    talk(sid, 2, now - 200 * DAY)

    # Routed sessions (the gateway's index names them inside entry_json).
    scope = str((home / "sessions").resolve())
    for kind, age in (("routed_recent", 1), ("routed_old", 140)):
        key = f"agent:{namespace}:telegram:dm:{100 + age}"
        sid = new(kind, now - age * DAY, source="telegram", ended=now - age * DAY + HOUR, end_reason="idle",
                  session_key=key)
        talk(sid, 2, now - age * DAY)
        db.save_gateway_routing_entry(key, routing_entry(key, sid, "telegram", str(100 + age), now - age * DAY),
                                      scope=scope)

    if has_pins:
        # Pinned: a durable keep, whatever its age.
        sid = new("pinned_old", now - 150 * DAY, ended=now - 150 * DAY + HOUR, title=f"pinned {name}")
        talk(sid, 4, now - 150 * DAY)
        db.set_session_pinned(sid, True)

    if has_leases:
        # Live turn leases (an unstamped holder: live until its TTL). Taken on the chain's TIP, as a
        # gateway turn does; Hermes keys the row by the chain's ROOT.
        root = new("leased_chain", now - 170 * DAY, ended=now - 165 * DAY, end_reason="compression",
                   msgs=(4, now - 170 * DAY))
        mid = new("leased_chain", now - 165 * DAY, ended=now - 160 * DAY, end_reason="compression", parent=root,
                  msgs=(2, now - 165 * DAY))
        tip = new("leased_chain", now - 160 * DAY, ended=now - 155 * DAY, parent=mid)
        talk(tip, 2, now - 160 * DAY)
        assert db.try_acquire_session_turn_lease(tip, f"gateway:{name}:turn", ttl_seconds=7 * DAY)
        sid = new("leased_old", now - 125 * DAY, ended=now - 125 * DAY + HOUR)
        talk(sid, 2, now - 125 * DAY)
        assert db.try_acquire_session_turn_lease(sid, f"gateway:{name}:turn2", ttl_seconds=7 * DAY)


def main() -> None:
    spec = json.loads(sys.argv[1])
    root = Path(spec["root"])
    out = {}
    orphans = spec.get("orphans", True)
    for name in spec["profiles"]:
        home = root if name == "default" else root / "profiles" / name
        home.mkdir(parents=True, exist_ok=True)
        out[name] = build_profile(home, name, float(spec["now"]), spec.get("plugins_enabled", []),
                                  spec.get("sessions", {}),
                                  name in orphans if isinstance(orphans, list) else bool(orphans),
                                  spec.get("scenario", "standard"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

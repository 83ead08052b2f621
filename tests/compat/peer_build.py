"""Build a Hermes root with the real Hermes Agent's SessionDB (run inside the peer's venv).

Usage: python peer_build.py SPEC_JSON  -> prints {profile: {kind: [ids]}} as JSON.

SPEC: {"root": PATH, "now": EPOCH, "profiles": [NAME, ...], "plugins_enabled": [...], "sessions": {...}}
Every row is written through Hermes' own API (create_session, append_message,
end_session, set_session_archived, ...), so schema, triggers and FTS indexes
are Hermes' own. Ages are then set with UPDATEs on Hermes' own connection,
since Hermes stamps rows with the wall clock.
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
                  orphans: bool = True) -> dict:
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

    def set_times(sid, started, ended=None, extra_sql="", args=()):
        def work(conn):
            conn.execute(f"UPDATE sessions SET started_at = ?, ended_at = ? {extra_sql} WHERE id = ?",
                         (started, ended, *args, sid))
        db._execute_write(work)

    def new(kind, started, *, source="cli", ended=None, end_reason="user_exit", title=None, parent=None,
            delegate_from=None, archived=False, session_key=None):
        sid = sid_at(started, f"{name}:{kind}:{next(counter)}")
        model_config = {"_delegate_from": delegate_from} if delegate_from else None
        db.create_session(sid, source, model="peer/model", model_config=model_config,
                          parent_session_id=parent, session_key=session_key)
        if title:
            db.set_session_title(sid, title)
        if ended is not None:
            db.end_session(sid, end_reason)
        set_times(sid, started, ended)
        if archived:
            db.set_session_archived(sid, True)
        kinds.setdefault(kind, []).append(sid)
        return sid

    def talk(sid, count, first, text="message"):
        for i in range(count):
            db.append_message(sid, "user" if i % 2 == 0 else "assistant", f"{text} {i} of {sid}",
                              timestamp=first + i * 60)

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

    root = new("lineage", now - 150 * DAY, ended=now - 140 * DAY, end_reason="compression", title=f"long project {name}")
    talk(root, 6, now - 150 * DAY)
    mid = new("lineage", now - 140 * DAY, ended=now - 130 * DAY, end_reason="compression", parent=root)
    talk(mid, 4, now - 140 * DAY)
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


def main() -> None:
    spec = json.loads(sys.argv[1])
    root = Path(spec["root"])
    out = {}
    for name in spec["profiles"]:
        home = root if name == "default" else root / "profiles" / name
        home.mkdir(parents=True, exist_ok=True)
        out[name] = build_profile(home, name, float(spec["now"]), spec.get("plugins_enabled", []),
                                  spec.get("sessions", {}), spec.get("orphans", True))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

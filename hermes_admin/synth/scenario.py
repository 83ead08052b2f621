"""A standard population: every kind of row and file the maintenance tasks care about.

`populate` returns the ids by kind, so tests can say what must go and what
must stay. Ages are relative to `now`, which the caller passes in.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from hermes_admin.synth.builder import DAY, SynthStore, session_id_at, write_session_files

HOUR = 3600.0  # seconds, for the ages of synthetic sessions


def populate(store: SynthStore, sessions_dir: Path, now: float, tag: str = "") -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = defaultdict(list)
    counter = iter(range(10_000))

    def new(kind: str, started: float, **fields) -> str:
        sid = session_id_at(started, f"{tag}:{kind}:{next(counter)}")
        store.session(sid, started=started, **fields)
        kinds[kind].append(sid)
        return sid

    # Plain histories of different ages.
    for age in (120, 200):
        sid = new("old_ended", now - age * DAY, ended=now - age * DAY + HOUR, end_reason="user_exit",
                  title=f"old chat {age}d {tag}", system_prompt="You are a careful assistant.")
        store.messages(sid, 6, now - age * DAY)
        store.usage(sid, when=now - age * DAY)
        write_session_files(sessions_dir, sid, mtime=now - age * DAY)
    sid = new("old_archived", now - 100 * DAY, ended=now - 100 * DAY + HOUR, end_reason="user_exit",
              archived=True, source="telegram")
    store.messages(sid, 4, now - 100 * DAY)
    write_session_files(sessions_dir, sid, ("jsonl",), mtime=now - 100 * DAY)
    sid = new("recent", now - 2 * DAY, ended=now - 2 * DAY + HOUR, end_reason="user_exit",
              title=f"recent chat {tag}", system_prompt="You are a careful assistant.")
    store.messages(sid, 8, now - 2 * DAY)
    write_session_files(sessions_dir, sid, ("json", "jsonl", "snapshot"), mtime=now - 2 * DAY)
    for age in (45, 70):
        sid = new("inactive", now - age * DAY, ended=now - age * DAY + HOUR, end_reason="idle",
                  source="discord")
        store.messages(sid, 4, now - age * DAY)
    sid = new("old_open", now - 200 * DAY, source="slack")
    store.messages(sid, 4, now - 200 * DAY)
    # Started long ago, but spoken to yesterday: not old.
    sid = new("revived", now - 200 * DAY, ended=now - 1 * DAY, end_reason="user_exit")
    store.messages(sid, 2, now - 200 * DAY)
    store.messages(sid, 2, now - 1 * DAY, text="again")

    # Empty rows and ghosts.
    new("empty_ended", now - 5 * DAY, ended=now - 5 * DAY + 60, end_reason="user_exit")
    new("empty_open", now - 3 * DAY, source="desktop")
    new("tui_ghost", now - 3 * DAY, source="tui", ended=now - 3 * DAY + 5, end_reason="tui_shutdown")
    new("just_ended_empty", now - 20 * 60, ended=now - 10 * 60, end_reason="user_exit")

    # A compression lineage: old root and middle, recent open tip.
    root = new("lineage", now - 150 * DAY, ended=now - 140 * DAY, end_reason="compression",
               title=f"long project {tag}")
    store.messages(root, 6, now - 150 * DAY)
    mid = new("lineage", now - 140 * DAY, ended=now - 130 * DAY, end_reason="compression", parent=root)
    store.messages(mid, 4, now - 140 * DAY)
    tip = new("lineage", now - 130 * DAY, parent=mid)
    store.messages(tip, 4, now - 1 * DAY)
    write_session_files(sessions_dir, root, ("jsonl",), mtime=now - 140 * DAY)

    # A delegate parent with two delegate children, all old.
    parent = new("delegate_parent", now - 110 * DAY, ended=now - 110 * DAY + HOUR, end_reason="user_exit")
    store.messages(parent, 4, now - 110 * DAY)
    write_session_files(sessions_dir, parent, ("json", "dump"), mtime=now - 110 * DAY)
    for _ in range(2):
        child = new("delegate_child", now - 110 * DAY + 60, source="subagent",
                    ended=now - 110 * DAY + 600, end_reason="done", parent=parent, delegate_from=parent)
        store.messages(child, 2, now - 110 * DAY + 60)
        write_session_files(sessions_dir, child, ("jsonl",), mtime=now - 110 * DAY)

    # Protected: pinned (v30 only has the column) and under a live compression lock.
    if store.v30:
        sid = new("pinned_old", now - 300 * DAY, ended=now - 300 * DAY + HOUR, end_reason="user_exit",
                  pinned=True)
        store.messages(sid, 2, now - 300 * DAY)
        sid = new("heartbeat_recent", now - 150 * DAY, ended=now - 150 * DAY + HOUR, end_reason="idle",
                  last_activity=now - 3 * DAY)
        store.messages(sid, 2, now - 150 * DAY)
    sid = new("locked_old", now - 130 * DAY, ended=now - 130 * DAY + HOUR, end_reason="user_exit")
    store.messages(sid, 2, now - 130 * DAY)
    store.compression_lock(sid, expires=now + 3600)

    # A gateway session of this profile, keyed as Hermes keys them (`main` is default).
    namespace = "main" if store.profile in (None, "default") else store.profile
    sid = new("keyed", now - 4 * DAY, source="telegram", ended=now - 4 * DAY + HOUR, end_reason="idle",
              session_key=f"agent:{namespace}:telegram:dm:7")
    store.messages(sid, 2, now - 4 * DAY)

    # Crash leftovers: message and usage rows of a session row that is gone.
    gone = session_id_at(now - 95 * DAY, f"{tag}:orphan")
    store.orphan_rows(gone, 3, now - 95 * DAY)
    kinds["orphan_rows"].append(gone)

    # Files: a month-old transcript of a session long gone, a fresh one, the
    # gateway index and an unrelated file.
    stale = session_id_at(now - 40 * DAY, f"{tag}:stale-file")
    write_session_files(sessions_dir, stale, ("jsonl", "snapshot"), mtime=now - 30 * DAY)
    kinds["orphan_file_old"].append(stale)
    fresh = session_id_at(now - HOUR, f"{tag}:fresh-file")
    write_session_files(sessions_dir, fresh, ("jsonl",), mtime=now - HOUR)
    kinds["orphan_file_fresh"].append(fresh)
    (sessions_dir / "sessions.json").write_text(json.dumps({"agent:main:cli": {"session_id": tip}}) + "\n")
    os.utime(sessions_dir / "sessions.json", (now - 60 * DAY, now - 60 * DAY))
    (sessions_dir / "notes.txt").write_text("not a session file\n")
    os.utime(sessions_dir / "notes.txt", (now - 60 * DAY, now - 60 * DAY))
    return dict(kinds)


def build_profile_home(home: Path, version: int, profile: str, now: float) -> dict[str, list[str]]:
    """A profile home as Hermes lays it out, with a populated store."""
    for folder in ("sessions", "logs", "memories", "skills", "cron"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    config = home / "config.yaml"
    if not config.exists():
        config.write_text("model:\n  default: synth/model-1\n")
    store = SynthStore(home / "state.db", version=version, profile=profile)
    kinds = populate(store, home / "sessions", now, tag=profile)
    store.close()
    return kinds


def build_root(root: Path, profiles: dict[str, int], now: float) -> dict[str, dict[str, list[str]]]:
    """A root with the given profiles (`name -> schema version`); `default` is the root."""
    made = {}
    for name, version in profiles.items():
        home = root if name == "default" else root / "profiles" / name
        made[name] = build_profile_home(home, version, name, now)
    return made

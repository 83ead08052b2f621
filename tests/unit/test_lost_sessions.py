"""profile/lost_sessions.py: the ids of a damaged store's sessions gathered from every source that
still names them (intact indexes, `sessions/` file names, the outbox's last look of this very
file), less what a store holds; exports say where each can be restored from, never that a session
was in the store. Real SQLite files with pages overwritten (tests/damage.py)."""

from __future__ import annotations

import os
import sqlite3

from hermes_admin.model import Profile
from hermes_admin.profile import lost_sessions
from hermes_admin.profile.engine.noticed import Sessions, pack
from hermes_admin.profile.engine.outbox import Outbox
from hermes_admin.profile.store import damage as store_damage
from tests import damage


def a_profile(tmp_path, sessions=400):
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    path = home / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE sessions (id TEXT PRIMARY KEY, title TEXT);"
                       "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, content TEXT);"
                       "CREATE INDEX idx_messages_session ON messages(session_id);")
    conn.executemany("INSERT INTO sessions VALUES (?, ?)", [(f"s{i:04d}", "t" * 200) for i in range(sessions)])
    conn.executemany("INSERT INTO messages (session_id, content) VALUES (?, ?)",
                     [(f"s{i:04d}", "m" * 300) for i in range(sessions)])
    conn.commit()
    conn.close()
    return Profile(tmp_path, "work", home)


def test_each_source_names_what_it_knows(tmp_path):
    profile = a_profile(tmp_path)
    folder = profile.sessions_dir
    for name in ("s0001.jsonl", "session_s0002.json", "request_dump_file_only_20260101_101010_5.json",
                 "sessions.json", "notes.txt"):
        (folder / name).write_text("{}")
    st = os.stat(profile.store_path)
    outbox = Outbox(profile)
    outbox.remember(1.0, st.st_dev, st.st_ino, pack(Sessions.of([("s0003", None, True, 1.0),
                                                                 ("look_only", None, True, 1.0)])), None, [])
    outbox.close()
    known = lost_sessions.known(profile)
    assert known.by_source["files"] == {"s0001", "s0002", "file_only"}
    assert known.by_source["look"] == {"s0003", "look_only"}
    assert len(known.by_source["index"]) == 400  # the sessions' own index, and the messages' by session
    assert known.sources_of("s0001") == ["index", "files"]
    # what a store holding every readable session keeps: only the ids nothing but a file or the look names
    assert lost_sessions.lost(known, store_damage.readable_session_ids(profile.store_path)) == ["file_only",
                                                                                              "look_only"]


def test_a_look_of_another_file_or_with_our_own_deletes_says_nothing_of_them(tmp_path):
    profile = a_profile(tmp_path, sessions=3)
    outbox = Outbox(profile)
    outbox.remember(1.0, 1, 2, pack(Sessions.of([("elsewhere", None, True, 1.0)])), None, [])  # another inode
    outbox.close()
    assert lost_sessions.known(profile).by_source["look"] == set()
    st = os.stat(profile.store_path)
    outbox = Outbox(profile)
    outbox.remember(1.0, st.st_dev, st.st_ino, pack(Sessions.of([("ours", None, True, 1.0),
                                                                 ("theirs", None, True, 1.0)])), None, [])
    outbox.settle({}, [], gone=["ours"])  # deleted by us since the look
    outbox.close()
    assert lost_sessions.known(profile).by_source["look"] == {"theirs"}


def test_torn_session_pages_leave_their_ids_to_the_indexes(tmp_path):
    profile = a_profile(tmp_path)
    damage.tear(profile.store_path, "sessions", 2)
    damage.tear(profile.store_path, "messages", 2)
    known = lost_sessions.known(profile)
    readable = store_damage.readable_session_ids(profile.store_path)
    lost = lost_sessions.lost(known, readable)
    assert lost and len(known.by_source["index"]) == 400 and len(readable) + len(lost) == 400
    assert lost_sessions.said(profile, lost, {}, would=True).startswith(f"{len(lost)} session(s) would be lost: ")


def ids_read(path, table, column) -> set[str]:
    """The values of `column` in the readable rows of `table` (as the salvage reads them)."""
    conn = store_damage.open_as_it_is(path)
    try:
        at = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')].index(column) + 1
        return {row[at] for row in store_damage.scan_rows(conn, table)}
    finally:
        conn.close()


def test_what_the_report_says_a_rebuild_keeps_is_what_it_keeps(tmp_path):
    """A session whose own row and messages are on torn pages, but whose compression lock (a guard,
    which names its session without a foreign key) still reads, comes back from the rebuild as a
    `recovered` row: the report before it (readable_session_ids) says so too, and never names it
    among the sessions that would be lost."""
    from hermes_admin.profile.store import rebuild

    profile = a_profile(tmp_path)
    path = profile.store_path
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE compression_locks (session_id TEXT PRIMARY KEY, holder TEXT, expires_at REAL)")
    conn.executemany("INSERT INTO compression_locks VALUES (?, 'pid=1', 0)", [(f"s{i:04d}",) for i in range(0, 400, 7)])
    conn.commit()
    conn.close()
    damage.tear(path, "sessions", 2)
    damage.tear(path, "messages", 2)
    known = lost_sessions.known(profile)
    readable = store_damage.readable_session_ids(path)
    guarded_only = {f"s{i:04d}" for i in range(0, 400, 7)} - ids_read(path, "sessions", "id") \
        - ids_read(path, "messages", "session_id")
    assert guarded_only and guarded_only <= readable
    new = tmp_path / "rebuilt.db"
    done = rebuild.build(path, new)
    conn = sqlite3.connect(new)
    try:
        rebuilt = {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()
    assert rebuilt == readable and guarded_only <= set(done.recovered_sessions)
    assert lost_sessions.lost(known, readable) == lost_sessions.lost(known, rebuilt)
    assert not guarded_only & set(lost_sessions.lost(known, readable))

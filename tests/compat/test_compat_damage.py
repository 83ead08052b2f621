"""Issue 45: a damaged store is that profile's problem on every command, named by what is damaged.

Stores written by the real releases (0.19.0 in WAL, 0.22.2 in a rollback journal), with pages of
one kind overwritten (tests/damage.py finds them through SQLite's own page map), cut short, or
replaced by a file that is no database. Every command lists the damaged profile, says in one line
which structure is damaged, exits 2 (never 70) and goes on with the healthy profile beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from tests import damage
from tests.conftest import NOW, store_digest
from tests.helpers import events, home_of, install_plugins

PROFILES = ["default", "work"]
RELEASES = ["0.19.0", "0.20.1", "0.22.2"]


@pytest.fixture(scope="module", params=RELEASES)
def built(request, tmp_path_factory, hermes_peer):
    root = tmp_path_factory.mktemp(f"hermes-{request.param}") / "hermes"
    hermes_peer.build_root(root, PROFILES, NOW, orphans=False, release=request.param, scenario="releases")
    for name in PROFILES:
        damage.settle(home_of(root, name) / "state.db")
    return request.param, root


def copy_of(built, folder):
    shutil.copytree(built[1], folder, symlinks=True)
    return folder


DAMAGES = {
    "table": (lambda db: damage.tear(db, "sessions"), "table sessions"),
    "messages": (lambda db: damage.tear(db, "messages", 2), "table messages"),
    "index": (lambda db: damage.tear(db, "idx_messages_session"), "index idx_messages_session"),
    "fts": (lambda db: damage.tear(db, "messages_fts_data"), "full-text index messages_fts"),
    "cut": (lambda db: damage.cut_short(db), "file length"),
    "migration": (lambda db: damage.half_migrate(db), "schema migration session_model_usage_legacy_pk"),
    "version": (lambda db: damage.belie_version(db), "schema migration schema_version (says "),
}

VIEWS = [("profiles",), ("status",), ("usage",), ("sessions", "list"), ("exports", "list"), ("config", "show"),
         ("repair",), ("run", "--dry-run"), ("run",)]


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_every_command_names_the_damage_and_goes_on(built, tmp_path, invoke, kind):
    root = copy_of(built, tmp_path / "hermes")
    hurt, said = DAMAGES[kind]
    work = home_of(root, "work") / "state.db"
    hurt(work)
    before = store_digest(root)
    # `run` first when the view's own reads need not meet the damage: the last check is what they say then
    for args in [("run",), *VIEWS]:
        done = invoke("--root", str(root), *args, "--json")
        doc = json.loads(done.stdout)
        assert done.exit_code == 2, (args, done.exit_code, done.stdout[-2000:])
        errors = doc.get("errors", [])
        lines = [e for e in errors if "'work'" in e] + [p.get("error") or "" for p in doc.get("profiles", [])]
        assert any(said in line and str(work) in line for line in lines), (args, errors)
        assert not any("internal error" in e for e in errors), (args, errors)
        assert not any("'default'" in e for e in errors), (args, errors)
    listed = json.loads(invoke("--root", str(root), "profiles", "--json").stdout)["profiles"]
    assert {p["name"]: p["ok"] for p in listed} == {"default": True, "work": False}
    assert json.loads(invoke("--root", str(root), "sessions", "list", "-p", "default", "--json").stdout)["sessions"]
    assert store_digest(root)[str(work)] == before[str(work)]  # reports and dry runs write nothing to it


def test_repair_counts_what_can_still_be_read(built, tmp_path, invoke):
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    counts_before = counts(work)
    damage.tear(work, "messages", 1)
    doc = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    (finding,) = [f for f in doc["findings"] if f["profile"] == "work"]
    assert finding["kind"] == "damaged_store"
    assert "table messages (1 page unreadable)" in finding["detail"] and "rows still readable: sessions" in finding["detail"]
    readable = int(finding["detail"].split(", messages ")[1].split(" of ")[0])
    assert f"messages {readable} of {counts_before[1]}" in finding["detail"] and readable < counts_before[1]
    assert "`hermes-admin repair --apply -p work` rebuilds it from the readable rows" in finding["detail"]


def test_not_a_database_gets_a_next_step_and_keeps_its_mode(built, tmp_path, invoke):
    """Issue 48, A7: no chmod of what repair says it leaves untouched; a next step."""
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    work.write_bytes(b"this is no database" * 300)
    os.chmod(work, 0o644)
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code == 2
    errors = json.loads(done.stdout)["errors"]
    (line,) = [e for e in errors if str(work) in e]
    assert "not a database" in line and "backup" in line and "left untouched" in line
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o644


# -- repair --apply rebuilds ---------------------------------------------------------------------

@pytest.fixture
def nobody_holds(monkeypatch):
    """The rebuild's own look for holders told that nobody holds the store: on a host whose holder
    scan cannot see every process (it answers "unknown") `run`'s careful rebuild would wait. The
    torn-index test and the holder's own test below use the real scan."""
    from hermes_admin.profile import repair

    monkeypatch.setattr(repair, "held_by_path", lambda path, wal, on_word=False: None)


def counts(db) -> tuple[int, int]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sessions", "messages"))
    finally:
        conn.close()


def kept_copies(home) -> list:
    return sorted(p.name for p in home.iterdir() if ".damaged-" in p.name and not p.name.endswith(("-wal", "-journal")))


@pytest.mark.parametrize("kind", ["index", "fts"])
def test_a_torn_index_is_rebuilt_in_place_losing_nothing(built, tmp_path, invoke, kind):
    """With the real holder scan: `repair --apply` is the operator's word, so on a host where a process
    cannot be looked into (a sandbox's init) it still rebuilds a store nobody is seen holding."""
    from tests.compat import checks

    release = built[0]
    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    whole = counts(work)
    DAMAGES[kind][0](work)
    damaged, inode = work.read_bytes(), os.stat(work).st_ino
    assert invoke("--root", str(root), "run", "--json").exit_code == 2  # recorded: every view says it
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    assert counts(work) == whole and os.stat(work).st_ino == inode
    assert checks.store_problems(home, release) == []
    (kept,) = kept_copies(home)
    assert (home / kept).read_bytes() == damaged
    shown = invoke("--root", str(root), "profiles", "--json")
    assert shown.exit_code in (0, 1) and all(p["ok"] for p in json.loads(shown.stdout)["profiles"])
    listed = json.loads(invoke("--root", str(root), "usage", "-p", "work", "--json").stdout)["profiles"]
    assert listed[0]["files"]["damaged_copies"] >= len(damaged)  # listed by usage; the operator's to remove
    again = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert [f for f in json.loads(again.stdout)["findings"] if f["profile"] == "work"] == []
    assert kept_copies(home) == [kept]


def test_torn_table_pages_are_salvaged_into_the_same_file(built, tmp_path, invoke, nobody_holds):
    from tests.compat import checks

    release = built[0]
    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    whole = counts(work)
    install_plugins(home, ["recorder"], enabled=["recorder"])
    damage.tear(work, "sessions")
    damage.tear(work, "messages", 2)
    report = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    (finding,) = [f for f in report["findings"] if f["profile"] == "work"]
    assert "session(s) would be lost: " in finding["detail"] and finding["fix"] != "none"
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    said = " ".join(r for result in json.loads(done.stdout)["results"] for r in result.get("notes", []))
    assert "message(s) back" in said and "session(s) lost" in said
    sessions, messages = counts(work)
    assert 0 < messages < whole[1]
    # every session the index still named and that did not come back: announced once, reason profile_repair
    lost = said.split("session(s) lost: ")[1].split(";")[0].split(", ")
    announced = [(e["session_id"], e["reason"]) for e in events(home)]
    assert sorted(announced) == sorted((sid, "profile_repair") for sid in lost) and lost
    assert checks.store_problems(home, release) == []
    assert counts(home_of(root, "default") / "state.db") == whole  # the healthy profile beside it


def test_run_with_repair_apply_rebuilds_only_what_loses_nothing(built, tmp_path, invoke, nobody_holds):
    from tests.compat import checks

    root = copy_of(built, tmp_path / "hermes")
    config = tmp_path / "admin.yaml"
    config.write_text("defaults:\n  repair: apply\n")
    work = home_of(root, "work") / "state.db"
    damage.tear(work, "sessions")
    before = work.read_bytes()
    done = invoke("--config", str(config), "--root", str(root), "run", "--json")
    assert done.exit_code == 2 and work.read_bytes() == before  # rows would be lost: left for the operator
    fresh = copy_of(built, tmp_path / "again")
    work = home_of(fresh, "work") / "state.db"
    whole = counts(work)
    damage.tear(work, "idx_messages_session")
    done = invoke("--config", str(config), "--root", str(fresh), "run", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    said = " ".join(n for result in json.loads(done.stdout)["results"] for n in result.get("notes", []))
    assert f"{whole[0]} session(s) and {whole[1]} message(s) back" in said  # then the run's tasks went on
    assert checks.sqlite_problems(work) == []


CRASH = r"""
import os, sys
from pathlib import Path
from hermes_admin.model import Profile
import functools
from hermes_admin.profile import repair
from hermes_admin.profile.store import rebuild
repair.held_by_path = lambda path, wal, on_word=False: None
rebuild.put_in_place = functools.partial(rebuild.put_in_place, pages=8)  # several steps, even for a small store
root, home = Path(sys.argv[1]), Path(sys.argv[2])
seen = []
def step(where):
    seen.append(where)
    if seen.count("backup") == 2:  # part of the new store written into the file: then the process dies
        os._exit(9)
repair._rebuild_store(Profile(root, "work", home), step=step)
"""


def test_a_crash_in_the_middle_leaves_the_store_as_it_was(built, tmp_path, monkeypatch):
    import sqlite3
    import subprocess
    import sys

    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    damage.tear(work, "messages", 2)
    damaged = work.read_bytes()
    env = dict(os.environ, PYTHONPATH=str(damage.Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, "-c", CRASH, str(root), str(home)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 9, done.stderr[-3000:]
    conn = sqlite3.connect(work)  # the next opener rolls back what the dead process left in the journal
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    conn.close()
    assert work.read_bytes() == damaged
    # and the next repair, as nothing happened: what the dead one left of its new file is cleared
    from hermes_admin.model import Profile
    from hermes_admin.profile import repair

    monkeypatch.setattr(repair, "held_by_path", lambda path, wal, on_word=False: None)
    repair._rebuild_store(Profile(root, "work", home))
    assert not [p for p in home.iterdir() if ".rebuild-" in p.name]
    assert len(kept_copies(home)) == 1


HOLD = "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1]); print('ready', flush=True); time.sleep(120)"


def test_a_holder_or_a_full_disk_stops_the_rebuild_before_anything_is_written(built, tmp_path, invoke, monkeypatch):
    """A process with the store open (another program's connection, in a process of its own)."""
    import subprocess
    import sys

    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    damage.tear(work, "idx_messages_session")
    before = work.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(work)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    finally:
        holder.kill()
        holder.wait()
    assert "only while no other process holds it" in " ".join(json.loads(done.stdout)["warnings"]), done.stdout[-3000:]
    assert work.read_bytes() == before and kept_copies(home) == []

    from hermes_admin.profile import repair
    from hermes_admin.profile.store import rebuild

    monkeypatch.setattr(repair, "held_by_path", lambda path, wal, on_word=False: None)
    real = os.statvfs
    monkeypatch.setattr(rebuild.os, "statvfs", lambda p: os.statvfs_result((4096, 4096, 100, 1, 1, 100, 1, 1, 0, 255))
                        if str(p) == str(home) else real(p))
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert "bytes free" in " ".join(json.loads(done.stdout)["warnings"])
    assert work.read_bytes() == before and kept_copies(home) == []


def test_at_least_what_hermes_own_recover_salvages(built, tmp_path, invoke, nobody_holds, hermes_peer):
    """Hermes 0.22.2's `hermes sessions recover --allow-partial` on the same damaged file (into a new
    file it says not to install): the rebuild brings back at least its sessions and messages."""
    import sqlite3

    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    damage.tear(work, "sessions")
    damage.tear(work, "messages", 2)
    theirs = tmp_path / "recovered.db"
    hermes_peer.hermes(home, "sessions", "recover", "--source", str(work), "--output", str(theirs), "--allow-partial",
                       release="0.22.2", timeout=300)
    conn = sqlite3.connect(f"file:{theirs}?mode=ro", uri=True)
    got = tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("sessions", "messages"))
    conn.close()
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    ours = counts(work)
    assert ours[0] >= got[0] and ours[1] >= got[1], (ours, got)


def test_a_migration_cut_short_is_finished_losing_nothing(built, tmp_path, invoke, nobody_holds):
    import sqlite3

    from tests.compat import checks

    release = built[0]
    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    stranded = damage.half_migrate(work)
    assert stranded > 0
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    conn = sqlite3.connect(f"file:{work}?mode=ro", uri=True)
    assert conn.execute("SELECT count(*) FROM session_model_usage").fetchone()[0] == stranded
    conn.close()
    assert checks.store_problems(home, release) == []
    assert kept_copies(home) == []  # nothing was damaged: no copy kept


# -- sessions a rebuild cannot bring back --------------------------------------------------------

LONE = ("SELECT s.id FROM sessions s WHERE s.ended_at IS NOT NULL AND s.parent_session_id IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id) "
        "AND (SELECT count(*) FROM messages m WHERE m.session_id = s.id) BETWEEN 1 AND 6 ORDER BY s.id")


def lone_unguarded(db) -> str:
    """The first of the LONE sessions no guard names (a compression lock, a turn lease: a rebuild
    makes a session row again for a readable one, so its session is not lost), by id: the same
    session every run."""
    from hermes_admin.profile.store import damage as store_damage
    from tests.helpers import row_ids

    guarded: set[str] = set()
    for table, column in store_damage.GUARDS:
        if row_ids(db, f"SELECT name FROM sqlite_master WHERE type = 'table' AND name = '{table}'"):
            guarded |= row_ids(db, f'SELECT "{column}" FROM "{table}"')
    return min(row_ids(db, LONE) - guarded)


def rightmost_leaf(db, table):
    """The leaf holding a table's highest rowids (dbstat's paths order its pages as the tree does)
    that still reads; None when none is left."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY path DESC LIMIT 1",
                           [table]).fetchone()
    finally:
        conn.close()
    return row and row[0]


def still_reads(db, table, sid) -> bool:
    """Does a readable row of `table` still name the session (as our salvage reads it)?"""
    import apsw

    from hermes_admin.profile.store import damage as store_damage

    conn = apsw.Connection(f"file:{db}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    try:
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        at = columns.index("id" if table == "sessions" else "session_id") + 1
        return any(row[at] == sid for row in store_damage.scan_rows(conn, table))
    finally:
        conn.close()


def test_a_lost_session_with_an_export_is_named_with_its_restore_and_comes_back(built, tmp_path, invoke,
                                                                                nobody_holds):
    """A session deleted (so exported) and put back, then lost with the pages of its rows: repair
    names it with the command that restores it from that export, the rebuild announces it once
    (`profile_repair`), and that command brings it back into the rebuilt store."""
    from tests.compat import checks
    from tests.helpers import row_ids

    release = built[0]
    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    install_plugins(home, ["recorder"], enabled=["recorder"])
    sid = lone_unguarded(work)
    assert invoke("--root", str(root), "sessions", "delete", sid, "-p", "work", "--yes", "--json").exit_code in (0, 1)
    (export,) = [e for e in json.loads(invoke("--root", str(root), "exports", "list", "-p", "work", "--json").stdout)
                 ["exports"]]
    back = invoke("--root", str(root), "restore", export["id"], "-p", "work", "--yes", "--json")
    assert back.exit_code in (0, 1) and sid in row_ids(work), back.stdout[-2000:]
    # put back last, its rows have the highest rowids: the rightmost leaves are torn until none reads
    for table in ("sessions", "messages", "session_model_usage"):
        for _ in range(6):
            damage.settle(work)
            if not still_reads(work, table, sid):
                break
            damage.overwrite(work, rightmost_leaf(work, table))
        assert not still_reads(work, table, sid), table
    restore = f"`hermes-admin restore {export['id']} --session {sid} -p work`"
    report = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    (finding,) = [f for f in report["findings"] if f["profile"] == "work"]
    assert "session(s) would be lost: " in finding["detail"] and sid in finding["detail"], finding["detail"]
    assert restore in finding["detail"], finding["detail"]
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    said = " ".join(r for result in json.loads(done.stdout)["results"] for r in result.get("notes", []))
    assert sid in said.split("session(s) lost: ")[1].split(";")[0].split(", ") and restore in said, said
    # the rebuild loses the very sessions the report said it would (those a guard or a readable
    # message keeps as a `recovered` row neither time)
    would = finding["detail"].split(" session(s) would be lost: ")
    assert would[0].rsplit("; ", 1)[1] + " session(s) lost: " + would[1].split(";")[0] in said, (finding["detail"], said)
    assert [e["reason"] for e in events(home) if e["session_id"] == sid and e["reason"] == "profile_repair"] \
        == ["profile_repair"]
    assert sid not in row_ids(work)
    again = invoke("--root", str(root), "restore", export["id"], "--session", sid, "-p", "work", "--yes", "--json")
    assert again.exit_code in (0, 1), again.stdout[-3000:]
    assert sid in row_ids(work)
    assert checks.store_problems(home, release) == []
    # the next run's look at the store announces nothing of it again
    before = len(events(home))
    assert invoke("--root", str(root), "run", "--json").exit_code in (0, 1)
    assert not [e for e in events(home)[before:] if e["session_id"] == sid]


def test_sessions_show_says_the_damage_once(built, tmp_path, invoke):
    """`sessions show` of an id no store holds looks in the stores, then in the exports: both jobs
    meet the damaged profile, the line is said once."""
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    damage.tear(work, "sessions")
    invoke("--root", str(root), "run")  # recorded: the views that read no damaged page say it too
    done = invoke("--root", str(root), "sessions", "show", "nosuch")
    assert done.exit_code == 2 and done.stderr.count(str(work)) == 1, done.stderr
    doc = json.loads(invoke("--root", str(root), "sessions", "show", "nosuch", "--json").stdout)
    assert [str(work) in e for e in doc["errors"]].count(True) == 1, doc["errors"]


NEXT = {"0.19.0": "0.20.1", "0.20.1": "0.22.2", "0.22.2": "0.22.2"}  # the release that opens it next


def test_a_version_row_the_tables_belie_is_set_back_losing_nothing(built, tmp_path, invoke, nobody_holds):
    """A `schema_version` that says more than the tables hold is named in one line; `repair --apply`
    sets it back to the version the tables hold (only that row changes), and the release that opens
    the store next migrates it from there: its own reads and writes pass."""
    from tests.compat import checks

    release = built[0]
    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    whole = counts(work)
    said, held = damage.belie_version(work)
    report = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    (finding,) = [f for f in report["findings"] if f["profile"] == "work"]
    assert f"schema migration schema_version (says {said}, but the store holds the tables of {held}: " \
        in finding["detail"], finding["detail"]
    assert "finishes it, losing nothing" in finding["detail"] and "\n" not in finding["detail"]
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    notes = " ".join(n for result in json.loads(done.stdout)["results"] for n in result.get("notes", []))
    assert f"schema_version set back from {said} to {held}" in notes, notes
    import sqlite3

    conn = sqlite3.connect(f"file:{work}?mode=ro", uri=True)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(held,)]
    conn.close()
    assert counts(work) == whole and kept_copies(home) == []  # nothing was damaged: no copy kept
    assert checks.store_problems(home, NEXT[release]) == []
    shown = invoke("--root", str(root), "profiles", "--json")
    assert shown.exit_code in (0, 1) and all(p["ok"] for p in json.loads(shown.stdout)["profiles"])


def test_sessions_whose_every_row_and_index_is_lost_are_known_from_their_files_and_the_last_look(
        built, tmp_path, invoke, nobody_holds):
    """The roots of `sessions`, `messages` and their indexes of session ids torn: no page of the
    store names a session any more. The last look (a run with a listening plugin took it) and the
    files in `sessions/` still do: each such session the rebuilt store lacks is announced once."""
    from hermes_admin.profile.store.files import session_id_of
    from tests.helpers import row_ids

    root = copy_of(built, tmp_path / "hermes")
    home = home_of(root, "work")
    work = home / "state.db"
    install_plugins(home, ["recorder"], enabled=["recorder"])
    assert invoke("--root", str(root), "run", "--dry-run", "--json").exit_code in (0, 1)
    assert invoke("--root", str(root), "run", "--json").exit_code in (0, 1)  # its look at the store is kept
    held = row_ids(work)
    files = {session_id_of(p.name) for p in (home / "sessions").iterdir()} - {None}
    assert files, "the release wrote no session file"
    for name in ("sessions", "messages"):
        damage.tear(work, name, leaves=False)
    import sqlite3

    conn = sqlite3.connect(f"file:{work}?mode=ro", uri=True)
    indexes = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN "
                                          "('sessions', 'messages', 'session_model_usage')")]
    conn.close()
    for name in indexes:
        damage.tear(work, name, leaves=False)
    from hermes_admin.model import Profile
    from hermes_admin.profile import lost_sessions

    known = lost_sessions.known(Profile(root, "work", home)).by_source
    assert known["look"] == held and known["files"] == files and not held <= known["index"], known["index"]
    before = len(events(home))
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code in (0, 1), done.stdout[-3000:]
    announced = [e["session_id"] for e in events(home)[before:] if e["reason"] == "profile_repair"]
    kept = row_ids(work)
    assert sorted(announced) == sorted((held | files) - kept) and len(announced) > len(files - held)
    again = len(events(home))
    assert invoke("--root", str(root), "run", "--json").exit_code in (0, 1)
    assert not [e for e in events(home)[again:] if e["session_id"] in announced]  # the next look says none again

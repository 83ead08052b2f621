"""`hermes-admin compact`, and what `run` says when it leaves a VACUUM for it.

The host in question: one process the scan cannot look into (a sandbox's init whose descriptors
root may not stat, another user's process, `hidepid`). There `run` stays careful (no VACUUM on a
store in a rollback journal, where an idle connection holds no lock) but names the real reason;
`compact --yes` is the operator's word and gives the free pages back, in WAL and in a rollback
journal. A process seen holding the store stops compact unless --force.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from hermes_admin import holders as holders_module
from hermes_admin.profile.engine import space
from tests.helpers import HOST_PIDS, vacuum_worthy_store
from tests.unit.test_reclaim import _holding, pragma

JOURNALS = ["wal", "delete"]


def _unreadable_pid_1() -> bool:
    """This host's own case: root may not stat pid 1's descriptors."""
    try:
        for fd in os.listdir("/proc/1/fd"):
            os.stat(f"/proc/1/fd/{fd}")
        return False
    except PermissionError:
        return True
    except OSError:
        return False


REAL = _unreadable_pid_1()


@pytest.fixture(params=["injected", "real"])
def unseen_pid_1(request, monkeypatch):
    """A host where pid 1 cannot be looked into: injected (every fd of pid 1 refused, EACCES), or
    this machine's own, where it is so (skipped elsewhere)."""
    if request.param == "real":
        if not REAL:
            pytest.skip("pid 1's descriptors can be looked into on this host")
        return
    stat = os.stat

    def refused(name, *args, **kwargs):
        if str(name).startswith("/proc/1/fd/"):
            raise PermissionError(13, "Permission denied", name)
        return stat(name, *args, **kwargs)

    monkeypatch.setattr(holders_module.os, "stat", refused)


def old_store(path, now, journal: str, sessions: int = 300):
    return vacuum_worthy_store(path, now, sessions, journal)


def free_bytes(db) -> int:
    return pragma(db, "freelist_count") * pragma(db, "page_size")


def intact(db) -> None:
    check = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        check.close()


@pytest.mark.parametrize("journal", JOURNALS)
def test_on_a_host_where_a_process_cannot_be_looked_into_compact_gives_the_free_pages_back(
        tmp_path, now, invoke, unseen_pid_1, journal):
    root = tmp_path / "h"
    db = old_store(root / "state.db", now, journal)
    purged = json.loads(invoke("--root", str(root), "purge", "--vacuum", "--json").stdout)
    result = purged["results"][0]
    assert result["rows"] == 300
    if journal == "delete" or not HOST_PIDS:  # careful: an idle connection of a process unseen holds no lock
        assert result["vacuumed"] is False
        (note,) = [n for n in result["notes"] if n.startswith("no VACUUM")]
        assert "pid 1" in note and "EACCES on /proc/1/fd" in note  # which process, and why it was not seen
        assert "/proc/locks: no lock on the store's files" in note and "write lock could be taken now" in note
        assert "hermes-admin compact" in note
    else:  # WAL: a process unseen would show in /proc/locks; none does
        assert result["vacuumed"] is True
        return
    free = free_bytes(db)
    assert free > 0 and pragma(db, "auto_vacuum") == 0
    size = os.stat(db).st_size

    dry = invoke("--root", str(root), "compact", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    (row,) = json.loads(dry.stdout)["compacted"]
    assert row["given_back_bytes"] == free and row["journal_mode"] == journal  # the one figure
    assert os.stat(db).st_size == size and free_bytes(db) == free  # a dry run changes nothing

    done = invoke("--root", str(root), "compact", "--yes")
    assert done.exit_code == 0, done.stderr
    assert "given back (full vacuum" in done.stdout and "taken on your word as not Hermes: pid 1" in done.stdout
    assert free_bytes(db) == 0 and os.stat(db).st_size < size - 0.9 * free
    assert pragma(db, "auto_vacuum") == 2 and pragma(db, "journal_mode") == journal  # switched; mode kept
    intact(db)


@pytest.mark.parametrize("journal", JOURNALS)
def test_a_process_seen_holding_the_store_stops_compact_unless_forced(tmp_path, now, invoke, journal):
    root = tmp_path / "h"
    db = old_store(root / "state.db", now, journal, sessions=100)
    conn = sqlite3.connect(db, isolation_level=None)  # what Hermes' own prune leaves: free pages
    conn.execute("DELETE FROM messages")
    conn.close()
    free = free_bytes(db)
    holder = _holding(db)
    try:
        assert holder.stdout.readline().strip() == "open"
        held = invoke("--root", str(root), "compact", "--yes", "--json")
        doc = json.loads(held.stdout)
        assert held.exit_code == 1  # a warning: not compacted, and who holds it
        (row,) = doc["compacted"]
        assert f"pid {holder.pid}" in row["refused"] and row["given_back_bytes"] == 0
        assert any(p["kind"] == "store_held" and "--force" in p["message"] for p in doc["problems"])
        assert free_bytes(db) == free
        forced = invoke("--root", str(root), "compact", "--yes", "--force", "--json")
        assert forced.exit_code == 0, forced.stderr
        assert json.loads(forced.stdout)["compacted"][0]["given_back_bytes"] > 0
        assert free_bytes(db) == 0 and pragma(db, "journal_mode") == journal
    finally:
        holder.communicate("\n", timeout=10)
    intact(db)


@pytest.mark.parametrize("journal", JOURNALS)
def test_a_store_in_incremental_reclaim_is_compacted_in_short_steps_under_a_holder(tmp_path, now, invoke,
                                                                                   monkeypatch, journal):
    """Switched once, a store gives its pages back while Hermes holds it: incremental vacuum in small
    page counts, each its own short transaction (the write lock let go between them)."""
    root = tmp_path / "h"
    db = old_store(root / "state.db", now, journal, sessions=100)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM messages WHERE session_id < 's010'")
    assert invoke("--root", str(root), "compact", "--yes").exit_code == 0  # nobody holds it: the switch
    assert pragma(db, "auto_vacuum") == 2
    conn.execute("DELETE FROM messages")
    conn.close()
    free = free_bytes(db)
    monkeypatch.setattr(space, "RECLAIM_FIRST_PAGES", 16)
    holder = _holding(db)
    try:
        assert holder.stdout.readline().strip() == "open"
        done = invoke("--root", str(root), "compact", "--yes", "--json")
        assert done.exit_code == 0, done.stderr
        doc = json.loads(done.stdout)
        (row,) = doc["compacted"]
        assert row["how"] == "incremental vacuum" and row["given_back_bytes"] == free and row["refused"] is None
        assert doc["results"][0]["transactions"] > 1  # in steps, not one long hold
        assert free_bytes(db) == 0 and pragma(db, "journal_mode") == journal
    finally:
        holder.communicate("\n", timeout=10)
    intact(db)


def test_nothing_to_give_back_says_so(tmp_path, now, invoke):
    root = tmp_path / "h"
    old_store(root / "state.db", now, "wal", sessions=5)
    invoke("--root", str(root), "compact", "--yes")  # the page or two the writer left
    done = invoke("--root", str(root), "compact", "--yes")
    assert done.exit_code == 0 and "no free pages: nothing to give back" in done.stdout


def test_the_reason_names_what_could_not_be_looked_into():
    """The clause run's note and compact's refusal are made of, from a scan's parts."""
    found = holders_module.Look(None, unseen=[holders_module.Unseen(1, "EACCES on /proc/1/fd/0", "init"),
                                              holders_module.Unseen(None, "/proc lists no pid 1: mounted with hidepid")],
                                locking=set())
    said = space.holding(found, "/nonexistent/state.db", lambda: True)
    assert said.startswith("not known to be free (")
    assert "pid 1 (init): EACCES on /proc/1/fd/0" in said and "hidepid" in said
    assert "/proc/locks: no lock on the store's files" in said and "its write lock could be taken now" in said
    held = space.holding(holders_module.Look([4242], seen=[4242]), "/nonexistent/state.db")
    assert held == "held by pid 4242" or held.startswith("held by pid 4242 (")


@pytest.mark.parametrize("journal", JOURNALS)
def test_the_store_s_own_lock_says_whether_a_writer_has_it(tmp_path, now, journal):
    """SQLite's answer, through our write connection: free, then taken by another connection's
    write transaction (let go at once: nothing of ours is left holding it)."""
    from hermes_admin.profile.store import pragmas
    from hermes_admin.profile.store.connect import open_readwrite

    db = old_store(tmp_path / "state.db", now, journal, sessions=2)
    ours = open_readwrite(db, lock_wait_s=0)
    other = sqlite3.connect(db, isolation_level=None, timeout=0)
    try:
        assert pragmas.lock_free(ours) is True
        other.execute("BEGIN IMMEDIATE")
        assert pragmas.lock_free(ours) is False
        other.execute("ROLLBACK")
        assert pragmas.lock_free(ours) is True
        other.execute("BEGIN IMMEDIATE")  # ours let go: another writer gets it at once
        other.execute("ROLLBACK")
    finally:
        other.close()
        ours.close()


@pytest.mark.skipif(not HOST_PIDS, reason="a pid namespace of its own: nobody can be seen not to hold it")
def test_purge_vacuum_with_nothing_to_purge_still_vacuums(tmp_path, now, invoke):
    """The free pages of Hermes' own deletes: `purge --vacuum` asks for the VACUUM whatever it purged."""
    root = tmp_path / "h"
    db = old_store(root / "state.db", now, "wal", sessions=100)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM messages")
    conn.close()
    done = json.loads(invoke("--root", str(root), "purge", "--vacuum", "--older-than", "365",
                             "--json").stdout)["results"][0]
    assert done["rows"] == 0 and done["vacuumed"] is True and free_bytes(db) == 0

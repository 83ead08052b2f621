"""Disk back while Hermes runs: a store that one VACUUM of ours (while nobody held it) switched to
incremental auto-vacuum gives the pages a later purge frees back to the file system, in short steps,
while another process holds it open."""

from __future__ import annotations

import json

import pytest
import os
import sqlite3
import subprocess
import sys

from tests.helpers import needs_host_pids, vacuum_worthy_store
from hermes_admin.synth.builder import SynthStore

def _holding(db) -> subprocess.Popen:
    """Another process with the store open (a connection that has read it), until its stdin closes."""
    return subprocess.Popen([sys.executable, "-c", "import sqlite3, sys\n"
                             f"c = sqlite3.connect({str(db)!r}); c.execute('SELECT COUNT(*) FROM sessions').fetchone()\n"
                             "print('open', flush=True); sys.stdin.readline()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)



def pragma(db, name):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def more_old_sessions(db, now, count=300):
    """What a gateway adds over months (plain SQL into the store, as Hermes' triggers index it)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN")
    for i in range(count):
        sid = f"later{i:03d}"
        conn.execute("INSERT INTO sessions (id, source, started_at, ended_at, end_reason, message_count) "
                     "VALUES (?, 'cron', ?, ?, 'x', 10)", (sid, now - 150 * 86400, now - 149 * 86400))
        for m in range(10):
            conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                         (sid, "padding " * 50 + str(m), now - 150 * 86400 + m))
    conn.execute("COMMIT")
    conn.close()


@needs_host_pids
def test_a_purge_under_a_live_holder_gives_the_freed_pages_back(tmp_path, now, invoke):
    root = tmp_path / "h"
    db = vacuum_worthy_store(root / "state.db", now, sessions=50)
    first = invoke("--root", str(root), "purge", "--vacuum", "--json")  # nobody holds it: the VACUUM switches it
    doc = json.loads(first.stdout)
    assert doc["results"][0]["vacuumed"] is True
    assert pragma(db, "auto_vacuum") == 2 and pragma(db, "journal_mode") == "wal"
    more_old_sessions(db, now)
    holder = _holding(db)
    try:
        assert holder.stdout.readline().strip() == "open"
        before = os.stat(db).st_size
        used_before = (pragma(db, "page_count") - pragma(db, "freelist_count")) * pragma(db, "page_size")
        second = invoke("--root", str(root), "purge", "--vacuum", "--json")
        result = json.loads(second.stdout)["results"][0]
        assert second.exit_code == 0, second.stderr
        assert result["rows"] == 300 and result["vacuumed"] is False  # held: no VACUUM...
        assert any("no VACUUM: the store is held" in n for n in result["notes"])
        assert any("given back to the file system" in n for n in result["notes"])  # ...but the pages go back
        assert pragma(db, "freelist_count") == 0
        page_size, pages = pragma(db, "page_size"), pragma(db, "page_count")
        assert os.stat(db).st_size == pages * page_size  # the file itself shrank to what is used
        freed = used_before - pages * page_size  # what the purge's deletes freed
        assert freed > 0 and before - os.stat(db).st_size >= 0.9 * freed
    finally:
        holder.communicate("\n", timeout=10)
    assert pragma(db, "journal_mode") == "wal"
    check = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()


@needs_host_pids
def test_the_last_reclaim_steps_cut_the_wal_back_under_a_live_holder(tmp_path, now, invoke, monkeypatch):
    """The WAL a purge filled stays its size while another process holds the store; the last
    incremental-vacuum steps start it over and cut it back to our limit (small here, 64 KiB)."""
    from hermes_admin.profile.engine import space
    from hermes_admin.profile.store import connect

    for module in (space, connect):
        monkeypatch.setattr(module, "WAL_SIZE_LIMIT", 64 << 10)
    root = tmp_path / "h"
    db = vacuum_worthy_store(root / "state.db", now, sessions=50)
    invoke("--root", str(root), "purge", "--vacuum", "--json")  # nobody holds it: switched to incremental
    more_old_sessions(db, now)
    holder = _holding(db)
    wal = tmp_path / "h" / "state.db-wal"
    try:
        assert holder.stdout.readline().strip() == "open"
        done = invoke("--root", str(root), "purge", "--json")
        assert done.exit_code == 0, done.stderr
        assert any("given back to the file system" in n for n in json.loads(done.stdout)["results"][0]["notes"])
        assert wal.exists() and wal.stat().st_size <= 128 << 10  # cut back, never removed
    finally:
        holder.communicate("\n", timeout=10)
    check = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()


def test_incremental_vacuum_false_keeps_the_stores_mode(tmp_path, now, invoke):
    root = tmp_path / "h"
    db = vacuum_worthy_store(root / "state.db", now, sessions=50)
    (root / "admin.yaml").write_text("defaults: {incremental_vacuum: false}\n")
    done = invoke("--root", str(root), "--config", str(root / "admin.yaml"), "purge", "--vacuum", "--json")
    assert done.exit_code == 0, done.stderr
    assert pragma(db, "auto_vacuum") == 0


@needs_host_pids
def test_free_pages_under_a_holder_that_never_lets_go_are_named_and_the_free_moment_taken(tmp_path, now, invoke):
    """A gateway holds the store through the purge: the switching VACUUM waits, and the run, `usage`
    and the JSON say how much waits and for whom; the first run that finds the store free (nothing
    left to purge) takes the moment. The journal mode stays what Hermes chose."""
    root = tmp_path / "h"
    db = vacuum_worthy_store(root / "state.db", now, sessions=1200)
    holder = _holding(db)
    try:
        assert holder.stdout.readline().strip() == "open"
        held = invoke("--root", str(root), "purge", "--json")
        doc = json.loads(held.stdout)
        assert held.exit_code == 0, held.stderr
        (wait,) = doc["reclaim_waits"]
        assert doc["results"][0]["vacuumed"] is False and wait["bytes"] >= 4 << 20
        assert f"pid {holder.pid}" in wait["held_by"] and pragma(db, "auto_vacuum") == 0
        usage = json.loads(invoke("--root", str(root), "usage", "--json").stdout)["profiles"][0]
        assert usage["reclaimable_bytes"] >= 4 << 20 and f"pid {holder.pid}" in usage["reclaim_waits_for"]
        (profile,) = json.loads(invoke("--root", str(root), "profiles", "--json").stdout)["profiles"]
        assert profile["auto_vacuum"] == "none" and "one VACUUM while nobody else holds" in profile["reclaim_waits_for"]
        human = invoke("--root", str(root), "purge")
        dry = json.loads(invoke("--root", str(root), "purge", "--dry-run", "--json").stdout)["results"][0]
        assert any(n.startswith("would VACUUM once nobody else holds the store") for n in dry["notes"])
        assert "of free pages wait for one VACUUM while nobody else holds the store" in human.stdout
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    freed = json.loads(invoke("--root", str(root), "purge", "--json").stdout)
    assert freed["results"][0]["rows"] == 0 and freed["results"][0]["vacuumed"] is True and not freed["reclaim_waits"]
    assert pragma(db, "auto_vacuum") == 2 and pragma(db, "journal_mode") == "wal"
    usage = json.loads(invoke("--root", str(root), "usage", "--json").stdout)["profiles"][0]
    assert usage["auto_vacuum"] == "incremental" and usage["reclaim_waits_for"] is None
    more_old_sessions(db, now)  # then Hermes' own prune deletes them: its free pages, not ours
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM messages WHERE session_id LIKE 'later%'")
    conn.execute("DELETE FROM sessions WHERE id LIKE 'later%'")
    conn.close()
    assert pragma(db, "freelist_count") > 0
    back = json.loads(invoke("--root", str(root), "purge", "--json").stdout)["results"][0]
    assert back["rows"] == 0 and any("given back to the file system" in n for n in back["notes"])
    assert pragma(db, "freelist_count") == 0


def test_the_daemons_journal_says_what_free_pages_wait_for():
    """The daemon logs a task line without its notes: the free pages a skipped VACUUM left, and
    `compact`, are said in a line of their own, as `run` says them."""
    from hermes_admin import report
    from hermes_admin.results import Result, Run

    run = Run(dry_run=False, results=[Result("work", "delete", "prune", False, task="purge", home="/h/work")])
    run.data["reclaim_waits"] = [{"home": "/h/work", "profile": "work", "bytes": 65536, "compact": True,
                                  "held_by": "not known to be free (not looked into: pid 1 (init): EACCES)"}]
    (line,) = [ln for ln in report.summary_lines(run, only_changes=True) if "VACUUM" in ln]
    assert line.startswith("work: 64.0 KiB of free pages wait for one VACUUM")
    assert "`hermes-admin compact -p work`" in line


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_store_too_big_to_rewrite_unasked_waits_for_the_operators_word(tmp_path, now, invoke, monkeypatch,
                                                                         journal):
    """Unasked, a run VACUUMs (to switch a store to incremental reclaim) only a store short to
    rewrite; a bigger one (here: any) keeps its free pages until `--vacuum` or `compact`, and the
    dry run, the run, its report and `usage` say so and what the VACUUM would rewrite, in either
    journal (the rule is decided before any holder is looked at). The operator's word then switches
    it: `--vacuum` in WAL (its locks say who holds it, on any host); `compact` in a rollback
    journal, where `run` stays careful on a host with processes it cannot look into."""
    from hermes_admin.profile.engine import space

    monkeypatch.setattr(space, "UNASKED_REWRITE_MAX_BYTES", 0)
    root = tmp_path / "h"
    db = vacuum_worthy_store(root / "state.db", now, sessions=1200, journal=journal)
    dry = json.loads(invoke("--root", str(root), "purge", "--dry-run", "--json").stdout)["results"][0]
    assert dry["vacuumed"] is False and dry["rows"] > 0
    done = json.loads(invoke("--root", str(root), "purge", "--json").stdout)
    result, (wait,) = done["results"][0], done["reclaim_waits"]
    assert result["rows"] > 0 and result["vacuumed"] is False and pragma(db, "auto_vacuum") == 0
    assert any(n.startswith("no VACUUM: ") and "on your word" in n for n in result["notes"])
    used = (pragma(db, "page_count") - pragma(db, "freelist_count")) * pragma(db, "page_size")
    assert wait["rewrite_bytes"] == used and wait["bytes"] >= 4 << 20 and "held_by" not in wait
    human = invoke("--root", str(root), "purge")  # nothing left to purge: the wait is said again
    assert human.exit_code == 0 and "of free pages wait for one VACUUM, which would rewrite" in human.stdout
    assert "`hermes-admin compact -p " in human.stdout and pragma(db, "auto_vacuum") == 0
    usage = json.loads(invoke("--root", str(root), "usage", "--json").stdout)["profiles"][0]
    assert usage["reclaim_waits_for"].startswith("one VACUUM on your word")
    if journal == "wal":
        asked = json.loads(invoke("--root", str(root), "purge", "--vacuum", "--json").stdout)
        assert asked["results"][0]["vacuumed"] is True and not asked["reclaim_waits"]
    else:
        asked = invoke("--root", str(root), "compact", "--json")
        assert asked.exit_code == 0, asked.stdout + asked.stderr
    assert pragma(db, "auto_vacuum") == 2 and pragma(db, "journal_mode") == journal


def test_what_a_run_rewrites_unasked():
    from hermes_admin.profile.engine.space import UNASKED_REWRITE_MAX_BYTES, rewrite_unasked

    for used, fits in ((0, True), (4 << 20, True), (UNASKED_REWRITE_MAX_BYTES, True),
                       (UNASKED_REWRITE_MAX_BYTES + 1, False), (1 << 30, False)):
        assert rewrite_unasked(used) is fits, used


def test_the_report_says_a_store_waits_for_the_operators_word():
    from hermes_admin import report
    from hermes_admin.results import Result, Run

    run = Run(dry_run=False, results=[Result("work", "delete", "prune", False, task="purge", home="/h/work")])
    run.data["reclaim_waits"] = [{"home": "/h/work", "profile": "work", "bytes": 8 << 20,
                                  "rewrite_bytes": 900 << 20, "compact": True}]
    (line,) = [ln for ln in report.summary_lines(run, only_changes=True) if "VACUUM" in ln]
    assert line.startswith("work: 8.0 MiB of free pages wait for one VACUUM, which would rewrite 900.0 MiB")
    assert "`hermes-admin compact -p work`" in line and "held" not in line

"""Root over her home while her own Hermes holds her store: root's runs never delete her WAL, and
when something else did, root names her process (which root sees, and she alone could not fix)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tests.compat.test_compat_live_holder import Holder, identity, seen
from tests.root.conftest import as_user

STANDARD = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}


def test_roots_runs_keep_her_lockless_hermes_alive_and_name_it_once_its_wal_is_gone(make_user, admin, user_hermes):
    alice = make_user("alice")
    spec = {"root": str(alice.root), "now": time.time(), "profiles": ["default", "work"], "plugins_enabled": [],
            "sessions": STANDARD, "orphans": True}
    python = str(user_hermes / "bin" / "python")
    built = as_user(alice, [python, str(user_hermes.parent / "peer_build.py"), json.dumps(spec)])
    assert built.returncode == 0, built.stderr[-2000:]
    home = alice.root / "profiles" / "work"
    db = home / "state.db"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(alice.home), "HERMES_HOME": str(home), "LANG": "C.UTF-8"}
    proc = subprocess.Popen([python, str(user_hermes.parent / "peer_holder.py"), str(home), "drop-db"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=str(alice.home),
                            user=alice.uid, group=alice.gid, extra_groups=[])
    try:
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["ready"], ready
        holder = Holder(proc, ready[1])
        wal = identity(f"{db}-wal")
        for command in (["run", "--yes"], ["purge", "--older-than", "90", "--yes"], ["repair", "--apply", "--yes"]):
            done = admin("--root", str(alice.root), *command)
            assert done.returncode in (0, 1), done.stderr
            assert f"pid {proc.pid}" in done.stderr  # her Hermes without its lock on state.db: a warning
            holder.append(f"after root's {command[0]}")
            assert identity(f"{db}-wal") == wal, command
            assert seen(db, holder.session) == holder.appended, command

        # Now a careless tool of hers (the `sqlite3` shell does this) deletes the WAL under it.
        careless = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions'); c.close()"
        assert as_user(alice, ["/usr/bin/python3", "-c", careless, str(db)]).returncode == 0
        assert identity(f"{db}-wal") is None
        holder.append("into the deleted WAL")
        before = db.read_bytes()
        listed = admin("--root", str(alice.root), "profiles", "--json")
        assert listed.returncode == 2, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)["profiles"]}
        assert [hold["pid"] for hold in rows["work"]["broken_holds"]] == [proc.pid]
        assert rows["default"]["broken_holds"] == []
        ran = admin("--root", str(alice.root), "run", "--yes", "--json")
        assert ran.returncode == 2, ran.stderr
        named = [e for e in json.loads(ran.stdout)["errors"] if f"pid {proc.pid}" in e]
        assert len(named) == 1 and "peer_holder.py" in named[0] and "deleted state.db-wal" in named[0]
        assert db.read_bytes() == before
        # as herself, she sees it too (her own process)
        mine = admin("--root", str(alice.root), "profiles", "--json", as_user=alice)
        assert mine.returncode == 2 and str(proc.pid) in mine.stdout
    finally:
        proc.kill()
        proc.wait()

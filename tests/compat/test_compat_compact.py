"""`hermes-admin compact` on stores the real Hermes releases write: 0.19.0's in WAL, 0.22.2's in a
rollback journal (what it makes on a SQLite before 3.51.3), on a host where a process cannot be
looked into (this machine's own pid 1, else injected: tests/unit/test_compact.py). `run` leaves
the VACUUM of a rollback-journal store and names why; `compact --yes` gives the free pages back,
and the release reads and writes the store after it, its journal mode unchanged."""

from __future__ import annotations

import json
import os

import pytest

from tests.compat import checks
from tests.helpers import HOST_PIDS, home_of
from tests.unit.test_compact import free_bytes, unseen_pid_1  # noqa: F401 (a fixture)
from tests.unit.test_reclaim import pragma

APPEND = r"""
import sys
from pathlib import Path
from hermes_state import SessionDB
db = SessionDB(Path(sys.argv[1]))
sid = db.create_session("after_compact_0001", source="cli")
db.append_message(sid, role="user", content="written after compact")
print(len(db.search_messages("compact")))
db.close()
"""


@pytest.mark.parametrize("release", ["0.19.0", "0.22.2"])
def test_compact_gives_a_real_stores_free_pages_back_where_a_process_cannot_be_looked_into(
        hermes_peer, tmp_path, now, invoke, unseen_pid_1, release):  # noqa: F811
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, ["default"], now, orphans=False, release=release)
    home = home_of(root, "default")
    db = home / "state.db"
    journal = hermes_peer.RELEASES[release].journal
    assert pragma(db, "journal_mode") == journal
    # --vacuum where run stays careful (a rollback journal: an idle connection of a process not
    # looked into holds no lock), to see it name why; in WAL pid 1 would show in /proc/locks.
    careful = journal == "delete" or not HOST_PIDS
    purged = invoke("--root", str(root), "purge", "--older-than", "1d", "--force", *(["--vacuum"] if careful else []),
                    "--yes", "--json")
    assert purged.exit_code in (0, 1), purged.stderr
    result = json.loads(purged.stdout)["results"][0]
    assert result["rows"] > 0 and result["vacuumed"] is False
    if careful:
        assert any("pid 1" in n and "EACCES" in n and "/proc/locks" in n for n in result["notes"]), result["notes"]
    conn_free = free_bytes(db)
    assert conn_free > 0
    size = os.stat(db).st_size
    dry = json.loads(invoke("--root", str(root), "compact", "--dry-run", "--json").stdout)["compacted"][0]
    assert dry["given_back_bytes"] == conn_free and os.stat(db).st_size == size
    done = invoke("--root", str(root), "compact", "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    (row,) = json.loads(done.stdout)["compacted"]
    assert row["given_back_bytes"] > 0 and row["refused"] is None
    assert free_bytes(db) == 0 and os.stat(db).st_size < size
    assert pragma(db, "journal_mode") == journal
    assert checks.sqlite_problems(db) == []
    wrote = hermes_peer.run_script(APPEND, home, release=release, args=[str(db)])
    assert wrote.returncode == 0 and int(wrote.stdout.strip().splitlines()[-1]) >= 1, wrote.stderr

"""A live Hermes whose own POSIX locks are gone keeps a working store whatever we run beside it,
and one that already writes into deleted files is named, never written beside.

The holder is the real Hermes `SessionDB` (tests/compat/peer_holder.py), a session open, its locks
dropped the way upstream Hermes dropped them: an `open()`/`close()` of `state.db` in its own process.
Without the guard, the first command of ours to close its connection checkpoints and deletes
`-wal`/`-shm`, and every later append of the holder "succeeds" into a deleted file.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from tests import one_sqlite, peer
from tests.conftest import fts_problems, store_health
from tests.helpers import home_of
from tests.unit.test_ops import parse_textfile, start_daemon, wait_for

HOLDER = Path(__file__).with_name("peer_holder.py")
PROFILES = ["default", "alpha"]
POLICY = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}


class Holder:
    def __init__(self, proc: subprocess.Popen, session: str):
        self.proc, self.session, self.appended = proc, session, 1

    def append(self, text: str) -> None:
        self.proc.stdin.write(f"append {text}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer.startswith("ok "), answer  # the holder itself believes every write
        self.appended += 1


@contextmanager
def holding(home: Path, mode: str = "drop-db"):
    proc = subprocess.Popen([peer.python(), str(HOLDER), str(home), mode], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=peer._env(home))
    try:
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["ready"], ready
        yield Holder(proc, ready[1])
    finally:
        try:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()


def admin(root: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    """hermes-admin as its own process, as an operator or the timer runs it."""
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", HERMES_HOME="")
    return subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), *args], capture_output=True,
                          text=True, env=env, timeout=300, stdin=subprocess.DEVNULL, **extra)


def seen(db: Path, session: str) -> int:
    """What a fresh reader sees of the holder's session."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session,)).fetchone()[0]
    finally:
        conn.close()


def identity(path: str) -> tuple[int, int] | None:
    """Which file is at `path` now (None: none)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def test_every_writing_command_keeps_a_lockless_holders_store(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, PROFILES, now, sessions=POLICY)["alpha"]
    home = home_of(root, "alpha")
    db = home / "state.db"
    config = tmp_path / "admin.yaml"
    metrics = tmp_path / "hermes.prom"
    config.write_text(f"schedule:\n  run: {{every_seconds: 2}}\nmetrics_file: {metrics}\n")
    commands = [
        ["profiles"],
        ["sessions", "delete", kinds["old_ended"][0], "--yes"],
        ["sessions", "archive", kinds["recent"][0], "--yes"],
        ["sessions", "unarchive", kinds["recent"][0], "--yes"],
        ["sweep-empty", "--yes"],
        ["prune-ghosts", "--yes"],
        ["purge", "--older-than", "90", "--vacuum", "--yes"],
        ["restore", "EXPORT", "--yes"],
        ["archive-inactive", "--days", "30", "--yes"],
        ["repair", "--apply", "--yes"],
        ["run", "--yes"],
    ]
    with holding(home) as holder:
        wal, shm = identity(f"{db}-wal"), identity(f"{db}-shm")
        for command in commands:
            if command[0] == "restore":
                exports = sorted((home / ".hermes-admin" / "exports").glob("*.jsonl.gz"))
                assert exports, "the purge left no export to restore"
                command = ["restore", str(exports[-1]), "-p", "alpha", "--yes"]
            else:
                command = [*command[:1 + (command[0] == "sessions")], "-p", "alpha", *command[1 + (command[0] == "sessions"):]]
            done = admin(root, *command)
            assert done.returncode in (0, 1), (command, done.stderr)
            # the holder lost its lock on state.db: named, as a warning, on every command that writes
            if command[0] != "sessions" or command[1] != "list":
                assert f"pid {holder.proc.pid}" in done.stderr or command[0] == "sessions", (command, done.stderr)
            holder.append(f"after {' '.join(command[:2])}")
            assert identity(f"{db}-wal") == wal and identity(f"{db}-shm") == shm, command  # never removed
            assert seen(db, holder.session) == holder.appended, command  # no append lost
        daemon = start_daemon(root, config)
        try:
            assert wait_for(lambda: metrics.exists(), 30), "the daemon never finished a pass"
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=15) == 0
        finally:
            if daemon.poll() is None:
                daemon.kill()
        holder.append("after the daemon")
        assert identity(f"{db}-wal") == wal
        assert seen(db, holder.session) == holder.appended
    samples = parse_textfile(metrics.read_text())
    assert samples[f'hermes_admin_store_unlocked_holders{{profile="alpha",home="{home}"}}'] == 1
    assert samples[f'hermes_admin_store_detached_holders{{profile="alpha",home="{home}"}}'] == 0
    assert seen(db, holder.session) == holder.appended  # and after the holder closed
    assert store_health(db) == [] and fts_problems(db) == []
    assert hermes_peer.hermes(home, "sessions", "list").returncode == 0


def test_a_holder_writing_into_a_deleted_wal_is_named_and_its_store_left_alone(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    hermes_peer.build_root(root, PROFILES, now, sessions=POLICY)
    home = home_of(root, "alpha")
    db = home / "state.db"
    metrics = tmp_path / "hermes.prom"
    with holding(home) as holder:
        careless = one_sqlite.system_connect(db)  # what the `sqlite3` shell does: the last connection, it thinks
        careless.execute("SELECT COUNT(*) FROM sessions").fetchone()
        careless.close()
        assert not Path(f"{db}-wal").exists()  # the holder's WAL is gone
        holder.append("into a deleted file")
        before = db.read_bytes()

        listed = admin(root, "profiles", "--json")
        assert listed.returncode == 2, listed.stderr
        rows = {row["name"]: row for row in json.loads(listed.stdout)["profiles"]}
        assert rows["default"]["ok"] and rows["default"]["broken_holds"] == []
        hold = rows["alpha"]["broken_holds"]
        assert not rows["alpha"]["ok"] and hold[0]["pid"] == holder.proc.pid and hold[0]["blocks_writes"]
        assert "peer_holder.py" in hold[0]["command"]
        assert {"file": "state.db-wal", "problem": "deleted", "reads_only": False} in hold[0]["files"]

        ran = admin(root, "run", "--yes", "--json", "--metrics-file", str(metrics))
        assert ran.returncode == 2, ran.stderr
        errors = [e for e in json.loads(ran.stdout)["errors"] if f"pid {holder.proc.pid}" in e]
        assert len(errors) == 1 and "peer_holder.py" in errors[0] and "restarted" in errors[0]
        assert "deleted state.db-wal" in errors[0] and f"/proc/{holder.proc.pid}/fd/" in errors[0]
        assert db.read_bytes() == before  # nothing of ours written beside it
        assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0  # (a reader's: empty)
        results = json.loads(ran.stdout)["results"]
        assert {r["profile"] for r in results} == {"default"}  # the other profile was maintained
    samples = parse_textfile(metrics.read_text())
    assert samples[f'hermes_admin_store_detached_holders{{profile="alpha",home="{home}"}}'] == 1
    assert samples[f'hermes_admin_store_detached_holders{{profile="default",home="{root}"}}'] == 0

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_admin.cli.main import cli
from hermes_admin.synth.scenario import build_root
from tests import one_sqlite, parallel, skips

one_sqlite.install()  # one SQLite in this process: hermes-admin's (tests/one_sqlite.py)
# No managed scope of the machine's (/etc/hermes) in any test, ours or a real Hermes': a variable
# naming a folder that is not there means none, to Hermes and to hermes-admin alike (host/managed.py).
os.environ.setdefault("HERMES_MANAGED_DIR", "/nonexistent/hermes-admin-tests-no-managed-scope")

NOW = time.time()


@pytest.fixture
def now() -> float:
    return NOW


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    parallel.default_to_parallel(config)  # before pytest-xdist reads -n (tests/parallel.py)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    return parallel.workers()  # two per core: the suite mostly waits


def pytest_configure(config):
    config.pluginmanager.register(skips.Guard(config), "hermes-admin-skips")  # only skips by design


@pytest.fixture(autouse=True)
def _a_turn_at_the_machine(request, tmp_path_factory):
    """Beside the other workers' tests, or by itself for a test marked `alone` (tests/parallel.py)."""
    with parallel.turn(request, tmp_path_factory):
        yield


@pytest.fixture
def synth_root(tmp_path: Path):
    """A root with a v30 default, a v30 `work` and a v22 `legacy` profile; returns (root, kinds)."""
    root = tmp_path / "hermes"
    kinds = build_root(root, {"default": 30, "work": 30, "legacy": 22}, now=NOW)
    return root, kinds


@pytest.fixture
def invoke(tmp_path: Path):
    """Run the CLI in-process with HOME and config lookups pointed at tmp_path."""
    def run(*args: str, input: str | None = None):
        runner = CliRunner()
        env = {"HOME": str(tmp_path / "home"), "HERMES_HOME": "", "HERMES_ADMIN_CONFIG": "",
               "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
        return runner.invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    return run


def store_digest(root: Path) -> dict[str, str]:
    """Hash of every store and WAL under a root: what 'no store was modified' compares.

    The -shm index is shared memory, not content, and an empty -wal (which any
    SQLite reader of a WAL store may create) holds nothing: both are left out.
    """
    digests = {}
    for path in sorted(root.rglob("state.db*")):
        if path.name.endswith("-wal") and path.stat().st_size == 0:
            continue
        if path.is_file() and not path.name.endswith("-shm"):
            digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "sessions": one("SELECT COUNT(*) FROM sessions"),
            "messages": one("SELECT COUNT(*) FROM messages"),
            "archived": one("SELECT COUNT(*) FROM sessions WHERE archived = 1"),
            "live": one("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL"),
        }
    finally:
        conn.close()


def fk_rows(db: Path) -> set[tuple]:
    """Rows `PRAGMA foreign_key_check` reports (scenario stores plant orphan rows on purpose)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return set(conn.execute("PRAGMA foreign_key_check").fetchall())
    finally:
        conn.close()


def store_health(db: Path, foreign_keys: bool = True) -> list[str]:
    """Problems SQLite finds in a store: integrity, foreign keys, both FTS indexes."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    problems = []
    try:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        if result != [("ok",)]:
            problems.append(f"integrity_check: {result}")
        fk = conn.execute("PRAGMA foreign_key_check").fetchall() if foreign_keys else []
        if fk:
            problems.append(f"foreign_key_check: {fk[:5]}")
    finally:
        conn.close()
    # FTS5 integrity-check is a write-form statement; it changes nothing, but
    # needs a read-write handle, so run it on a private copy.
    problems += fts_problems(db)
    return problems


def fts_problems(db: Path) -> list[str]:
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        dst = sqlite3.connect(copy)
        src.backup(dst)
        src.close()
        for table in ("messages_fts", "messages_fts_trigram"):
            try:
                # rank = 1 also checks the index against an external content table.
                dst.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{table} integrity-check: {exc}")
        dst.close()
    return problems

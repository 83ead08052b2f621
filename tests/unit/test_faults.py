"""One bad profile never stops the others: odd paths, a malformed outbox, busy roots and locks."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from hermes_admin.host.runlock import RunLocks
from hermes_admin.profile.environment import Environment
from tests.helpers import other_connection, home_of, install_plugins, row_ids, own_interpreter, until


def old_ids(db):
    return row_ids(db, "SELECT id FROM sessions WHERE ended_at IS NOT NULL AND archived = 0")


def test_a_file_where_our_folder_goes_fails_that_profile_only(synth_root, invoke):
    root, _ = synth_root
    (home_of(root, "work") / ".hermes-admin").write_text("not a folder")
    before = row_ids(home_of(root, "default") / "state.db")
    result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert any("profile 'work'" in e and ".hermes-admin" in e and "not a folder" in e for e in doc["errors"])
    assert row_ids(home_of(root, "default") / "state.db") < before  # the others were maintained
    assert "Traceback" not in result.stderr


def test_a_folder_where_hermes_lock_goes_fails_that_profile_only(synth_root, invoke):
    root, _ = synth_root
    (home_of(root, "legacy") / "state.db.auto-maintenance.lock").mkdir()
    result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert any("profile 'legacy'" in e and "auto-maintenance.lock" in e for e in doc["errors"])
    assert {r["profile"] for r in doc["results"]} >= {"default", "work"}


def test_a_malformed_outbox_is_set_aside_once_and_the_profile_is_maintained(synth_root, invoke):
    root, _ = synth_root
    home = home_of(root, "work")
    (home / ".hermes-admin").mkdir()
    (home / ".hermes-admin" / "outbox.db").write_bytes(b"garbage" * 1000)
    first = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "90", "--yes", "--json")
    assert first.exit_code == 1, first.stderr  # done, with a warning
    assert "outbox.db" in first.stderr and "malformed" in first.stderr and "moved aside" in first.stderr
    assert any(name.startswith("outbox.db.set-aside-") for name in os.listdir(home / ".hermes-admin"))
    again = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "90", "--yes", "--json")
    assert again.exit_code == 0, again.stderr
    assert "outbox.db" not in again.stderr  # set aside once: the new outbox is whole


def test_a_second_run_on_a_busy_root_does_nothing_and_exits_3(synth_root, invoke):
    root, _ = synth_root
    before = {name: row_ids(home_of(root, name) / "state.db") for name in ("default", "work", "legacy")}
    held = RunLocks()
    held.take([root])
    try:
        result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes", "--json")
    finally:
        held.release()
    assert result.exit_code == 3
    assert f"pid {os.getpid()}" in result.stderr and "nothing was done" in result.stderr
    assert {name: row_ids(home_of(root, name) / "state.db") for name in before} == before
    dry = invoke("--root", str(root), "purge", "--older-than", "90", "--dry-run", "--json")
    assert dry.exit_code == 0  # a dry run takes no lock


def test_a_held_profile_lock_names_its_holder(synth_root, invoke):
    root, _ = synth_root
    lock = home_of(root, "work") / ".hermes-admin" / "lock"
    lock.parent.mkdir()
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write(json.dumps({"pid": 4242}))
        held.flush()
        result = invoke("--root", str(root), "purge", "--older-than", "90", "--yes")
    assert result.exit_code == 3
    assert "profile 'work'" in result.stderr and "pid 4242" in result.stderr
    # The kernel's holder (/proc/locks) is named with its command; the record's pid is called stale.
    assert f"held by pid {os.getpid()}: " in result.stderr and "4242 recorded in it is stale" in result.stderr


def test_a_stale_lock_record_is_called_stale(tmp_path):
    from hermes_admin import lockrecord

    path = tmp_path / "lock"
    path.write_text(json.dumps({"pid": 2 ** 22 + 7}))  # past pid_max: nobody
    fd = os.open(path, os.O_RDWR)
    try:
        assert "not running: the record is stale" in lockrecord.describe(fd, lockrecord.holder(fd))
        fcntl.flock(fd, fcntl.LOCK_EX)
        other = os.open(path, os.O_RDWR)
        try:
            assert lockrecord.kernel_holders(os.fstat(other)) == [os.getpid()]
        finally:
            os.close(other)
    finally:
        os.close(fd)


def test_an_odd_sessions_folder_is_a_warning(synth_root, invoke):
    root, _ = synth_root
    home = home_of(root, "work")
    for entry in (home / "sessions").iterdir():
        entry.unlink()
    (home / "sessions").rmdir()
    (home / "sessions").write_text("a file")
    result = invoke("--root", str(root), "purge", "-p", "work", "--older-than", "90", "--yes")
    assert result.exit_code == 1
    assert "sessions: not a folder" in result.stderr


def test_plugin_failures_are_one_line_each(tmp_path, synth_root, invoke):
    root, _ = synth_root
    install_plugins(root, ["raiser"], enabled=["raiser"])
    result = invoke("--root", str(root), "purge", "-p", "default", "--older-than", "90", "--yes")
    lines = [line for line in result.stderr.splitlines() if "plugin raiser" in line]
    assert len([line for line in lines if "on_session_delete raised RuntimeError" in line]) == 1, result.stderr
    assert len(lines) <= 2 and all("more time(s)" in line for line in lines[1:])  # then how often, once
    assert "Traceback" not in result.stderr


def test_the_daemon_says_a_failing_plugin_once_a_run_as_run_does(tmp_path, synth_root, caplog):
    """Each task of a scheduled `run` delivers its own events; the journal still gets one line."""
    import logging

    from hermes_admin.host.config import AdminConfig
    from hermes_admin.host.daemon import Daemon

    root, _ = synth_root
    install_plugins(root, ["raiser"], enabled=["raiser"])
    with caplog.at_level(logging.INFO, logger="hermes_admin.daemon"):
        Daemon(load_config=AdminConfig, roots_given=(str(root),)).job("run")
    said = [r.getMessage() for r in caplog.records]
    tasks = [line for line in said if line.startswith("default: ") and "unit(s)" in line]
    assert len(tasks) >= 2, said  # events came from more than one task
    lines = [line for line in said if "plugin raiser" in line]
    assert len([line for line in lines if "on_session_delete raised RuntimeError" in line]) == 1, said
    assert len(lines) <= 2 and all("more time(s)" in line for line in lines[1:])


def test_the_same_sessions_delete_again_delivers_what_a_crash_left(synth_root, invoke):
    """A kill after the commit leaves an event in the outbox: naming the gone session again delivers it."""
    import sqlite3
    import time

    from tests.helpers import events

    root, kinds = synth_root
    install_plugins(root, ["recorder"], enabled=["recorder"])
    (root / ".hermes-admin").mkdir()
    conn = sqlite3.connect(root / ".hermes-admin" / "outbox.db")
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, created REAL NOT NULL, state TEXT NOT NULL, "
                 "kind TEXT NOT NULL, session_id TEXT NOT NULL, reason TEXT NOT NULL, ids TEXT NOT NULL)")
    conn.execute("INSERT INTO events VALUES (1, ?, 'committed', 'delete', 'gone-1', 'delete', '[\"gone-1\"]')",
                 (time.time(),))
    conn.commit()
    conn.close()
    result = invoke("--root", str(root), "sessions", "delete", "gone-1", "--yes")
    assert "no session matches 'gone-1'" in result.stderr
    assert [e["session_id"] for e in events(root)] == ["gone-1"]
    again = invoke("--root", str(root), "sessions", "delete", "gone-1", "--yes")
    assert again.exit_code == 1 and [e["session_id"] for e in events(root)] == ["gone-1"]  # once


def test_typos_are_warned_about_and_nothing_is_skipped(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = home_of(root, "work") / "config.yaml"
    config.write_text("sessions: {auto_prnue: true, retention_days: 90}\n")
    admin = tmp_path / "admin.yaml"
    admin.write_text("profiles: {wrok: {retention_days: 30}}\n")
    result = invoke("--root", str(root), "--config", str(admin), "run", "--dry-run", "--json")
    assert result.exit_code == 1, result.stderr
    assert "sessions: unknown key(s) auto_prnue" in result.stderr and str(config) in result.stderr
    assert "profiles.wrok: matches no profile" in result.stderr
    doc = json.loads(result.stdout)
    assert {r["profile"] for r in doc["results"]} == {"default", "work", "legacy"}  # nothing skipped


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_while_a_plugin_hangs_ends_within_15_s_and_leaves_no_plugin_behind(tmp_path, now, sig):
    """The sleeper plugin hangs for 300 s (timeout 300 s): a stop request still ends the run quickly,
    the event stays in the outbox for the next run, and no process of the plugin lives on."""
    import signal
    import subprocess
    import sys
    import time

    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("a", started=now - 10, ended=now - 5, end_reason="x")
    store.close()
    install_plugins(root, ["sleeper"], enabled=["sleeper"], timeout=300)
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", HOME=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "hermes_admin", "--root", str(root), "sessions", "delete", "a",
                             "--yes", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    db = root / "state.db"
    # the delete committed and the plugin process (its current folder the home) is at the callback
    assert until(lambda: "a" not in row_ids(db) and processes_in(root) != [] or proc.poll() is not None)
    started = time.monotonic()
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["results"][0]["rows"] == 1  # what was done is reported
    assert processes_in(root) == []  # the plugin process ran with the home as its current folder
    assert "a" not in row_ids(root / "state.db")
    import sqlite3
    conn = sqlite3.connect(root / ".hermes-admin" / "outbox.db")
    assert conn.execute("SELECT state FROM events").fetchall() == [("committed",)]  # for the next run
    conn.close()


def processes_in(folder) -> list[int]:
    """Pids of the processes whose current folder is `folder`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd") == str(folder):
                    found.append(int(name))
            except OSError:
                pass
    return found


def test_what_a_plugin_leaves_behind_dies_with_its_plugin_process(tmp_path, now, invoke):
    """A plugin that double-forks and calls setsid escapes a process-group kill: it is reaped anyway."""
    root = ended_session_with_plugin(tmp_path, now, "escaper",
        "import os, time\n"
        "def register(ctx):\n"
        "    def cb(session_id):\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"
        "            if os.fork() == 0:\n"
        "                open(os.path.join(os.environ['HERMES_HOME'], 'escaped.pid'), 'w').write(str(os.getpid()))\n"
        "                time.sleep(120)\n"
        "            os._exit(0)\n"
        "        time.sleep(0.5)\n"
        "    ctx.register_hook('on_session_delete', cb)\n")
    result = invoke("--root", str(root), *own_interpreter(tmp_path), "sessions", "delete", "a", "--yes")
    assert result.exit_code == 0, result.stderr
    pid = int((root / "escaped.pid").read_text())
    assert until(lambda: _ended(pid))  # killed with its plugin process, not at the end of its 120 s


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of our own (root can mount here; elsewhere the tests that need it skip)."""
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _two_roots(tmp_path, disk):
    from hermes_admin.synth.scenario import build_root
    from tests.conftest import NOW

    good, bad = tmp_path / "good" / "hermes", disk / "hermes"
    build_root(good, {"default": 30}, now=NOW)
    build_root(bad, {"default": 30}, now=NOW)
    return good, bad


def test_a_read_only_filesystem_fails_that_root_only(tmp_path, small_disk, invoke):
    import subprocess

    good, bad = _two_roots(tmp_path, small_disk)
    before = row_ids(bad / "state.db")
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    result = invoke("--root", str(good), "--root", str(bad), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 2, result.stderr
    doc = json.loads(result.stdout)
    assert any(str(bad) in e and "Read-only file system" in e for e in doc["errors"]), doc["errors"]
    assert any(r["home"] == str(good) and r["rows"] for r in doc["results"])  # the other root was maintained
    assert row_ids(bad / "state.db") == before and "Traceback" not in result.stderr


def test_a_full_disk_fails_that_root_only_and_loses_nothing(tmp_path, small_disk, invoke):
    good, bad = _two_roots(tmp_path, small_disk)
    before = row_ids(bad / "state.db")
    with open(small_disk / "filler", "wb") as filler:  # fill the disk to the last block
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass
    result = invoke("--root", str(good), "--root", str(bad), "purge", "--older-than", "90", "--yes", "--json")
    assert result.exit_code == 2, result.stderr
    doc = json.loads(result.stdout)
    assert any(str(bad) in e for e in doc["errors"]), doc["errors"]
    assert any(r["home"] == str(good) and r["rows"] for r in doc["results"])
    assert "Traceback" not in result.stderr
    (small_disk / "filler").unlink()
    assert row_ids(bad / "state.db") == before  # refused before anything went: nothing deleted unannounced
    from tests.conftest import store_health
    assert store_health(bad / "state.db", foreign_keys=False) == []  # whatever happened, the store is whole


def test_a_wait_on_a_locked_store_is_told(synth_root, invoke):
    """Hermes (here: another connection) holds the write lock for a few seconds: the wait is said."""
    import sqlite3
    import threading

    root, kinds = synth_root
    holder = other_connection(root / "state.db")
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(3.5, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        result = invoke("--root", str(root), "sessions", "delete", kinds["default"]["recent"][0], "--yes")
    finally:
        release.join()
        holder.close()
    assert "another process holds the write lock; waiting" in result.stderr
    assert "s without progress (lock_wait)" in result.stderr  # the sentence ends
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("forgery", [b"5\n", b'{"done": 0, "error": null}\n', b"x" * (3 << 20)],
                         ids=["a-number", "a-fake-done-then-hang", "an-endless-line"])
def test_a_plugin_that_lies_on_the_protocol_is_stopped_in_bounded_time(tmp_path, now, invoke, forgery):
    """The plugin writes forged replies into its plugin process's reply pipe (found by scanning its fds), then
    hangs: the bus refuses them, kills the plugin process, and the run finishes, named, without a traceback."""
    import time

    root = ended_session_with_plugin(tmp_path, now, "liar",
        "import os, stat, time\n"
        f"FORGERY = {forgery!r}\n"
        "def register(ctx):\n"
        "    def cb(session_id):\n"
        "        for fd in range(3, 64):\n"
        "            try:\n"
        "                if stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
        "                    os.write(fd, FORGERY)\n"
        "            except OSError:\n"
        "                pass\n"
        "        time.sleep(300)\n"
        "    ctx.register_hook('on_session_delete', cb)\n", timeout=5)
    started = time.monotonic()
    result = invoke("--root", str(root), "sessions", "delete", "a", "--yes", "--json")
    assert time.monotonic() - started < 30
    assert result.exit_code == 1, result.stderr  # done, with the plugin's failure as a warning
    failures = json.loads(result.stdout)["results"][0]["hook_failures"]
    assert any(f["plugin"] == "liar" and "plugin liar" in f["text"] for f in failures), failures
    assert "Traceback" not in result.stderr and processes_in(root) == []


def ended_session_with_plugin(tmp_path, now, name: str, source: str, timeout: float | None = None):
    """A root with one ended session `a` and one enabled plugin `name` whose code is `source`."""
    from hermes_admin.synth.builder import SynthStore

    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("a", started=now - 10, ended=now - 5, end_reason="x")
    store.close()
    folder = root / "plugins" / name
    folder.mkdir(parents=True)
    (folder / "plugin.yaml").write_text(f"name: {name}\n")
    (folder / "__init__.py").write_text(source)
    extra = f", hook_callback_timeout: {timeout:g}" if timeout is not None else ""
    (root / "config.yaml").write_text(f"plugins: {{enabled: [{name}]{extra}}}\n")
    return root


def test_a_store_held_by_another_process_is_3_naming_it(synth_root, invoke):
    """Past --lock-wait, the write lock another process keeps is a held lock: exit 3, its pid and command."""
    import subprocess
    import sys

    root, _ = synth_root
    db = home_of(root, "work") / "state.db"
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                               "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = invoke("--root", str(root), "--lock-wait", "0.5", "purge", "-p", "work", "--older-than", "1d",
                        "--force", "--yes")
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 3, result.stderr
    assert f"pid {holder.pid} (" in result.stderr and "python" in result.stderr
    assert "held the write lock" in result.stderr


def test_a_failure_closing_the_engine_reports_each_finished_result_once(tmp_path, monkeypatch):
    """The work returned its results, then closing the engine failed: each result is reported once,
    with the error, never again from the list of tasks finished before a failure."""
    from hermes_admin.profile.actions import common
    from hermes_admin.profile.engine.engine import Engine
    from hermes_admin.model import Profile
    from hermes_admin.results import Result, Run
    from hermes_admin.synth.builder import SynthStore

    home = tmp_path / "h"
    home.mkdir()
    SynthStore(home / "state.db", 30).close()
    profile = Profile(root=home, name="default", home=home)
    real_close, failed = Engine.close, []

    def close_then_fail(self):  # the first close fails; called again, it says what that did
        closed = real_close(self)
        if not failed:
            failed.append(True)
            raise OSError("the outbox's disk went away")
        return closed

    monkeypatch.setattr(Engine, "close", close_then_fail)
    run, ledger = Run(dry_run=False), common.Ledger()

    def work(engine):
        with ledger.begun(Result(profile.name, "delete", "prune", False, task="purge")) as result:
            pass
        return [result]

    common.with_engine(run, profile, Environment(), work, ledger=ledger)
    assert len(run.results) == 1 and run.results[0].task == "purge"
    assert any("outbox's disk went away" in e for e in run.errors + run.warnings)

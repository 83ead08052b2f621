"""Every finding about a profile is that profile's (issue 37): the broken-hold scan proves which
store a process holds by the file's device and inode and by the mount namespace it sees it in,
never by the text of /proc/PID/fd/N; a link from one store to another moves no finding."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_admin import lockrecord
from hermes_admin.host import detached
from tests.helpers import HOLD_DELETED as HOLD


def _store(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.db").write_bytes(b"")
    return folder / "state.db"


def _hold(argv: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        pytest.skip(f"cannot play the holder here: {proc.stderr.read()[-300:]}")
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_a_deleted_wal_held_in_our_namespace_is_found(tmp_path):
    store = _store(tmp_path / "home")
    proc = _hold([sys.executable, "-c", HOLD, f"{store}-wal"])
    try:
        found = detached.scan([store])
        assert [h.pid for h in found.get(store, [])] == [proc.pid]
        assert found[store][0].broken[0].how == "deleted"
    finally:
        _stop(proc)


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare(1)")
def test_a_tmpfs_over_the_path_in_a_private_namespace_is_not_the_store(tmp_path):
    """`unshare -rm`, a tmpfs over her victim's folder, a file deleted there under a process named
    like Hermes: the text of its fd link is the victim's WAL, the file is not."""
    store = _store(tmp_path / "victim")
    script = (f'mount -t tmpfs none "{store.parent}" && exec -a "hermes gateway run" '
              f'"{sys.executable}" -c \'{HOLD}\' "{store}-wal"')
    proc = _hold(["unshare", "-rm", "bash", "-c", script])
    try:
        assert os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        assert detached.scan([store]) == {}
    finally:
        _stop(proc)


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare(1)")
def test_her_folder_bound_over_the_path_in_a_private_namespace_is_not_the_store(tmp_path):
    """The same filesystem, the same path text, another folder of it: not the victim's."""
    store = _store(tmp_path / "victim")
    hers = tmp_path / "hers"
    hers.mkdir()
    script = (f'mount --bind "{hers}" "{store.parent}" && exec "{sys.executable}" -c \'{HOLD}\' "{store}-wal"')
    proc = _hold(["unshare", "-rm", "bash", "-c", script])
    try:
        assert detached.scan([store]) == {}
    finally:
        _stop(proc)


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare(1)")
def test_a_private_namespace_that_sees_the_same_folder_still_counts(tmp_path):
    """A service in a namespace of its own (PrivateTmp) holding the real store is still found."""
    store = _store(tmp_path / "home")
    script = f'exec "{sys.executable}" -c \'{HOLD}\' "{store}-wal"'
    proc = _hold(["unshare", "-rm", "bash", "-c", script])
    try:
        assert [h.pid for h in detached.scan([store]).get(store, [])] == [proc.pid]
    finally:
        _stop(proc)


def test_a_link_from_her_store_to_anothers_moves_no_finding(tmp_path):
    """Her state.db is a link to Bob's store: a process holding Bob's deleted WAL is Bob's finding,
    and only his; the link neither takes it nor switches his check off."""
    bob = _store(tmp_path / "bob")
    hers = tmp_path / "alice"
    hers.mkdir()
    (hers / "state.db").symlink_to(bob)
    (hers / "state.db-wal").symlink_to(f"{bob}-wal")
    proc = _hold([sys.executable, "-c", HOLD, f"{bob}-wal"])
    try:
        for order in ([hers / "state.db", bob], [bob, hers / "state.db"]):
            found = detached.scan(order)
            assert list(found) == [bob]
            assert [h.pid for h in found[bob]] == [proc.pid]
    finally:
        _stop(proc)


def test_the_broken_hold_scan_is_bounded_and_says_so(tmp_path, monkeypatch):
    store = _store(tmp_path / "home")
    proc = _hold([sys.executable, "-c", HOLD, f"{store}-wal"])
    try:
        monkeypatch.setattr(lockrecord, "SCAN_FDS", 2)
        notes: list[str] = []
        assert detached.scan([store], notes) == {}
        assert len(notes) == 1 and "gave up" in notes[0]
    finally:
        _stop(proc)


def test_device_names_come_from_the_mount(tmp_path):
    """/proc/locks names a file by its filesystem's device: st_dev, and its mount's device."""
    path = tmp_path / "f"
    path.write_text("")
    st, names = lockrecord.path_identity(path)
    assert f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}" in names
    assert lockrecord.path_identity(tmp_path / "missing") is None


# -- exports prune: one user's files never cost another's exports -----------------------------

def _row(home: str, created, size, name: str) -> dict:
    return {"home": home, "file": f"{home}/.hermes-admin/exports/{name}", "created": created, "bytes": size}


def test_max_size_is_a_budget_per_owner_and_times_cannot_lie_into_the_future():
    from hermes_admin.cli.exports_cmd import chosen

    now = 1_000_000.0
    bob = [_row("/home/bob/.hermes", now - 86400 * d, 10_000, f"b{d}") for d in (3, 2, 1)]
    forged = _row("/home/alice/.hermes", 1e300, 1 << 40, "huge")  # 1 TiB, made "in the far future"
    old_hers = _row("/home/alice/.hermes", now - 86400 * 9, 100, "old")
    owners = {"/home/bob/.hermes": 1001, "/home/alice/.hermes": 1002}
    doomed = chosen([*bob, forged, old_hers], None, 50_000, owners, now)
    assert {r["file"] for r in doomed} == {old_hers["file"], forged["file"]}  # hers alone, bob's untouched
    assert not any(r in doomed for r in bob)
    # one owner's own budget still works, oldest first; a future time counts as now
    doomed = chosen(bob, None, 15_000, owners, now)
    assert [r["file"] for r in doomed] == [bob[0]["file"], bob[1]["file"]]
    assert chosen([forged], 30, None, owners, now) == []  # "now" is never older than 30 days
    junk = {"home": "/home/bob/.hermes", "file": "x", "created": "soon", "bytes": True}
    assert chosen([junk], 0.0001, 0, owners, now) == []  # no number: made now, and 0 bytes


def test_an_exports_created_time_is_clamped_to_its_files_mtime(tmp_path):
    from hermes_admin.profile.exports import _created

    path = tmp_path / "f"
    path.write_bytes(b"")
    st = os.stat(path)
    assert _created(1e300, st) == st.st_mtime
    assert _created(st.st_mtime - 10, st) == st.st_mtime - 10
    assert _created("x", st) is None and _created(float("nan"), st) is None and _created(True, st) is None


def test_usage_counts_allocated_bytes(tmp_path):
    from hermes_admin.profile.usage import _folder_bytes, _size

    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(1 << 40)
    assert _size(sparse, apparent=True) == 1 << 40
    assert _size(sparse) < 1 << 20 and _folder_bytes(tmp_path) < 1 << 20


def test_restore_by_id_escapes_the_names_workers_give(monkeypatch):
    import click

    from hermes_admin.cli import exports_cmd
    from hermes_admin.results import Run

    evil = "/home/a/.hermes/.hermes-admin/exports/x\x1b]0;pwned\x07.jsonl.gz"
    run = Run(dry_run=True)
    run.data["exports"] = [{"file": evil}, {"file": evil + "2"}]

    class App:
        def work(self, *args, **kwargs):
            return run

    monkeypatch.setattr(exports_cmd, "short_id", lambda path: "abcd1234")
    with pytest.raises(click.UsageError) as raised:
        exports_cmd._by_id(App(), [], "abcd")
    assert "\x1b" not in raised.value.message and "\x07" not in raised.value.message
    assert "\\x1b" in raised.value.message


# -- root decides from root's own inputs ----------------------------------------------------

def test_a_hermes_python_key_is_compared_as_spelled_never_through_links(tmp_path):
    from hermes_admin.host.config import AdminConfig, hermes_python

    bob = tmp_path / "bob" / ".hermes"
    bob.mkdir(parents=True)
    alice = tmp_path / "alice"
    alice.mkdir()
    (alice / ".hermes").symlink_to(bob)  # her root, a link to his
    admin = AdminConfig(hermes_python={str(bob): "/opt/bob/python", str(tmp_path / "x" / ".." / "bob" / ".hermes"): "/y"})
    assert hermes_python(admin, "default", alice / ".hermes") is None
    assert hermes_python(admin, "default", bob).path == "/opt/bob/python"


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a file of another uid")
def test_a_users_worker_runs_no_interpreter_of_another_user(tmp_path, monkeypatch):
    from hermes_admin.profile import installation

    os.chmod(tmp_path, 0o755)
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    os.chmod(python, 0o755)
    monkeypatch.setattr(installation.os, "geteuid", lambda: 4243)
    assert installation.runnable(str(python)) is None  # root's: fine for a user
    os.chown(python, 4242, 4242)
    assert "belongs to uid 4242" in installation.runnable(str(python))  # another user's, though readable
    monkeypatch.setattr(installation.os, "geteuid", lambda: 4242)
    assert installation.runnable(str(python)) is None  # her own


@pytest.mark.skipif(os.geteuid() != 0, reason="root's rule")
def test_steering_variables_not_roots_own_are_ignored_as_root(tmp_path):
    from hermes_admin.trust import steering_environment

    hers = tmp_path / "hers"
    hers.mkdir()
    os.chown(hers, 4242, 4242)
    env = {"HERMES_BUNDLED_PLUGINS": str(hers), "HERMES_FTS5_CJK_SO": "/usr/lib", "HERMES_SAFE_MODE": "1"}
    warnings = steering_environment(env)
    assert "HERMES_BUNDLED_PLUGINS" not in env and env["HERMES_FTS5_CJK_SO"] == "/usr/lib"
    assert len(warnings) == 1 and "HERMES_BUNDLED_PLUGINS" in warnings[0] and "uid 4242" in warnings[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="root's cache")
def test_roots_cache_is_in_roots_home_whatever_home_says(tmp_path, monkeypatch):
    import pwd

    from hermes_admin.profile import installation

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert installation._cache_path() == Path(pwd.getpwuid(0).pw_dir) / ".cache" / "hermes-admin" / "hermes-installations.json"


def test_the_cache_is_read_with_checks_and_written_without_following_links(tmp_path, monkeypatch):
    from hermes_admin.profile import installation

    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    path = folder / "hermes-installations.json"
    monkeypatch.setattr(installation, "_cache_path", lambda: path)
    python = tmp_path / "python"
    python.write_text("")
    good = {"watch": installation._signature([str(python)]),
            "probe": {"hermes": "0.22.2", "sessions": {"retention_days": 90}, "hook_callback_timeout": 30,
                      "sessions_keys": ["retention_days"], "managed_scope": True,
                      "delete_hook": False}}
    path.write_text(json.dumps({str(python): good}))
    assert installation._cache_read(str(python))[0].sessions == {"retention_days": 90}
    older = {k: v for k, v in good["probe"].items() if k != "managed_scope"}  # a cache from before: probed again
    path.write_text(json.dumps({str(python): dict(good, probe=older)}))
    assert installation._cache_read(str(python)) is None
    for bad in ({"retention_days": "1"}, ["retention_days"], {"retention_days": 1, "evil": 2}):
        path.write_text(json.dumps({str(python): dict(good, probe=dict(good["probe"], sessions=bad))}))
        assert installation._cache_read(str(python)) is None, bad
    path.unlink()
    os.mkfifo(path)  # a FIFO where the cache is read: nothing waits
    assert installation._cache_load() == {}
    path.unlink()
    target = tmp_path / "victim"
    target.write_text("keep")
    path.symlink_to(target)
    assert installation._cache_load() == {}
    installation._cache_write(str(python), installation.Installation("", "", "0.22.2", {}, None, frozenset()), [])
    assert target.read_text() == "keep" and not path.is_symlink() and json.loads(path.read_text())


HOLD_AS = r'''
import os, sys, time
path, mode, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"x" * 4096)
os.close(fd)
fd = os.open(path, os.O_RDONLY if mode == "ro" else os.O_RDWR)
os.unlink(path)
if os.getuid() != uid:  # root playing another user: her uids, the descriptor kept
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
print("ready", flush=True)
time.sleep(120)
'''


def _another_uid() -> tuple[int, int]:
    """(the uid the holder runs as, the owner's uid): two accounts, neither of them root, so that the
    holder is provably not the owner's. As root the holder becomes `nobody`; else it stays ours and
    the owner is said to be someone else."""
    if os.geteuid() == 0:
        return 65534, 65533
    return os.geteuid(), os.geteuid() + 1


@pytest.mark.parametrize("mode, blocks", [("ro", False), ("rw", True)])
def test_another_users_descriptor_of_a_deleted_wal_blocks_only_if_it_can_write(tmp_path, mode, blocks):
    """Anyone may open a world-readable WAL read-only and keep it once SQLite deleted it: that
    holds nothing the owner's store depends on, and is a warning naming the process, never a refusal.
    Opened for writing, it is a writer's broken hold as ever."""
    store = _store(tmp_path / "home")
    holder, owner = _another_uid()
    proc = _hold([sys.executable, "-c", HOLD_AS, f"{store}-wal", mode, str(holder)])
    try:
        found = detached.scan([store], owners={store: owner})
        [hold] = found[store]
        assert hold.pid == proc.pid and hold.broken[0].how == "deleted"
        assert hold.broken[0].reads_only is not blocks and hold.blocks_writes is blocks
        from hermes_admin.model import Profile
        problem = hold.problem(Profile(store.parent, "default", store.parent))
        assert (problem.severity, problem.kind) == (("error", "detached_writer") if blocks else ("warning", "foreign_reader"))
        assert not hold.unlocked
    finally:
        _stop(proc)


def test_the_owners_own_read_only_descriptor_of_a_deleted_wal_still_blocks(tmp_path):
    store = _store(tmp_path / "home")
    holder, _ = _another_uid()
    proc = _hold([sys.executable, "-c", HOLD_AS, f"{store}-wal", "ro", str(holder)])
    try:
        [hold] = detached.scan([store], owners={store: holder})[store]
        assert hold.blocks_writes and not hold.broken[0].reads_only
    finally:
        _stop(proc)


HOLD_LOCKED_AS = r'''
import fcntl, os, sys, time
path, uid = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
fcntl.lockf(fd, fcntl.LOCK_SH, 1, 128)  # a read lock, as a SQLite reader holds on -shm
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)
print("ready", flush=True)
time.sleep(120)
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="plays another user's process: needs root")
@pytest.mark.parametrize("bits, counts", [(0o644, False), (0o666, True)])
def test_another_users_reader_is_no_holder_of_a_store_only_its_owner_may_write(tmp_path, bits, counts):
    """A VACUUM waits for the processes that could change the store: another user's read-only
    descriptor with a read lock on a store she cannot write is none; on one she may write, it is."""
    from hermes_admin.holders import store_holders

    store = _store(tmp_path / "home")
    (tmp_path / "home" / "state.db-shm").write_bytes(b"\0" * 32768)
    for suffix in ("", "-shm"):
        os.chmod(f"{store}{suffix}", bits)
    proc = _hold([sys.executable, "-c", HOLD_LOCKED_AS, f"{store}-shm", "65534"])
    try:
        found = store_holders(store, wal=True)
        assert (proc.pid in found) is counts, found
    finally:
        _stop(proc)

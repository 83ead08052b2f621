"""Root over ordinary users' homes: every task still works, each home as its owner."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import yaml

from tests.helpers import expected_after_run, needs_host_pids, row_ids, until, vacuum_worthy_store
from tests.root.conftest import build_user_root, chown_tree, mode, root_owned

WHOAMI = '''
import json, os, sys
def register(ctx):
    def on_delete(session_id, **kwargs):
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))
        ttys = [n for n in fds if os.path.exists(f"/proc/self/fd/{n}") and os.isatty(n)]
        try:
            os.close(os.open("/dev/tty", os.O_RDONLY)); tty = True
        except OSError:
            tty = False
        with open(os.path.join(os.environ["HERMES_HOME"], "whoami.jsonl"), "a") as out:
            out.write(json.dumps({"session_id": session_id, "uid": os.getuid(), "euid": os.geteuid(),
                                  "gid": os.getgid(), "groups": sorted(os.getgroups()), "env": dict(os.environ),
                                  "fds": fds, "ttys": ttys, "controlling_tty": tty, "cwd": os.getcwd(),
                                  "sys_path": sys.path}) + "\\n")
    ctx.register_hook("on_session_delete", on_delete)
'''


def with_plugin(home: Path, user, name: str = "whoami", source: str = WHOAMI, policy: dict | None = None) -> None:
    folder = home / "plugins" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.yaml").write_text(f"name: {name}\n")
    (folder / "__init__.py").write_text(source)
    config_path = home / "config.yaml"
    config = (yaml.safe_load(config_path.read_text()) if config_path.exists() else None) or {}
    config["plugins"] = {"enabled": [name]}
    if policy:
        config["sessions"] = policy
    config_path.write_text(yaml.safe_dump(config))
    chown_tree(home, user) if home == user.root else chown_tree(user.root, user)


STANDARD = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}


def test_root_run_maintains_each_home_as_its_owner(make_user, admin):
    alice, bob = make_user("alice"), make_user("bob")
    kinds = {u.name: build_user_root(u, {"default": 30}) for u in (alice, bob)}
    for user in (alice, bob):
        with_plugin(user.root, user, policy=STANDARD)
    done = admin("--root", str(alice.root), "--root", str(bob.root), "run", "--json")
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    assert {r["home"] for r in doc["results"]} == {str(alice.root), str(bob.root)}
    for user in (alice, bob):
        want = expected_after_run(kinds[user.name]["default"])
        ids = row_ids(user.root / "state.db")
        assert not ids & want["gone"] and want["kept"] <= ids
        calls = [json.loads(line) for line in (user.root / "whoami.jsonl").read_text().splitlines()]
        assert calls, "the plugin ran"
        for call in calls:
            assert (call["uid"], call["euid"], call["gid"]) == (user.uid, user.uid, user.gid)
            assert 0 not in call["groups"]
            assert set(call["env"]) <= {"HOME", "USER", "LOGNAME", "PATH", "LANG", "HERMES_HOME", "PYTHONUNBUFFERED"}
            assert call["env"]["HOME"] == str(user.home) and call["env"]["USER"] == user.name
            assert call["ttys"] == [] and call["controlling_tty"] is False
            assert "" not in call["sys_path"] and str(user.root) not in call["sys_path"]
        assert (user.root / ".hermes-admin" / "quick-check").exists()  # the check's record: hers, as all here
        assert root_owned(user.root) == [], "nothing in the home is root's"


def test_her_own_run_works_after_roots(make_user, admin):
    alice = make_user("alice")
    build_user_root(alice, {"default": 30, "work": 30})
    with_plugin(alice.root, alice, policy=STANDARD)
    first = admin("--root", str(alice.root), "run")
    assert first.returncode in (0, 1), first.stderr
    assert root_owned(alice.home) == []
    again = admin("--root", str(alice.root), "run", "--json", as_user=alice)
    assert again.returncode in (0, 1), again.stderr
    assert "Traceback" not in again.stderr
    json.loads(again.stdout)


def test_all_users_adds_the_roots_that_exist(make_user, admin):
    alice, nobody_home = make_user("alice"), make_user("plain")
    build_user_root(alice, {"default": 30})
    assert not (nobody_home.home / ".hermes").exists()
    done = admin("--all-users", "profiles", "--json")
    assert done.returncode == 0, done.stderr
    homes = {row["home"] for row in json.loads(done.stdout)["profiles"]}
    assert str(alice.root) in homes
    run = admin("--all-users", "run")
    assert run.returncode in (0, 1), run.stderr  # root without a ~/.hermes is no error


def test_without_a_runnable_interpreter_each_profile_says_so(make_user, tmp_path):
    """hermes-admin installed where the owner cannot run it: one line per profile, never root."""
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    before = row_ids(alice.root / "state.db")
    import sys
    if not sys.executable.startswith("/root/"):
        shutil.copy  # the test interpreter lives elsewhere: still checks the message shape below
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(alice.root), "run", "--yes"],
                          capture_output=True, text=True, env=dict(os.environ, HERMES_ADMIN_CONFIG=""), cwd="/")
    if os.access(sys.executable, os.X_OK) and sys.executable.startswith("/root/"):
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert f"profile 'default': {alice.root}" in done.stderr and "install hermes-admin where every user" in done.stderr
    assert row_ids(alice.root / "state.db") == before
    assert root_owned(alice.root) == []


def test_the_real_hermes_works_on_her_store_after_roots_run(make_user, admin, user_hermes):
    """Her root written by the real Hermes 0.19.0 as her; root maintains it; Hermes and SQLite, as her, agree."""
    import time

    from tests.conftest import store_health
    from tests.root.conftest import as_user

    alice = make_user("alice")
    now = time.time()
    spec = {"root": str(alice.root), "now": now, "profiles": ["default", "work"], "plugins_enabled": [],
            "sessions": STANDARD, "orphans": True}
    built = as_user(alice, [str(user_hermes / "bin" / "python"), str(user_hermes.parent / "peer_build.py"),
                            json.dumps(spec)])
    assert built.returncode == 0, built.stderr[-2000:]
    kinds = json.loads(built.stdout)
    done = admin("--root", str(alice.root), "run", "--json")
    assert done.returncode in (0, 1), done.stderr
    assert root_owned(alice.home) == []
    for name in ("default", "work"):
        home = alice.root if name == "default" else alice.root / "profiles" / name
        assert not set(kinds[name]["old_ended"]) & row_ids(home / "state.db")  # the policy was applied
        listing = as_user(alice, [str(user_hermes / "bin" / "hermes"), "sessions", "list"],
                          env={"HERMES_HOME": str(home)})
        assert listing.returncode == 0, listing.stderr[-2000:]
        assert store_health(home / "state.db", foreign_keys=False) == []
    again = admin("--root", str(alice.root), "run", "--json", as_user=alice)
    assert again.returncode in (0, 1) and "Traceback" not in again.stderr


def test_a_root_owned_root_in_her_folder_is_refused(make_user, admin):
    """`sudo hermes` may leave a root-owned ~/.hermes in her home: she could swap it after discovery,
    so it is never worked on (as root, in-process) at all."""
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    os.lchown(alice.root, 0, 0)
    done = admin("--root", str(alice.root), "run")
    assert done.returncode == 2
    assert "unsafe path transition" in done.stderr and str(alice.root) in done.stderr


def test_a_home_path_through_her_link_never_selects_bobs_profile(make_user, admin):
    """`-p ~alice/.hermes/profiles/work` where her `profiles` links to bob's: bob's `work` is not taken."""
    alice, bob = make_user("alice"), make_user("bob")
    build_user_root(bob, {"default": 30, "work": 30})
    alice.root.mkdir()
    os.symlink(bob.root / "profiles", alice.root / "profiles")
    chown_tree(alice.root, alice)
    before = row_ids(bob.root / "profiles" / "work" / "state.db")
    done = admin("--root", str(alice.root), "--root", str(bob.root), "purge", "--older-than", "1", "--force",
                 "--yes", "--json", "-p", str(alice.root / "profiles" / "work"))
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["results"] == []
    assert row_ids(bob.root / "profiles" / "work" / "state.db") == before


def test_a_folder_others_may_write_through_an_acl_is_refused(make_user, admin):
    """Mode 0755, but an ACL entry lets bob write in her `profiles/`: he could swap her profile."""
    import struct
    alice, bob = make_user("alice"), make_user("bob")
    build_user_root(alice, {"default": 30, "work": 30})
    # version 2; USER_OBJ rwx, USER bob rwx, GROUP_OBJ r-x, MASK rwx, OTHER r-x
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in [
        (0x01, 7, 0xFFFFFFFF), (0x02, 7, bob.uid), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
        (0x20, 5, 0xFFFFFFFF)])
    os.setxattr(alice.root / "profiles", "system.posix_acl_access", acl)
    done = admin("--root", str(alice.root), "profiles", "--json")
    assert done.returncode == 2
    assert "writable by other users" in done.stderr and "profiles" in done.stderr
    names = {r["name"] for r in json.loads(done.stdout)["profiles"]}
    assert names == {"default"}  # her default is fine; nothing under the ACL'd folder is worked on


def test_exports_and_restore_as_root_are_the_owners_files_and_work(make_user, admin):
    alice, mallory = make_user("alice"), make_user("mallory")
    build_user_root(alice, {"default": 30})
    build_user_root(mallory, {"default": 30})
    before = row_ids(alice.root / "state.db")
    done = admin("--root", str(alice.root), "purge", "--older-than", "90", "--yes")
    assert done.returncode in (0, 1), done.stderr
    folder = alice.root / ".hermes-admin" / "exports"
    (export,) = folder.glob("*.jsonl.gz")
    for path in (folder, export, Path(str(export) + ".json")):
        assert os.lstat(path).st_uid == alice.uid, path
    assert mode(folder) == 0o700 and mode(export) == 0o600
    assert root_owned(alice.root) == []
    listed = admin("--root", str(alice.root), "exports", "list", "--json")
    assert json.loads(listed.stdout)["exports"][0]["file"] == str(export)
    back = admin("--root", str(alice.root), "restore", str(export), "--yes")
    assert back.returncode == 0, back.stderr
    assert row_ids(alice.root / "state.db") == before
    assert root_owned(alice.root) == []
    # an "export" mallory points at alice's store is read as mallory: she cannot read alice's files
    theirs = admin("--root", str(mallory.root), "restore", str(export), "-p", "default", "--yes")
    assert theirs.returncode == 2 and "Permission denied" in theirs.stderr


def test_a_home_of_many_profiles_is_worked_on_by_two_of_her_processes(make_user, admin):
    from hermes_admin.profile.fork import MIN_PROFILES

    alice = make_user("alice")
    names = ["default"] + [f"p{i}" for i in range(MIN_PROFILES)]
    kinds = build_user_root(alice, {name: 30 for name in names})
    for name in names:
        home = alice.root if name == "default" else alice.root / "profiles" / name
        (home / "config.yaml").write_text(yaml.safe_dump({"sessions": STANDARD}))
    chown_tree(alice.root, alice)
    done = admin("--root", str(alice.root), "run", "--json")
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    assert not doc["errors"] and len({r["home"] for r in doc["results"]}) == len(names)
    holders = set()
    for name in names:
        home = alice.root if name == "default" else alice.root / "profiles" / name
        want = expected_after_run(kinds[name])
        ids = row_ids(home / "state.db")
        assert not ids & want["gone"] and want["kept"] <= ids, name
        lock = home / ".hermes-admin" / "lock"
        assert os.lstat(lock).st_uid == alice.uid
        holders.add(json.loads(lock.read_text())["pid"])
    assert len(holders) == 2  # the worker and its copy, both hers
    assert root_owned(alice.root) == []


SLOW = '''
import os, time
def began(session_id, **kw):  # says it began (in its home), then takes its time
    open(os.path.join(os.environ["HERMES_HOME"], "slow-began"), "a").close()
    time.sleep(0.4)
def register(ctx):
    ctx.register_hook("on_session_delete", began)
'''


def test_a_stop_of_roots_run_reaches_both_of_her_processes(make_user, system_venv):
    """SIGTERM to root's run: the host passes it to her worker only; the worker passes it to its copy.
    Both end after their current transaction and report; nothing is killed at the grace time."""
    import signal

    from hermes_admin.profile.fork import MIN_PROFILES

    alice = make_user("alice")
    names = ["default"] + [f"p{i}" for i in range(MIN_PROFILES)]
    build_user_root(alice, {name: 30 for name in names})
    for n, name in enumerate(names):  # the copy's half (the second) is slow: the stop finds the worker
        home = alice.root if name == "default" else alice.root / "profiles" / name  # waiting for its report
        with_plugin(home, alice, name="slow", source=SLOW if n >= (len(names) + 1) // 2 else WHOAMI, policy=STANDARD)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HERMES_ADMIN_CONFIG": "", "HOME": "/root"}
    proc = subprocess.Popen([str(system_venv / "bin" / "hermes-admin"), "--root", str(alice.root), "run", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    half = (len(names) + 1) // 2
    last_own = alice.root / "profiles" / names[half - 1]
    slow_homes = [alice.root / "profiles" / name for name in names[half:]]

    def the_stop_finds_the_copy_at_work():  # the worker's own half at its last profile's events, or done;
        return (last_own / "whoami.jsonl").exists() and any((h / "slow-began").exists() for h in slow_homes)

    # the copy in the middle of its first profile's events
    assert until(lambda: the_stop_finds_the_copy_at_work() or proc.poll() is not None, 120)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert not any("killed" in e or "second process" in e or "grace" in e for e in doc["errors"]), doc["errors"]
    reported = {r["home"] for r in doc["results"]}
    untouched = " ".join(w for w in doc["warnings"] if "not worked on" in w)
    for name in names:
        home = alice.root if name == "default" else alice.root / "profiles" / name
        assert str(home) in reported or f" {name}," in untouched or f" {name} not" in untouched, (name, doc)
    assert "p7" in untouched  # the copy's last profile never began
    assert root_owned(alice.root) == []


HELD = "import sys; from hermes_admin.holders import held_by_its_owner; print(held_by_its_owner(sys.argv[1]))"


def test_pacing_sees_her_own_hermes_and_never_counts_roots_processes(make_user, system_venv):
    """As the home's owner, the scan for a Hermes holding the store open skips the processes she may
    not inspect (root's, here holding her store too): every store counted as held before."""
    from tests.root.conftest import as_user

    alice = make_user("held")
    build_user_root(alice, {"default": 30})
    store = alice.root / "state.db"
    python = str(system_venv / "bin" / "python")
    roots_fd = os.open(store, os.O_RDONLY)  # a process of root's holds her store: not hers to see
    try:
        alone = as_user(alice, [python, "-c", HELD, str(store)])
        assert alone.returncode == 0 and alone.stdout.strip() == "False", alone.stderr
        holder = subprocess.Popen([python, "-c", f"import time; f = open({str(store)!r}, 'rb'); time.sleep(60)"],
                                  user=alice.uid, group=alice.gid, extra_groups=[], cwd=str(alice.home),
                                  env={"PATH": "/usr/bin:/bin"})
        try:
            for _ in range(100):  # until it has the file open
                if any(os.path.realpath(f"/proc/{holder.pid}/fd/{n}") == str(store)
                       for n in os.listdir(f"/proc/{holder.pid}/fd")):
                    break
                time.sleep(0.05)
            held = as_user(alice, [python, "-c", HELD, str(store)])
            assert held.returncode == 0 and held.stdout.strip() == "True", held.stderr
        finally:
            holder.kill()
            holder.wait()
    finally:
        os.close(roots_fd)


def old_store(user) -> Path:
    """Her WAL store of old sessions only, hers: a purge frees most of it, so VACUUM is worth it."""
    path = vacuum_worthy_store(user.root / "state.db", time.time())
    chown_tree(user.root, user)
    return path


@needs_host_pids
def test_roots_run_vacuums_her_store_unless_a_connection_holds_it(make_user, admin, system_venv):
    """As her, the other users' processes cannot be looked into; their SQLite connections still show
    by their locks on her WAL store. VACUUM never ran under the root timer before."""
    alice = make_user("vacuum")
    store = old_store(alice)
    code = ("import sqlite3, sys, time; c = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True); "
            "c.execute('SELECT COUNT(*) FROM sessions').fetchall(); print(1, flush=True); time.sleep(120)")
    holder = subprocess.Popen([str(system_venv / "bin" / "python"), "-c", code, str(store)],
                              stdout=subprocess.PIPE, text=True)  # root's, with her store open
    try:
        assert holder.stdout.readline().strip() == "1"
        held = admin("--root", str(alice.root), "purge", "--vacuum", "--json")
        assert held.returncode in (0, 1), held.stderr
        result = json.loads(held.stdout)["results"][0]
        assert result["rows"] == 300 and result["vacuumed"] is False
        assert any(f"pid {holder.pid}" in note for note in result["notes"]), result["notes"]
    finally:
        holder.kill()
        holder.wait()
    store.unlink()
    for sidecar in ("-wal", "-shm"):
        Path(f"{store}{sidecar}").unlink(missing_ok=True)
    old_store(alice)
    done = admin("--root", str(alice.root), "purge", "--vacuum", "--json")
    assert done.returncode in (0, 1), done.stderr
    result = json.loads(done.stdout)["results"][0]
    assert result["rows"] == 300 and result["vacuumed"] is True, result["notes"]
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # never changed
    conn.close()
    assert root_owned(alice.root) == []


def test_roots_compact_gives_back_her_rollback_journal_store_s_pages(make_user, admin):
    """As her, no other user's process can be looked into: `run` leaves the VACUUM of a store in a
    rollback journal (an idle connection there holds no lock) and says why; root's `compact --yes`
    is the word that those processes are not her Hermes, and the pages come back, the journal mode
    kept."""
    from tests.unit.test_compact import old_store as journal_store

    alice = make_user("compact")
    store = journal_store(alice.root / "state.db", time.time(), "delete")
    chown_tree(alice.root, alice)
    purged = admin("--root", str(alice.root), "purge", "--older-than", "90", "--vacuum", "--yes", "--json")
    assert purged.returncode in (0, 1), purged.stderr
    result = json.loads(purged.stdout)["results"][0]
    assert result["rows"] == 300 and result["vacuumed"] is False
    assert any("not looked into" in n and "hermes-admin compact" in n for n in result["notes"]), result["notes"]
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
    conn.close()
    size = store.stat().st_size
    done = admin("--root", str(alice.root), "compact", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["compacted"]
    assert row["given_back_bytes"] > 0 and row["not_looked_into"]
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # never changed
    conn.close()
    assert store.stat().st_size < size
    assert root_owned(alice.root) == []

"""Root decides from what concerns the profile at hand, and from root's own inputs: another user's
read-only descriptor of a victim's store, a FIFO at the metrics path and another user's HOME in
root's environment each play as a real local user would, with hermes-admin run AS ROOT after.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from tests.root.conftest import as_user
from tests.root.test_attacks import assert_maintained, explain, prepare, rows

VICTIM_CONNECTION = r'''
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("SELECT count(*) FROM sessions").fetchone()
print("open", flush=True)
sys.stdin.readline()
db.close()  # the last connection, as far as SQLite can tell: it checkpoints and deletes -wal and -shm
print("closed", flush=True)
'''

KEEP_READ_ONLY = r'''
import os, sys, time
fds = [os.open(path, os.O_RDONLY) for path in sys.argv[1:]]
print("ready", flush=True)
time.sleep(300)
'''


def _spawn(user, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                            env={"PATH": "/usr/bin:/bin", "HOME": str(user.home), "LANG": "C.UTF-8"},
                            user=user.uid, group=user.gid, extra_groups=[])


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_another_users_read_only_descriptors_of_a_deleted_wal_never_stop_her_maintenance(make_user, admin):
    """Attack: the victim's store is world-readable (Hermes 0.19 makes state.db, -wal and -shm 0644;
    many systems give homes 0755). Mallory opens the victim's -wal and -shm read-only and keeps them;
    the victim's last connection closes and SQLite deletes them. Root's run must still maintain the
    victim's profile: Mallory's process cannot write a page, so it is named (a warning), never a
    process "writing into a deleted state.db-wal"."""
    victim, mallory = make_user("victim"), make_user("mallory")
    kinds = prepare(victim)
    for folder in (victim.home, victim.root, victim.root / "profiles", victim.root / "profiles" / "work"):
        os.chmod(folder, 0o755)
    db = victim.root / "profiles" / "work" / "state.db"
    connection = _spawn(victim, ["/usr/bin/python3", "-c", VICTIM_CONNECTION, str(db)])
    keeper = None
    try:
        assert connection.stdout.readline().strip() == "open"
        for suffix in ("", "-wal", "-shm"):
            os.chmod(f"{db}{suffix}", 0o644)
        keeper = _spawn(mallory, ["/usr/bin/python3", "-c", KEEP_READ_ONLY, f"{db}-wal", f"{db}-shm"])
        assert keeper.stdout.readline().strip() == "ready"
        connection.stdin.write("close\n")
        connection.stdin.flush()
        assert connection.stdout.readline().strip() == "closed"
        assert not os.path.lexists(f"{db}-wal"), "SQLite kept the WAL: the scene is not played"
        links = [os.readlink(f"/proc/{keeper.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{keeper.pid}/fd")]
        assert f"{db}-wal (deleted)" in links

        listed = admin("--root", str(victim.root), "profiles", "--json")
        ran = admin("--root", str(victim.root), "run", "--yes", "--json")

        assert ran.returncode in (0, 1), explain(ran)
        report = json.loads(ran.stdout)
        assert not report["errors"], explain(ran)
        named = [p for p in report["problems"] if str(keeper.pid) in p["message"]]
        assert [(p["severity"], p["kind"], p["profile"]) for p in named] == [("warning", "foreign_reader", "work")]
        assert mallory.name in named[0]["message"] and "read-only" in named[0]["message"]
        assert_maintained(db.parent, kinds["work"], "the victim's work profile")
        assert listed.returncode in (0, 1), explain(listed)
        [row] = [r for r in json.loads(listed.stdout)["profiles"] if r["name"] == "work"]
        assert [(h["pid"], h["blocks_writes"], h["user"]) for h in row["broken_holds"]] == [
            (keeper.pid, False, mallory.name)]
    finally:
        _stop(connection)
        if keeper is not None:
            _stop(keeper)


def test_a_fifo_at_the_metrics_path_in_a_folder_she_may_write_never_hangs_roots_run(make_user, admin, tmp_path):
    """Attack: the metrics file is set in a folder a user may write; she puts a FIFO at its path
    (or a link to a FIFO of hers). Root's run must end within its bounds, say the metrics path is
    refused as a configuration error naming the config's line, and still have done the run."""
    import tempfile

    alice = make_user("alice")
    kinds = prepare(alice)
    folder = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-metrics-"))
    try:
        os.chown(folder, alice.uid, alice.gid)
        made = as_user(alice, ["/usr/bin/mkfifo", str(folder / "hermes.prom")])
        assert made.returncode == 0, made.stderr
        config = tmp_path / "admin.yaml"
        config.write_text(f"defaults: {{retention_days: 90}}\nmetrics_file: {folder}/hermes.prom\n")

        started = time.monotonic()
        ran = admin("--config", str(config), "--root", str(alice.root), "run", "--yes", timeout=120)
        took = time.monotonic() - started

        assert took < 100, explain(ran)
        assert ran.returncode == 2, explain(ran)
        lines = [line for line in ran.stderr.splitlines() if "metrics_file" in line]
        assert len(lines) == 1 and f"{config}:2:" in lines[0] and "refusing it as root" in lines[0], explain(ran)
        assert "the run was done" in lines[0]
        assert_maintained(alice.root, kinds["default"], "her default profile")
        assert stat.S_ISFIFO(os.lstat(folder / "hermes.prom").st_mode)  # nothing of root's was put there
        assert sorted(os.listdir(folder)) == ["hermes.prom"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_under_sudo_e_roots_run_keeps_to_roots_own_default_root(make_user, admin, tmp_path):
    """Attack: root runs hermes-admin with a user's HOME (`sudo -E`, `su` without `-`): root's run
    must work on root's own default root (by the password database), never on hers, and read no
    admin config or preset from her config folder."""
    import pwd

    alice = make_user("alice")
    kinds = prepare(alice)
    before = {p: p.stat().st_mtime_ns for p in alice.root.rglob("state.db*")}
    (alice.home / ".config" / "hermes-admin").mkdir(parents=True)
    (alice.home / ".config" / "hermes-admin" / "config.yaml").write_text("roots: [/nonexistent]\n")
    os.chown(alice.home / ".config", alice.uid, alice.gid)
    roots_own = Path(pwd.getpwuid(0).pw_dir) / ".hermes"
    env = {"HOME": str(alice.home), "XDG_CONFIG_HOME": str(alice.home / ".config"), "USER": alice.name}

    listed = admin("profiles", "--json", env=env)
    ran = admin("run", "--yes", "--json", env=env)

    for done in (listed, ran):
        assert "refusing it as root" not in done.stderr, explain(done)  # her config folder is not looked in
        said = json.loads(done.stdout)
        assert str(alice.root) not in done.stdout, explain(done)
        assert any(str(roots_own) in line for line in said["errors"]), explain(done)  # root's own, missing
    assert {p: p.stat().st_mtime_ns for p in alice.root.rglob("state.db*")} == before
    assert kinds  # her sessions, due or not, wait for her own run


def test_a_prefix_is_found_by_root_among_every_owners_ids_and_deleted_where_it_is(make_user, admin):
    """`sessions delete PREFIX` over two owners' roots: each worker lists its ids (none is told the
    prefix), root finds it in one profile of one owner, and only that session goes; `sessions show`
    then finds it in that owner's exports, again without telling any worker the id."""
    alice, bob = make_user("alice"), make_user("bob")
    now = time.time()
    mine = prepare(alice, now=now)
    prepare(bob, now=now - 7 * 3600)  # other times: other ids
    target = mine["work"]["recent"][0]
    prefix = target[:-3]
    bobs = {p: p.read_bytes() for p in bob.root.rglob("state.db")}
    roots = ("--root", str(alice.root), "--root", str(bob.root))

    done = admin(*roots, "sessions", "delete", prefix, "--yes", "--json")

    assert done.returncode in (0, 1), explain(done)
    report = json.loads(done.stdout)
    assert [r["home"] for r in report["results"] if r.get("rows")] == [str(alice.root / "profiles" / "work")]
    assert target not in rows(alice.root / "profiles" / "work" / "state.db")
    assert {p: p.read_bytes() for p in bob.root.rglob("state.db")} == bobs
    shown = admin(*roots, "sessions", "show", prefix)
    assert shown.returncode == 1 and f"{target}: deleted from profile" in shown.stdout, explain(shown)

"""Issue 37, as root over real users: every finding about a profile is that profile's, one user's
files never cost another's exports, and root decides from root's own inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.helpers import HOLD_DELETED as HOLD
from tests.root.conftest import build_user_root, chown_tree, root_owned


def _as(user, argv: list[str]) -> subprocess.Popen:
    """A process of hers, started as she would (her uid, her groups, a clean environment)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            user=user.uid, group=user.gid, extra_groups=[], cwd=str(user.home),
                            env={"PATH": "/usr/bin:/bin", "HOME": str(user.home), "LANG": "C.UTF-8"})
    line = proc.stdout.readline().strip()
    if line != "ready":
        proc.kill()
        raise AssertionError(f"the holder did not start: {proc.stderr.read()[-500:]}")
    return proc


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def _holds(done: subprocess.CompletedProcess) -> dict[str, list[int]]:
    assert done.stdout, done.stderr
    return {row["home"]: [h["pid"] for h in row["broken_holds"]] for row in json.loads(done.stdout)["profiles"]}


def test_a_forged_holder_in_her_private_namespace_is_not_bobs(make_user, admin):
    """She mounts a tmpfs over Bob's root in a namespace of her own (`unshare -rm`), deletes a
    `state.db-wal` there under a process named "hermes gateway run": root names nobody for Bob,
    and maintains his store."""
    if not shutil.which("unshare"):
        pytest.fail("unshare(1) is missing: the as-root tier needs util-linux")
    alice, bob = make_user("alice"), make_user("bob")
    build_user_root(bob, {"default": 30})
    os.chmod(bob.home, 0o755)  # she may look up the path to mount over it (not into his files)
    os.chmod(bob.root, 0o755)
    script = (f'mount -t tmpfs none "{bob.root}" && exec -a "hermes gateway run" /usr/bin/python3 -c \'{HOLD}\' '
              f'"{bob.root}/state.db-wal"')
    proc = _as(alice, ["unshare", "-rm", "bash", "-c", script])
    try:
        assert os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        assert os.readlink(f"/proc/{proc.pid}/fd/3").startswith(f"{bob.root}/state.db-wal")
        listed = admin("--root", str(bob.root), "profiles", "--json")
        assert listed.returncode in (0, 1), listed.stderr
        assert _holds(listed) == {str(bob.root): []}
        ran = admin("--root", str(bob.root), "run", "--yes")
        assert ran.returncode in (0, 1), ran.stderr
        assert str(proc.pid) not in ran.stderr + ran.stdout
    finally:
        _stop(proc)


def test_a_link_from_her_store_to_bobs_moves_no_finding(make_user, admin):
    """Bob's own process writes into his deleted WAL; her state.db is a link to his store. The
    finding is Bob's, named once, and stays Bob's whatever order the roots come in."""
    alice, bob = make_user("alice"), make_user("bob")
    build_user_root(alice, {"default": 30})
    build_user_root(bob, {"default": 30})
    for suffix in ("", "-wal", "-shm"):
        Path(f"{alice.root}/state.db{suffix}").unlink(missing_ok=True)
        os.symlink(f"{bob.root}/state.db{suffix}", f"{alice.root}/state.db{suffix}")
        os.lchown(f"{alice.root}/state.db{suffix}", alice.uid, alice.gid)
    proc = _as(bob, ["/usr/bin/python3", "-c", HOLD, f"{bob.root}/state.db-wal"])
    try:
        for roots in ((alice.root, bob.root), (bob.root, alice.root)):
            listed = admin(*(a for r in roots for a in ("--root", str(r))), "profiles", "--json")
            holds = _holds(listed)
            assert holds[str(bob.root)] == [proc.pid], listed.stderr
            assert holds.get(str(alice.root), []) == []
    finally:
        _stop(proc)


def test_exports_prune_never_removes_bobs_exports_for_her_forged_one(make_user, admin):
    """Her export: a sparse 1 TiB file whose manifest says it was made in the far future. A
    `--max-size` prune over everyone removes hers (her budget) and none of Bob's."""
    alice, bob = make_user("alice"), make_user("bob")
    for user in (alice, bob):
        build_user_root(user, {"default": 30})
        done = admin("--root", str(user.root), "purge", "--older-than", "90", "--yes")
        assert done.returncode in (0, 1), done.stderr
    (his,) = (bob.root / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    (hers,) = (alice.root / ".hermes-admin" / "exports").glob("*.jsonl.gz")
    manifest = Path(f"{hers}.json")
    head, *rest = manifest.read_text().splitlines()  # JSON lines: the header first, then members
    data = json.loads(head)
    data["created"] = 1e300
    manifest.write_text("\n".join([json.dumps(data), *rest]) + "\n")
    with open(hers, "r+b") as f:
        f.truncate(1 << 40)
    chown_tree(alice.root, alice)
    usage = admin("--root", str(alice.root), "exports", "list", "--json")
    assert json.loads(usage.stdout)["total_bytes"] < 1 << 30, usage.stdout  # allocated, not 1 TiB
    his_size = sum(os.stat(path).st_blocks * 512 for path in (his, f"{his}.json"))  # with its manifest
    pruned = admin("--root", str(alice.root), "--root", str(bob.root), "exports", "prune",
                   "--max-size", str(his_size), "--yes", "--json")
    assert pruned.returncode in (0, 1), pruned.stderr
    removed = {row["file"] for row in json.loads(pruned.stdout)["removed"]}
    assert str(his) not in removed and his.exists()
    assert removed <= {str(hers)}


def test_bundled_plugins_from_a_users_folder_are_ignored_as_root(make_user, admin):
    """`sudo -E` hands root her $HERMES_BUNDLED_PLUGINS: root warns and drops it, for every worker
    and its own profiles alike."""
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    folder = alice.home / "bundled"
    folder.mkdir()
    chown_tree(folder, alice)
    done = admin("--root", str(alice.root), "run", "--yes",
                 env={"HERMES_BUNDLED_PLUGINS": str(folder), "SUDO_USER": alice.name, "HOME": str(alice.home)})
    assert done.returncode in (0, 1), done.stderr
    assert "$HERMES_BUNDLED_PLUGINS ignored as root" in done.stderr


def test_roots_installation_cache_is_roots_whatever_home_says(make_user, admin, user_hermes):
    """`sudo -E`: HOME and XDG_CACHE_HOME are hers, and she put a link where the cache would go.
    Root probes its own root's installation and keeps the answer in root's own home; her link and
    what it leads to stay as they were, and her home holds nothing of root's."""
    alice = make_user("alice")
    build_user_root(alice, {"default": 30})
    cache = alice.home / ".cache" / "hermes-admin"
    cache.mkdir(parents=True)
    target = alice.home / "target"
    target.write_text("hers\n")
    (cache / "hermes-installations.json").symlink_to(target)
    chown_tree(alice.home / ".cache", alice)
    os.lchown(target, alice.uid, alice.gid)
    place = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-rootroot-"))
    try:
        os.chmod(place, 0o700)
        from hermes_admin.synth.scenario import build_root

        build_root(place / ".hermes", {"default": 30}, now=1.7e9)
        config = place / "config.yaml"
        config.write_text(yaml.safe_dump({"hermes_python": str(user_hermes / "bin" / "python")}))
        done = admin("--root", str(place / ".hermes"), "run", "--yes",
                     env={"HOME": str(alice.home), "XDG_CACHE_HOME": str(alice.home / ".cache"),
                          "HERMES_ADMIN_CONFIG": str(config)})
        assert done.returncode in (0, 1), done.stderr
        assert (cache / "hermes-installations.json").is_symlink() and target.read_text() == "hers\n"
        assert root_owned(alice.home) == []
        mine = Path("/root/.cache/hermes-admin/hermes-installations.json")
        assert str(user_hermes / "bin" / "python") in json.loads(mine.read_text())
    finally:
        shutil.rmtree(place, ignore_errors=True)


FLOOD = r'''
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
for n in range(int(sys.argv[2])):  # byte ranges apart from each other: one line of /proc/locks each
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * n)
print("ready", flush=True)
import time
time.sleep(300)
'''


@pytest.mark.alone  # every holder scan on the machine meets her 25 000 locks meanwhile
def test_a_lock_table_she_floods_costs_one_line_and_bob_is_maintained(make_user, admin):
    """She takes 25 000 POSIX locks on a file of hers: every read of /proc/locks meets them. The
    scan (asked before a VACUUM: nobody else may hold the store) gives up at its bound and says so;
    who holds Bob's store is then unknown, so his store is not vacuumed, and both roots are
    maintained in bounded time."""
    import time

    from tests.helpers import row_ids

    alice, bob = make_user("alice"), make_user("bob")
    for user in (alice, bob):
        build_user_root(user, {"default": 30})
    before = row_ids(bob.root / "state.db")
    flood = _as(alice, ["/usr/bin/python3", "-c", FLOOD, str(alice.home / "locks"), "25000"])
    try:
        started = time.monotonic()
        done = admin("--root", str(alice.root), "--root", str(bob.root), "purge", "--older-than", "90",
                     "--vacuum", "--yes", "--json")
        took = time.monotonic() - started
    finally:
        _stop(flood)
    assert done.returncode in (0, 1), done.stderr
    assert took < 60, f"{took:.0f} s"
    assert row_ids(bob.root / "state.db") < before  # his old sessions went
    results = [r for r in json.loads(done.stdout)["results"] if r["home"] == str(bob.root)]
    assert results and not any(r["vacuumed"] for r in results)
    notes = [n for r in results for n in r["notes"] if "/proc/locks holds more than" in n]
    assert len(notes) == 1, results


def test_hermes_python_keyed_by_her_root_never_runs_as_bob_through_her_link(make_user, admin):
    """The admin config names an interpreter for her root; she makes that root a link to Bob's.
    Keys are compared as spelled, never through links: her program never runs as Bob."""
    alice, bob = make_user("alice"), make_user("bob")
    build_user_root(bob, {"default": 30})
    marker = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-ran-"))
    os.chmod(marker, 0o1777)
    python = alice.home / "py" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ntouch {marker}/as-$(id -u)\nexec /usr/bin/python3 \"$@\"\n")
    python.chmod(0o755)
    chown_tree(alice.home / "py", alice)
    if os.path.lexists(alice.root):
        shutil.rmtree(alice.root)
    os.symlink(bob.root, alice.root)  # what she can do in her own home
    os.lchown(alice.root, alice.uid, alice.gid)
    place = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="ha-config-"))
    try:
        os.chmod(place, 0o700)
        config = place / "config.yaml"
        config.write_text(yaml.safe_dump({"hermes_python": {str(alice.root): str(python)}}))
        done = admin("--root", str(bob.root), "run", "--yes", env={"HERMES_ADMIN_CONFIG": str(config)})
        assert done.returncode in (0, 1, 2), done.stderr
        assert not (marker / f"as-{bob.uid}").exists(), "her interpreter ran as Bob"
        assert not (marker / "as-0").exists(), "her interpreter ran as root"
    finally:
        shutil.rmtree(place, ignore_errors=True)
        shutil.rmtree(marker, ignore_errors=True)


SAME_INODE = r'''
import fcntl, os, sys
place, wanted = sys.argv[1], int(sys.argv[2])
for n in range(100_000):  # a fresh tmpfs numbers its files from 2 up: reach the number of his store
    fd = os.open(f"{place}/f{n}", os.O_RDWR | os.O_CREAT, 0o600)
    if os.fstat(fd).st_ino == wanted:
        break
    os.close(fd)
else:
    sys.exit(f"never reached inode {wanted}")
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("ready", flush=True)
import time
time.sleep(300)
'''


def test_a_lock_on_her_file_with_bobs_inode_number_does_not_hold_his_store(make_user, admin):
    """Bob's root is on a filesystem of its own (a tmpfs root mounts), so his store's inode number
    is small; in a mount namespace of her own she makes a tmpfs, creates files until one has that
    same number, and holds a POSIX write lock on it. /proc/locks then shows a lock on an inode of
    that number on another device: root still takes Bob's store as free, and vacuums it."""
    if not shutil.which("unshare"):
        pytest.fail("unshare(1) is missing: the as-root tier needs util-linux")
    alice, bob = make_user("alice"), make_user("bob")
    bob.root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700", "hermes-admin-test", str(bob.root)], check=True)
    holder = None
    try:
        build_user_root(bob, {"default": 30})
        wanted = os.stat(bob.root / "state.db").st_ino
        (alice.home / "t").mkdir()
        chown_tree(alice.home / "t", alice)
        script = (f'mount -t tmpfs none "{alice.home}/t" && exec /usr/bin/python3 -c \'{SAME_INODE}\' '
                  f'"{alice.home}/t" {wanted}')
        holder = _as(alice, ["unshare", "-rm", "bash", "-c", script])
        bobs = os.stat(bob.root / "state.db")
        forged = [line for line in Path("/proc/locks").read_text().splitlines()
                  if f" {holder.pid} " in line and line.split()[5].endswith(f":{wanted}")]
        assert forged and not forged[0].split()[5].startswith(
            f"{os.major(bobs.st_dev):02x}:{os.minor(bobs.st_dev):02x}:"), forged
        done = admin("--root", str(bob.root), "purge", "--older-than", "90", "--vacuum", "--yes", "--json")
        assert done.returncode in (0, 1), done.stderr
        results = [r for r in json.loads(done.stdout)["results"] if r["home"] == str(bob.root)]
        assert results and any(r["vacuumed"] for r in results), results
        assert str(holder.pid) not in done.stdout + done.stderr
    finally:
        if holder is not None:
            _stop(holder)
        subprocess.run(["umount", "-l", str(bob.root)], check=False)

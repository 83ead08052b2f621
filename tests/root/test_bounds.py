"""Root's run is nobody's to stop: a user who stops her own worker, or leaves a FIFO or a file of
another shape where root's workers read, costs the run at most a deadline and one line; every
other user's profiles are maintained in the same run, and no command exits 70 (issue 37)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from tests.root.conftest import chown_tree, root_owned
from tests.root.test_attacks import STANDARD, admin, assert_maintained, explain, prepare  # noqa: F401

IDLE = 3  # the tests' worker_idle_timeout: seconds


def _roots(*users) -> list[str]:
    """Their roots named (not `--all-users`: other users of this host are none of this test's)."""
    return [arg for user in users for arg in ("--root", str(user.root))]


def _config(tmp_path: Path) -> str:
    path = tmp_path / "admin.yaml"
    path.write_text(f"defaults:\n  worker_idle_timeout: {IDLE}\n  worker_timeout: 120\n")
    os.chmod(path, 0o600)
    return str(path)


def processes_of(user, named: bytes) -> list[int]:
    """The pids of `user`'s processes whose command line holds `named`. By their real uid: a worker
    is never dumpable, so its /proc folder is root's whoever it runs as."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as status:
                uids = next(line for line in status if line.startswith(b"Uid:")).split()
            if int(uids[1]) != user.uid:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as source:
                if named in source.read():
                    found.append(int(name))
        except (OSError, StopIteration):
            continue
    return found


def _workers_of(user) -> list[int]:
    """The pids of hermes-admin workers running as `user` (their command line names the module)."""
    return processes_of(user, b"hermes_admin.profile.worker")


def stopping_her_workers(user, stopped: list[int]) -> threading.Thread:
    """As she could (her worker runs as her): SIGSTOP each worker of hers as soon as it appears,
    for up to 60 s, on a thread already started; the pids stopped go into `stopped`."""
    def stop_hers():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stopped:
            for pid in _workers_of(user):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            time.sleep(0.002)

    stopper = threading.Thread(target=stop_hers)
    stopper.start()
    return stopper


def test_a_worker_its_owner_stops_costs_the_run_its_deadline(make_user, admin, tmp_path):
    """She SIGSTOPs her own worker (she may: it is hers) during root's run over every root: the run
    ends within the idle deadline, her profiles get one line each, Bob's are maintained; exit 2."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = {user.name: prepare(user) for user in (alice, bob)}
    stopped: list[int] = []
    stopper = stopping_her_workers(alice, stopped)
    started = time.monotonic()
    done = admin(*_roots(alice, bob), "--config", _config(tmp_path), "run", "--yes", timeout=120)
    took = time.monotonic() - started
    stopper.join()

    assert stopped, "her worker was never seen"
    assert done.returncode == 2, explain(done)
    assert took < 60, explain(done)
    lines = [line for line in done.stderr.splitlines() if "gave no sign of life" in line]
    assert lines and all(alice.name in line for line in lines), explain(done)
    for name in kinds[bob.name]:
        home = bob.root if name == "default" else bob.root / "profiles" / name
        assert_maintained(home, kinds[bob.name][name], f"bob's {name}")
    for pid in stopped:
        assert not Path(f"/proc/{pid}/cmdline").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert root_owned(alice.home) == [] and root_owned(bob.home) == []


def test_fifos_at_her_manifest_and_run_record_are_one_line_each(make_user, admin, tmp_path):
    """A FIFO where root's workers read an export manifest and last-run.json: `status`, `exports
    list`, `exports prune` and the run itself each end promptly, naming the file; Bob's run goes on."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = {user.name: prepare(user) for user in (alice, bob)}
    state = alice.root / ".hermes-admin"
    exports = state / "exports"
    exports.mkdir(parents=True)
    os.mkfifo(state / "last-run.json")
    (exports / "20260101T000000Z-trap.jsonl.gz").write_bytes(b"")
    os.mkfifo(exports / "20260101T000000Z-trap.jsonl.gz.json")
    chown_tree(alice.root, alice)
    config = _config(tmp_path)

    for args in (["status"], ["exports", "list"], ["exports", "prune", "--older-than", "1d", "--yes"]):
        started = time.monotonic()
        done = admin(*_roots(alice, bob), "--config", config, *args, timeout=60)
        assert time.monotonic() - started < 30, explain(done)
        assert done.returncode in (0, 1), explain(done)
        assert "not a plain file (a FIFO)" in done.stderr, explain(done)

    done = admin(*_roots(alice, bob), "--config", config, "run", "--yes", timeout=120)
    assert done.returncode in (0, 1, 2), explain(done)
    assert "Traceback" not in done.stderr
    for name in kinds[bob.name]:
        home = bob.root if name == "default" else bob.root / "profiles" / name
        assert_maintained(home, kinds[bob.name][name], f"bob's {name}")
    assert root_owned(alice.home) == []


def test_files_of_another_shape_never_make_a_command_exit_70(make_user, admin, tmp_path):
    """A last-run.json and export manifests of any shape, and a store row started in 1e300:
    `status`, `exports list|prune`, `profiles`, `sessions list` report and go on."""
    import sqlite3

    alice, bob = make_user("alice"), make_user("bob")
    for user in (alice, bob):
        prepare(user)
    state = alice.root / ".hermes-admin"
    exports = state / "exports"
    exports.mkdir(parents=True)
    (state / "last-run.json").write_text(json.dumps({
        "format": 1, "started": 1e300, "finished": "yesterday", "seconds": float("nan"), "result": ["ok"],
        "changed": {"purge": {"rows": 1e300}}, "errors": [[[[]]]], "last_error": {"at": -1, "message": {}}}))
    shapes = [
        {"format": 1, "home": str(alice.root), "created": 1e300, "members": []},
        {"format": 2, "home": ["x"], "created": "soon", "members": [{"offset": -1}]},
        json.loads('[' * 50 + '1' + ']' * 50),
    ]
    for n, shape in enumerate(shapes):
        (exports / f"2026010{n + 1}T000000Z-odd.jsonl.gz").write_bytes(b"")
        (exports / f"2026010{n + 1}T000000Z-odd.jsonl.gz.json").write_text(json.dumps(shape))
    (exports / "20260109T000000Z-deep.jsonl.gz").write_bytes(b"")
    (exports / "20260109T000000Z-deep.jsonl.gz.json").write_text("[" * 100000 + "]" * 100000)
    db = sqlite3.connect(alice.root / "state.db")  # before it is hers again: no root-owned file stays
    db.execute("UPDATE sessions SET started_at = 1e300 WHERE rowid = (SELECT min(rowid) FROM sessions)")
    db.commit()
    db.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{alice.root / 'state.db'}{suffix}"):
            os.unlink(f"{alice.root / 'state.db'}{suffix}")
    chown_tree(alice.root, alice)
    config = _config(tmp_path)

    for args in (["status"], ["status", "--json"], ["exports", "list"], ["exports", "list", "--json"],
                 ["exports", "prune", "--older-than", "1d", "--yes"], ["profiles"], ["profiles", "--json"],
                 ["sessions", "list"], ["sessions", "list", "--json"]):
        done = admin(*_roots(alice, bob), "--config", config, *args, timeout=60)
        assert done.returncode != 70 and "Traceback" not in done.stderr, (args, explain(done))
    assert root_owned(alice.home) == []

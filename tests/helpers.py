"""Helpers shared by the engine and hook tests."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from hermes_admin.holders import in_the_host_pid_namespace

# In a pid namespace of its own (a container) the holder scan answers "unknown" by design: a Hermes
# outside would be seen by no table there, so VACUUM and the index rebuild never run.
HOST_PIDS = in_the_host_pid_namespace()
needs_host_pids = pytest.mark.skipif(not HOST_PIDS, reason="a pid namespace of its own: the holder scan "
                                     "answers unknown by design (VACUUM and the index rebuild never run)")



class Ticks:
    """A clock that moves `tick` seconds at each reading, never with the wall (safe across threads:
    the export and checkpoint threads may read it too)."""

    def __init__(self, tick: float):
        self.tick, self._readings = tick, itertools.count()

    def __call__(self) -> float:
        return next(self._readings) * self.tick


def never_blocks(call, bound_s: float = 30.0):
    """`call()` on a thread: what it returns, or what it raises raised here. Still blocked after
    `bound_s` (a guard against a hang, far past any machine's slowness), it fails the test instead of
    hanging the suite."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # raised again in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"still blocked after {bound_s:g} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def until(condition, seconds: float = 60.0, every: float = 0.01) -> bool:
    """Does `condition()` come true within `seconds`? What a test waits on instead of a fixed sleep:
    it goes on as soon as the other process got there, and the bound only ends a broken wait (far
    past any machine's slowness; never a measure of speed)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


class SleepClock:
    """A clock that moves only when something sleeps on it (`sleep`): what a wait would last is
    `slept`, the same on any machine, however loaded."""

    def __init__(self, start: float = 100.0):
        self.now, self.sleeps = start, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    @property
    def slept(self) -> float:
        return sum(self.sleeps)


def engine_steps(monkeypatch, weight: int, tick: float = 0.1) -> None:
    """Every engine transaction after the first carries at most `weight` (and at least one row),
    whatever this machine's speed or load: the engine's pacing reads a clock on which each
    transaction holds the lock one tick, longer than the pacer ever aims at, so it gives the next
    its least weight (MIN_WEIGHT, here `weight`). The first carries what the pacer starts with."""
    from hermes_admin.profile.engine import engine, pacer
    from hermes_admin.profile.engine.turns import Turns

    assert tick > max(pacer.TARGET_HOLD_S, pacer.IDLE_HOLD_S, pacer.ALONE_HOLD_S)
    monkeypatch.setattr(pacer, "MIN_WEIGHT", weight)
    ticks = Ticks(tick)

    class Ticked(Turns):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, clock=ticks, **kwargs)

    monkeypatch.setattr(engine, "Turns", Ticked)


def someone_about(monkeypatch) -> None:
    """The engine paces as beside a Hermes that holds the store open (its careful transactions,
    FTS5 merging in steps of its own), as a home's owner's gateway would: the tests of that pacing
    run on stores nobody else holds."""
    from hermes_admin.profile.engine import turns

    monkeypatch.setattr(turns, "held_by_its_owner", lambda store: True)
    monkeypatch.setattr(turns, "held_by_nobody_else", lambda store, wal: False)


TEST_PLUGINS = Path(__file__).parent / "plugins"
SHIPPED_PLUGINS = Path(__file__).parent.parent / "plugins"


def install_plugins(home: Path, installed: list[str], enabled: list[str], timeout: float | None = None,
                    disabled: list[str] = ()) -> None:
    """Copy plugins into a profile home and write its config.yaml's plugins section."""
    for name in installed:
        source = SHIPPED_PLUGINS / name if (SHIPPED_PLUGINS / name).is_dir() else TEST_PLUGINS / name
        shutil.copytree(source, home / "plugins" / name, dirs_exist_ok=True)
    config_path = home / "config.yaml"
    config = (yaml.safe_load(config_path.read_text()) if config_path.exists() else None) or {}
    config["plugins"] = {"enabled": list(enabled), "disabled": list(disabled)}
    if timeout is not None:
        config["plugins"]["hook_callback_timeout"] = timeout
    config_path.write_text(yaml.safe_dump(config))


def events(home: Path, name: str = "recorded-events.jsonl") -> list[dict]:
    path = home / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def home_of(root: Path, profile: str) -> Path:
    return root if profile == "default" else root / "profiles" / profile


def row_ids(db: Path, sql: str = "SELECT id FROM sessions") -> set[str]:
    import sqlite3
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute(sql)}
    finally:
        conn.close()


def expected_after_run(k: dict[str, list[str]]) -> dict[str, set[str]]:
    """What `run` under the standard policy (retention 90 d, auto-archive 30 d) does to the
    standard scenario's kinds: the sessions it deletes, keeps, and archives."""
    return {
        "gone": set(k["old_ended"] + k["old_archived"] + k["delegate_parent"] + k["delegate_child"]
                    + k["empty_ended"] + k["tui_ghost"]),
        "kept": set(k["recent"] + k["inactive"] + k["old_open"] + k["revived"] + k["empty_open"] + k["lineage"]
                    + k["just_ended_empty"] + k["locked_old"] + k["keyed"] + k.get("pinned_old", [])
                    + k.get("heartbeat_recent", [])),
        "archived": set(k["inactive"] + k["old_open"]),  # not the locked one: a live conversation is not idle
    }


def untouched_by_dry_run(invoke, root: Path, names: list[str], digest) -> dict:
    """`run --dry-run` changes no store and no sessions/ folder, and fires nothing."""
    before = digest(root)
    listing = {n: sorted(os.listdir(home_of(root, n) / "sessions")) for n in names}
    dry = invoke("--root", str(root), "run", "--dry-run", "--json")
    assert dry.exit_code == 2  # the garbage profile
    assert digest(root) == before
    assert {n: sorted(os.listdir(home_of(root, n) / "sessions")) for n in names} == listing
    assert all(events(home_of(root, n)) == [] for n in names)
    return json.loads(dry.stdout)


def vacuum_worthy_store(path: Path, now: float, sessions: int = 300, journal: str = "wal") -> Path:
    """A store of old ended sessions only (as Hermes leaves it), in `journal` (WAL, or a rollback
    journal: "delete"): a purge frees most of its pages."""
    from hermes_admin.synth.builder import SynthStore

    store = SynthStore(path, version=30, journal=journal)
    for i in range(sessions):
        sid = f"s{i:03d}"
        store.session(sid, started=now - 200 * 86400, ended=now - 199 * 86400, end_reason="x")
        store.messages(sid, 10, now - 200 * 86400, text="padding " * 50)
    store.close()
    return path


def own_interpreter(tmp_path: Path) -> list[str]:
    """`--config` of an admin config that runs plugins in hermes-admin's own interpreter on purpose
    (`hermes_python: hermes-admin`): the unit tier has no Hermes installation, and says so."""
    path = tmp_path / "own-interpreter.yaml"
    path.write_text("hermes_python: hermes-admin\n")
    return ["--config", str(path)]


# A process that holds a file deleted under it (argv[1]: its path), as Hermes holds a WAL removed
# by a careless close, until it is killed (after 120 s at most).
HOLD_DELETED = r'''
import os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b"x" * 4096)
os.unlink(path)
print("ready", flush=True)
time.sleep(120)
'''


def other_connection(path, timeout: float = 5.0):
    """Another program's connection to a store, made in this process: on the SQLite hermes-admin
    uses (apsw's), so that their locks meet. Two copies of SQLite in one process never see each
    other's locks (POSIX locks belong to the process), so a holder on Python's own sqlite3 would
    hold nothing against an in-process run of ours. Autocommit unless it says BEGIN."""
    from tests import one_sqlite

    return one_sqlite.connect(path, timeout=timeout, isolation_level=None)

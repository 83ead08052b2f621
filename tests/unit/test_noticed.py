"""Deletions made outside hermes-admin, announced (engine/noticed.py): the rule as tables, then runs
over synthetic stores with the recorder plugin (the real releases' own deletes: tests/compat/)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_admin.model import Profile
from hermes_admin.profile.engine import noticed, outbox
from hermes_admin.profile.engine.noticed import Look, Mark
from hermes_admin.synth.builder import SynthStore
from tests.helpers import events, install_plugins, own_interpreter, row_ids

DAY = 86400.0


def marks(**rows) -> dict[str, Mark]:
    """sid=(parent, ended, days idle) -> a look's sessions, at NOW = 1000 days."""
    return {sid: Mark(parent, ended, 1000 * DAY - idle * DAY) for sid, (parent, ended, idle) in rows.items()}


AT = 1000 * DAY


@pytest.mark.parametrize("before, now, own, expected", [
    # nothing gone
    (marks(a=(None, True, 1)), {"a"}, set(), []),
    # one session gone: recently active, so not retention's
    (marks(a=(None, True, 1), b=(None, True, 1)), {"a"}, set(), [("b", ("b",), "delete")]),
    # idle past retention (90 days) and ended: Hermes' prune
    (marks(a=(None, True, 200)), set(), set(), [("a", ("a",), "prune")]),
    # open at the last look: never a prune
    (marks(a=(None, False, 200)), set(), set(), [("a", ("a",), "delete")]),
    # our own deletes are not announced again
    (marks(a=(None, True, 1), b=(None, True, 1)), set(), {"a"}, [("b", ("b",), "delete")]),
    # a lineage gone together: one event, its root the head
    (marks(r=(None, True, 200), c1=("r", True, 200), c2=("c1", True, 200)), set(), set(),
     [("r", ("r", "c1", "c2"), "prune")]),
    # a child gone while its parent stays: its own event
    (marks(p=(None, True, 1), c=("p", True, 1)), {"p"}, set(), [("c", ("c",), "delete")]),
    # one member recent: the whole group is a delete
    (marks(r=(None, True, 200), c=("r", True, 1)), set(), set(), [("r", ("r", "c"), "delete")]),
    # a loop of parent links ends
    (marks(x=("y", True, 1), y=("x", True, 1)), set(), set(), [("x", ("x", "y"), "delete")]),
])
def test_gone_grouping_and_reason(before, now, own, expected):
    found = noticed.gone(before, now, own, AT, 90)
    assert [(g.session_id, g.ids, g.reason) for g in found] == expected


def test_pack_round_trip_and_size():
    ids = [f"20261201_{i:06d}_{i * 7919 % 1000000:06x}" for i in range(30000)]
    rows = [(sid, ids[i - 1] if i % 3 == 0 and i else None, bool(i % 2), 1.7e9 + i) for i, sid in enumerate(ids)]
    rows.append(("dangling", "no-such-parent", True, 1.7e9))
    sessions = noticed.Sessions.of(reversed(rows))
    blob = noticed.pack(sessions)
    back = noticed.unpack(blob)
    assert list(back) == sorted(sid for sid, *_ in rows) and len(back) == len(rows)
    assert all(back[sid] == Mark(parent if parent != "no-such-parent" else None, ended, active)
               for sid, parent, ended, active in rows)
    assert "nope" not in back and "dangling" in back
    assert len(blob) < 30000 * 12  # tens of thousands of sessions cost a few hundred kB at most
    assert noticed.unpack(b"not zlib") is None


def test_same_store():
    look = Look(0.0, 1, 2, marks(a=(None, True, 1)))
    assert noticed.same_store(look, 1, 2, set())  # the same file, all of it gone
    assert noticed.same_store(look, 1, 3, {"a", "z"})  # another file holding its sessions: a copy put back
    assert not noticed.same_store(look, 1, 3, {"z"})  # another file, other sessions: a new memory


# -- runs over a synthetic store ---------------------------------------------------

@pytest.fixture
def home(tmp_path, now):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    for sid in ("a", "b", "c", "d"):
        store.session(sid, started=now - 3 * DAY, ended=now - 2 * DAY, end_reason="x")
        store.messages(sid, 3, now - 3 * DAY)
    store.session("old", started=now - 300 * DAY, ended=now - 299 * DAY, end_reason="x")
    store.messages("old", 2, now - 300 * DAY)
    store.session("old-child", started=now - 299 * DAY, ended=now - 298 * DAY, end_reason="x", parent="old")
    store.messages("old-child", 2, now - 299 * DAY)
    store.close()
    install_plugins(root, ["recorder"], enabled=["recorder"])
    return root


def hermes_deletes(db: Path, *ids: str) -> None:
    """As Hermes' own delete does it: children orphaned, messages and the row gone; no hook."""
    conn = sqlite3.connect(db)
    with conn:
        for sid in ids:
            conn.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", (sid,))
            conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (sid,))
    conn.close()


def run(invoke, tmp_path, root, *more):
    return invoke(*own_interpreter(tmp_path), "--root", str(root), *more, "run")


def test_first_run_announces_nothing_then_each_gone_once(home, invoke, tmp_path):
    first = run(invoke, tmp_path, home, "-v")
    assert first.exit_code in (0, 1), first.output
    assert events(home) == []
    assert outbox.Outbox(Profile(home, "default", home)).look() is not None  # the first look, kept
    hermes_deletes(home / "state.db", "a", "old", "old-child")
    second = run(invoke, tmp_path, home, "-v")
    assert "2 unit(s), 3 session(s) deleted outside hermes-admin" in second.output, second.output
    got = sorted((e["session_id"], e["reason"], e["deleted_ids"]) for e in events(home))
    assert got == [("a", "delete", None), ("old", "prune", ["old", "old-child"])]
    assert {e["profile"] for e in events(home)} == {"default"}
    assert {e["sessions_dir"] for e in events(home)} == {str(home / "sessions")}
    run(invoke, tmp_path, home)
    assert len(events(home)) == 2  # announced once


def test_own_deletes_are_not_announced_again(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    invoke(*own_interpreter(tmp_path), "--root", str(home), "sessions", "delete", "b", "--yes")
    hermes_deletes(home / "state.db", "c")
    run(invoke, tmp_path, home)
    assert [(e["session_id"], e["reason"]) for e in events(home)] == [("b", "delete"), ("c", "delete")]


def test_own_deletes_without_listeners_are_remembered(home, invoke, tmp_path):
    """A delete of ours while no plugin listened (safe mode) is still ours at the next look."""
    run(invoke, tmp_path, home)
    config = home / "config.yaml"
    saved = config.read_text()
    install_plugins(home, [], enabled=[])
    invoke(*own_interpreter(tmp_path), "--root", str(home), "sessions", "delete", "b", "--yes")
    config.write_text(saved)
    run(invoke, tmp_path, home)
    assert events(home) == []


def test_restored_session_is_not_gone(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    copy = home.parent / "copy.db"
    shutil.copy(home / "state.db", copy)
    hermes_deletes(home / "state.db", "a")
    conn = sqlite3.connect(home / "state.db")  # put back, as a restore from a backup would
    conn.execute("ATTACH ? AS b", (str(copy),))
    with conn:
        conn.execute("INSERT INTO sessions SELECT * FROM b.sessions WHERE id = 'a'")
        conn.execute("INSERT INTO messages SELECT * FROM b.messages WHERE session_id = 'a'")
    conn.close()
    run(invoke, tmp_path, home)
    assert events(home) == []


def test_replaced_store_starts_a_new_memory(home, invoke, tmp_path, now):
    run(invoke, tmp_path, home)
    other = SynthStore(home.parent / "other" / "state.db", version=30)
    other.session("z", started=now - DAY, ended=now - DAY / 2, end_reason="x")
    other.messages("z", 2, now - DAY)
    other.close()
    os.replace(home.parent / "other" / "state.db", home / "state.db")
    for side in ("-wal", "-shm"):
        if (home / f"state.db{side}").exists():
            os.remove(home / f"state.db{side}")
    out = run(invoke, tmp_path, home, "-v")
    assert events(home) == []
    assert "another file than at the last look" in out.output
    hermes_deletes(home / "state.db", "z")
    run(invoke, tmp_path, home)
    assert [e["session_id"] for e in events(home)] == ["z"]


def test_policy_key_off_keeps_no_memory(home, invoke, tmp_path):
    config = tmp_path / "admin.yaml"
    config.write_text("hermes_python: hermes-admin\ndefaults: {announce_hermes_deletes: false}\n")
    invoke("--config", str(config), "--root", str(home), "run")
    hermes_deletes(home / "state.db", "a")
    invoke("--config", str(config), "--root", str(home), "run")
    assert events(home) == []
    assert outbox.Outbox(Profile(home, "default", home)).look() is None


def test_sessions_show_says_deleted_outside(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    hermes_deletes(home / "state.db", "d")
    run(invoke, tmp_path, home)
    shown = invoke(*own_interpreter(tmp_path), "--root", str(home), "sessions", "show", "d")
    assert "deleted outside hermes-admin" in shown.output, shown.output
    assert "noticed" in shown.output
    as_json = invoke(*own_interpreter(tmp_path), "--root", str(home), "sessions", "show", "d", "--json")
    document = json.loads(as_json.stdout)
    assert document["noticed"][0]["session_id"] == "d"
    assert document["noticed"][0]["reason"] == "delete"
    assert "d" not in row_ids(home / "state.db")


@pytest.mark.parametrize("hooks, told", [(None, None), (["on_session_end"], False),
                                         (["on_session_end", "on_session_delete"], True)])
def test_the_probe_tells_whether_hermes_fires_the_hook_itself(tmp_path, monkeypatch, hooks, told):
    from hermes_admin.profile import installation
    from tests.unit.test_installation import fake_hermes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "h"
    root.mkdir()
    fake_hermes(root / "hermes-agent" / "venv", hooks=hooks)
    found = installation.Installations().for_profile(Profile(root, "default", root)).installation
    assert found.delete_hook is told


def test_a_hermes_that_fires_the_hook_itself_is_not_announced_for(home, invoke, tmp_path, monkeypatch):
    from tests.unit.test_installation import fake_hermes

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    python = fake_hermes(tmp_path / "venv", hooks=["on_session_delete"])
    config = tmp_path / "admin.yaml"
    config.write_text(f"hermes_python: {python}\n")
    invoke("--config", str(config), "--root", str(home), "run")  # no look kept: nothing to compare with later
    assert outbox.Outbox(Profile(home, "default", home)).look() is None
    hermes_deletes(home / "state.db", "a")
    done = invoke("--config", str(config), "--root", str(home), "run", "--json")
    document = json.loads(done.stdout)
    assert document["policies"][str(home)]["hermes"]["installation"]["delete_hook"] is True
    assert not [r for r in document["results"] if r["action"] == "noticed"]
    assert events(home) == []


def test_a_session_we_deleted_and_restored_is_announced_when_hermes_deletes_it(home, invoke, tmp_path):
    given = [*own_interpreter(tmp_path), "--root", str(home)]
    run(invoke, tmp_path, home)
    invoke(*given, "sessions", "delete", "b", "--yes")
    export = json.loads(invoke(*given, "exports", "list", "--json").stdout)
    (item,) = export["exports"]
    assert invoke(*given, "restore", item["id"], "--yes").exit_code in (0, 1)
    assert "b" in row_ids(home / "state.db")
    hermes_deletes(home / "state.db", "b")
    run(invoke, tmp_path, home)
    assert [(e["session_id"], e["reason"]) for e in events(home)] == [("b", "delete"), ("b", "delete")]


def test_a_run_killed_before_delivering_them_delivers_them_next_time_once(home, invoke, tmp_path):
    import subprocess
    import sys

    from tests.unit.test_outbox_and_plugins import KILLER

    run(invoke, tmp_path, home)
    hermes_deletes(home / "state.db", "a")
    env = dict(os.environ, HERMES_ADMIN_CONFIG="")
    killed = subprocess.run([sys.executable, "-c", KILLER, "after-commit", *own_interpreter(tmp_path),
                             "--root", str(home), "run"], env=env, capture_output=True)
    assert killed.returncode == -9  # the events and the new look committed, nothing delivered yet
    assert events(home) == []
    run(invoke, tmp_path, home)
    run(invoke, tmp_path, home)
    assert [(e["session_id"], e["reason"]) for e in events(home)] == [("a", "delete")]


def test_a_dry_run_says_what_the_run_announces_and_announces_nothing(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    hermes_deletes(home / "state.db", "a", "old", "old-child")
    look = outbox.Outbox(Profile(home, "default", home)).look()
    dry = invoke(*own_interpreter(tmp_path), "--root", str(home), "run", "--dry-run", "--json")
    planned = [r for r in json.loads(dry.stdout)["results"] if r["action"] == "noticed"]
    assert [(d["session_id"], d["ids"]) for r in planned for d in r["done"]] == [("a", ["a"]),
                                                                                 ("old", ["old", "old-child"])]
    assert all(r["dry_run"] for r in planned)
    assert events(home) == [] and outbox.Outbox(Profile(home, "default", home)).look() == look
    done = invoke(*own_interpreter(tmp_path), "--root", str(home), "run", "--json")
    ran = [r for r in json.loads(done.stdout)["results"] if r["action"] == "noticed"]
    assert [d["session_id"] for r in ran for d in r["done"]] == ["a", "old"]


def test_the_metrics_count_what_was_announced(home, invoke, tmp_path):
    metrics = tmp_path / "metrics.prom"
    run(invoke, tmp_path, home)
    hermes_deletes(home / "state.db", "a", "old", "old-child")
    invoke(*own_interpreter(tmp_path), "--root", str(home), "run", "--metrics-file", str(metrics))
    lines = [line for line in metrics.read_text().splitlines() if line.startswith("hermes_admin_noticed_sessions_total")]
    assert len(lines) == 1 and lines[0].endswith(" 3.0"), lines


def test_a_pass_with_nobody_listening_leaves_the_look_for_one_that_has(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    look = outbox.Outbox(Profile(home, "default", home)).look()
    config = home / "config.yaml"
    saved = config.read_text()
    install_plugins(home, [], enabled=[])  # nothing enabled for a while
    hermes_deletes(home / "state.db", "a")
    run(invoke, tmp_path, home)
    assert outbox.Outbox(Profile(home, "default", home)).look() == look and events(home) == []
    config.write_text(saved)
    run(invoke, tmp_path, home)
    assert [(e["session_id"], e["reason"]) for e in events(home)] == [("a", "delete")]


def test_a_look_tampered_with_starts_a_new_memory(home, invoke, tmp_path):
    run(invoke, tmp_path, home)
    conn = sqlite3.connect(home / ".hermes-admin" / "outbox.db")
    with conn:
        conn.execute("UPDATE looks SET sessions = 'not a blob', device = 'x'")
    conn.close()
    hermes_deletes(home / "state.db", "a")
    out = run(invoke, tmp_path, home, "-v")
    assert out.exit_code in (0, 1), out.output
    assert "could not be read" in out.output and events(home) == []
    hermes_deletes(home / "state.db", "b")
    run(invoke, tmp_path, home)
    assert [e["session_id"] for e in events(home)] == ["b"]

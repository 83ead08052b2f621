"""Stale open rows closed as Hermes main closes them, and retention per source: tables of cases with
`now` passed in, then the CLI edge under freezegun (a run now, and the run a window later)."""

from __future__ import annotations

import json
import sqlite3

import pytest
import yaml
from freezegun import freeze_time

from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.tasks import retention, stale
from hermes_admin.profile.tasks.retention import REAPED, Windows
from hermes_admin.synth.builder import SynthStore
from tests.helpers import events, install_plugins, own_interpreter, row_ids
from tests.unit.test_tasks import NOW, Row, ago

DAY = 86400.0
W90 = Windows(90)

STALE_CASES = [
    # (name, row, live, windows, closed?)
    ("cron open, idle 150 days: closed", Row("a", source="cron", ended_at=None, last=ago(150)), set(), W90, True),
    ("every automated source is closed", Row("a", source="recovered", ended_at=None, last=ago(91)), set(), W90, True),
    ("cli open, idle exactly the window: kept", Row("a", source="cli", ended_at=None, last=ago(90)), set(), W90, False),
    ("cli open, one second past: closed", Row("a", source="cli", ended_at=None, last=ago(90) - 1), set(), W90, True),
    ("telegram open for a year: never closed", Row("a", source="telegram", ended_at=None, last=ago(365)), set(), W90,
     False),
    ("tui open for a year: never closed", Row("a", source="tui", ended_at=None, last=ago(365)), set(), W90, False),
    ("pinned cron: kept", Row("a", source="cron", ended_at=None, pinned=True, last=ago(150)), set(), W90, False),
    ("cron with a live lease: kept", Row("a", source="cron", ended_at=None, last=ago(150)), {"a"}, W90, False),
    ("ended already: not considered", Row("a", source="cron", last=ago(150)), set(), W90, False),
    ("cron's own shorter window", Row("a", source="cron", ended_at=None, last=ago(31)), set(),
     Windows(90, {"cron": 30}), True),
    ("another source's window does not apply", Row("a", source="cli", ended_at=None, last=ago(31)), set(),
     Windows(90, {"cron": 30}), False),
]


@pytest.mark.parametrize("name, row, live, windows, closed", STALE_CASES, ids=[c[0] for c in STALE_CASES])
def test_stale_rows(name, row, live, windows, closed):
    selection = stale.select(Graph([row]), windows, NOW, live)
    assert [u.session_id for u in selection.units] == (["a"] if closed else [])
    if closed:
        assert REAPED in selection.units[0].rule
    elif row.ended_at is None:
        assert "a" in selection.kept  # an open row left open says why


def test_a_stale_row_closed_once_is_never_closed_again_and_rechecks():
    check = stale.recheck(W90, NOW)
    row = Row("a", source="cron", ended_at=None, last=ago(150))
    unit = stale.select(Graph([row]), W90, NOW).units[0]
    assert check(unit, {"a": row}) is None
    assert check(unit, {"a": Row("a", source="cron", ended_at=ago(0), last=ago(150))}) == "no longer open"
    assert "active" in check(unit, {"a": Row("a", source="cron", ended_at=None, last=ago(1))})


SOURCE_CASES = [
    # (name, rows, windows, heads)
    ("cron past its 30 days goes", [Row("a", source="cron", last=ago(31))], Windows(90, {"cron": 30}), ["a"]),
    ("cli at 31 days stays under the default 90", [Row("a", source="cli", last=ago(31))], Windows(90, {"cron": 30}), []),
    ("a longer window for a source keeps it", [Row("a", source="telegram", last=ago(100))],
     Windows(90, {"telegram": 365}), []),
    ("a unit goes only when every member is past its own limit",
     [Row("p", source="cli", last=ago(40)), Row("c", source="cron", parent_id="p", delegate_from="p", last=ago(40))],
     Windows(90, {"cron": 30}), []),
    ("... and goes when every member is",
     [Row("p", source="cli", last=ago(100)), Row("c", source="cron", parent_id="p", delegate_from="p", last=ago(40))],
     Windows(90, {"cron": 30}), ["p"]),
    # a row closed as stale ages from its closing: one further window
    ("closed as stale 10 days ago, idle 200: stays a window more",
     [Row("a", source="cron", ended_at=ago(10), end_reason=REAPED, last=ago(200))], W90, []),
    ("closed as stale 91 days ago: goes",
     [Row("a", source="cron", ended_at=ago(91), end_reason=REAPED, last=ago(200))], W90, ["a"]),
    ("stale_grace_days 0: goes on the next day's run",
     [Row("a", source="cron", ended_at=ago(1), end_reason=REAPED, last=ago(200))], Windows(90, {}, 0), ["a"]),
    ("stale_grace_days 7: 8 days after its closing",
     [Row("a", source="cron", ended_at=ago(8), end_reason=REAPED, last=ago(200))], Windows(90, {}, 7), ["a"]),
    ("stale_grace_days 7: 6 days after its closing stays",
     [Row("a", source="cron", ended_at=ago(6), end_reason=REAPED, last=ago(200))], Windows(90, {}, 7), []),
]


@pytest.mark.parametrize("name, rows, windows, heads", SOURCE_CASES, ids=[c[0] for c in SOURCE_CASES])
def test_retention_per_source(name, rows, windows, heads):
    selection = retention.select(Graph(rows), windows, NOW)
    assert [u.session_id for u in selection.units] == heads
    for row in rows:
        assert (row.id in selection.ids()) != (row.id in selection.kept)


def test_the_rule_names_the_source_limit():
    (unit,) = retention.select(Graph([Row("a", source="cron", last=ago(31))]), Windows(90, {"cron": 30}), NOW).units
    assert "source_retention_days: cron 30 days" in unit.rule


def _stale_root(root, now):
    store = SynthStore(root / "state.db", version=30)
    for n in range(12):  # cron runs that died, idle 150+ days
        store.session(f"cron_{n}", started=now - (150 + n) * DAY, source="cron")
        store.messages(f"cron_{n}", 2, now - (150 + n) * DAY)
    store.session("chat", started=now - 400 * DAY, source="telegram")  # a person's chat: never closed
    store.messages("chat", 2, now - 400 * DAY)
    store.session("old_cron_done", started=now - 40 * DAY, ended=now - 40 * DAY, end_reason="done", source="cron")
    store.messages("old_cron_done", 1, now - 40 * DAY)
    store.session("old_cli_done", started=now - 40 * DAY, ended=now - 40 * DAY, end_reason="done", source="cli")
    store.messages("old_cli_done", 1, now - 40 * DAY)
    store.close()
    (root / "config.yaml").write_text(yaml.safe_dump({"sessions": {
        "auto_prune": True, "retention_days": 90, "source_retention_days": {"cron": 30}}}))


def _open_ids(db):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions WHERE ended_at IS NULL")}, \
            {r[0] for r in conn.execute("SELECT id FROM sessions WHERE end_reason = ?", (REAPED,))}
    finally:
        conn.close()


def test_a_run_closes_stale_rows_silently_and_a_window_later_purges_them(tmp_path, invoke):
    root = tmp_path / "h"
    with freeze_time("2026-06-01 12:00:00"):
        import time
        now = time.time()
        _stale_root(root, now)
        install_plugins(root, ["recorder"], enabled=["recorder"])
        own = own_interpreter(tmp_path)
        dry = invoke("--root", str(root), *own, "run", "--dry-run", "--json")
        assert dry.exit_code == 0, dry.stderr
        closing = [r for r in json.loads(dry.stdout)["results"] if r["task"] == "close_stale"]
        assert len(closing[0]["done"]) == 12 and closing[0]["action"] == "close"
        assert _open_ids(root / "state.db")[0] == {f"cron_{n}" for n in range(12)} | {"chat"}  # dry: nothing changed
        done = invoke("--root", str(root), *own, "run", "--yes", "--json")
        assert done.exit_code == 0, done.stderr
        doc = json.loads(done.stdout)
        purged = {d["session_id"] for r in doc["results"] if r["task"] == "purge" for d in r["done"]}
        assert purged == {"old_cron_done"}  # cron's 30 days; cli keeps its 90
        # its event, and none for the rows closed (closing deletes nothing)
        assert [(e["session_id"], e["reason"]) for e in events(root)] == [("old_cron_done", "prune")]
        opened, reaped = _open_ids(root / "state.db")
        assert opened == {"chat"} and reaped == {f"cron_{n}" for n in range(12)}
    with freeze_time("2026-07-02 12:00:00"):  # 31 days on: past cron's window since their closing
        later = invoke("--root", str(root), *own, "run", "--yes", "--json")
        assert later.exit_code == 0, later.stderr
        purged = {d["session_id"] for r in json.loads(later.stdout)["results"] if r["task"] == "purge"
                  for d in r["done"]}
        assert purged == {f"cron_{n}" for n in range(12)}
        assert row_ids(root / "state.db") == {"chat", "old_cli_done"}
        assert {e["session_id"] for e in events(root)} == {"old_cron_done"} | {f"cron_{n}" for n in range(12)}


def test_the_daemons_run_job_closes_and_later_purges_stale_rows_at_its_edge(tmp_path):
    """The daemon's own job (host/daemon.Daemon.job, its `run` task list), in-process, at frozen times."""
    from hermes_admin.host.config import AdminConfig
    from hermes_admin.host.daemon import Daemon

    root = tmp_path / "h"
    with freeze_time("2026-06-01 12:00:00"):
        import time
        _stale_root(root, time.time())
        daemon = Daemon(load_config=AdminConfig, roots_given=(str(root),))
        daemon.job("run")
        opened, reaped = _open_ids(root / "state.db")
        assert opened == {"chat"} and reaped == {f"cron_{n}" for n in range(12)}
    with freeze_time("2026-07-02 12:00:00"):
        daemon.job("run")
    assert row_ids(root / "state.db") == {"chat", "old_cli_done"}

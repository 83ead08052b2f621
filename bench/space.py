"""Disk that comes back while Hermes runs, and retention that reaches what real Hermes leaves behind.

Usage:  python bench/space.py [--r-scale F] [--json FILE]

Two stores, each on fresh copies of the bench's R workload (bench/run.py builds and caches it with
the real Hermes):
  R     as built: a realistic user's store;
  AUTO  the same rows made to look like automation (#92740, #110589): 72 % of sessions cron, 10 %
        cli, the rest messaging; 70 % of the childless cron sessions left open by a process that died.

For each: (1) `run` alone, as the timer would on a quiet host (policy: auto_prune, retention 90,
vacuum_after_prune: the VACUUM, nobody holding the store, also switches it to incremental
auto-vacuum); (2) the run a window later, under a real Hermes writer appending every 20 ms: R with a
60-day window (more sessions due), AUTO with `stale_grace_days: 0` (the rows (1) closed as stale
are due, as they would be a window later); (2b) the same on a copy of the same store, with the
writer's own FTS optimize inside the run (it rewrites the whole index in one transaction, hundreds
of MB of WAL on R: (2) shows what our run does, (2b) what it does beside Hermes' own biggest write);
then (3) Hermes' own `maybe_auto_prune_and_vacuum(90)` on a fresh copy of the same store, under the
same writer (its optimize inside). Per step: rows deleted and closed, bytes in use before and after
(pages less free pages), the database file before and after, the WAL before, at its largest during
the step (by `stat`) and after, the share of freed bytes back in the database file's size, the
database file and WAL together before less after, the writer's worst and p99 wait, failed writes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import run as bench  # noqa: E402
from tests import peer  # noqa: E402

HERMES_MAINTENANCE = """
import json, sys, time
from pathlib import Path
from hermes_state import SessionDB
home = Path(sys.argv[1])
db = SessionDB(home / "state.db")
started = time.monotonic()
done = db.maybe_auto_prune_and_vacuum(retention_days=90, min_interval_hours=0, vacuum=True,
                                      sessions_dir=home / "sessions")
db.close()
print(json.dumps({**done, "seconds": round(time.monotonic() - started, 2)}))
"""


def figures(db: Path) -> dict:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                             for p in ("page_count", "freelist_count", "page_size"))
        sessions = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        open_rows = conn.execute("SELECT COUNT(*) FROM sessions WHERE ended_at IS NULL").fetchone()[0]
        vacuum = conn.execute("PRAGMA auto_vacuum").fetchone()[0]
    finally:
        conn.close()
    wal = Path(f"{db}-wal")
    return {"used": (pages - free) * size, "file": db.stat().st_size, "wal": wal.stat().st_size if wal.exists() else 0,
            "sessions": sessions, "open": open_rows, "auto_vacuum": vacuum}


def automation_shaped(home: Path) -> None:
    """R's rows as an automation-heavy store: sources rewritten, many cron rows left open."""
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    try:
        conn.execute("BEGIN")
        ids = [r[0] for r in conn.execute("SELECT id FROM sessions WHERE id != ? ORDER BY id", (bench.LIVE,))]
        parents = {r[0] for r in conn.execute("SELECT DISTINCT parent_session_id FROM sessions "
                                              "WHERE parent_session_id IS NOT NULL")}
        for n, sid in enumerate(ids):
            share = (n * 37) % 100
            source = "cron" if share < 72 else "cli" if share < 82 else ("telegram", "discord", "slack")[n % 3]
            conn.execute("UPDATE sessions SET source = ? WHERE id = ?", (source, sid))
            if source == "cron" and sid not in parents and (n * 13) % 100 < 70:
                conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (sid,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def set_policy(home: Path, sessions: dict) -> None:
    (home / "config.yaml").write_text(json.dumps({"sessions": sessions}) + "\n")  # JSON is YAML


def ours(home: Path, admin: Path) -> dict:
    path = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(home), "--config", str(admin),
                           "run", "--yes", "--json"],
                          capture_output=True, text=True, env=dict(os.environ, HERMES_ADMIN_CONFIG="", PYTHONPATH=path))
    doc = json.loads(done.stdout)
    by_task = {r["task"]: r for r in doc["results"] if r.get("task")}
    return {"code": done.returncode, "seconds": round(time.monotonic() - started, 1),
            "deleted": sum(r["rows"] for r in doc["results"] if r["action"] == "delete"),
            "closed": by_task.get("close_stale", {}).get("rows", 0),
            "vacuumed": any(r.get("vacuumed") for r in doc["results"]),
            "notes": [n for r in doc["results"] for n in r["notes"] if "page" in n or "VACUUM" in n],
            "longest_write_ms": doc.get("longest_write_ms"), "errors": doc.get("errors", [])}


def hermes(home: Path) -> dict:
    done = subprocess.run([peer.python(), "-c", HERMES_MAINTENANCE, str(home)], capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"error": done.stderr[-300:]}


NO_OPTIMIZE = -10 ** 6  # the writer's own FTS optimize falls a million appends later: not in this run
OPTIMIZE_INSIDE = 300  # ... or after 300 appends (6 s): inside the run


class WalPeak:
    """The WAL's largest size while an action runs, by `stat` every 20 ms (nothing is opened)."""

    def __init__(self, db: Path):
        self.wal, self.peak, self._stop = Path(f"{db}-wal"), 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.wal.stat().st_size)
            except OSError:
                pass

    def __enter__(self) -> "WalPeak":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def step(home: Path, action, optimize_after: int | None = None) -> dict:
    """`action` and the store's figures right after it (with the writer still running: its own close,
    the last, would delete the WAL and say nothing of ours). Without `optimize_after`, no writer."""
    db = home / "state.db"

    def measured_action():  # figures before too with the writer running: its WAL is there all day
        before = figures(db)
        with WalPeak(db) as wal:
            done = action()
        return before, done, figures(db), wal.peak

    if optimize_after is not None:
        (before, measured, after, peak), writer = bench.with_writer(home, measured_action,
                                                                    optimize_after=optimize_after)
    else:
        (before, measured, after, peak), writer = measured_action(), None
    freed = before["used"] - after["used"]
    back = before["file"] - after["file"]  # the database file
    on_disk = before["file"] + before["wal"] - after["file"] - after["wal"]  # the database file and its WAL
    return {"before": before, "after": after, "freed": freed, "back": back, "on_disk": on_disk, "wal_peak": peak,
            "back_share": round(back / freed, 3) if freed > 0 else None, "run": measured, "writer": writer}


def workload(name: str, source: Path, tmp: Path) -> dict:
    out = {}
    where = tmp / name
    where.mkdir()
    home = bench.copy(source, where)
    if name == "AUTO":
        automation_shaped(home)
    pristine = tmp / f"{name}-pristine"
    shutil.copytree(home, pristine)  # the same store for Hermes' own maintenance
    admin = tmp / f"{name}-admin.yaml"
    admin.write_text("{}\n")
    set_policy(home, {"auto_prune": True, "retention_days": 90, "vacuum_after_prune": True})
    bench.log(f"{name}: (1) run alone ...")
    out["alone"] = step(home, lambda: ours(home, admin))
    if name == "R":
        set_policy(home, {"auto_prune": True, "retention_days": 60})
    else:  # the stale rows (1) closed, due as a window later
        set_policy(home, {"auto_prune": True, "retention_days": 90})
        admin.write_text(json.dumps({"defaults": {"stale_grace_days": 0}}) + "\n")
    again = tmp / f"{name}-again"
    shutil.copytree(home, again)  # the same store a window later, for (2b)
    os.sync()
    bench.log(f"{name}: (2) the run a window later, under the writer ...")
    out["later"] = step(home, lambda: ours(home, admin), NO_OPTIMIZE)
    shutil.rmtree(where, ignore_errors=True)
    bench.log(f"{name}: (2b) the same, with the writer's own FTS optimize inside the run ...")
    out["later_optimize"] = step(again, lambda: ours(again, admin), OPTIMIZE_INSIDE)
    shutil.rmtree(again, ignore_errors=True)
    bench.log(f"{name}: (3) Hermes' own auto-maintenance on a copy, under the writer ...")
    out["hermes"] = step(pristine, lambda: hermes(pristine), OPTIMIZE_INSIDE)
    shutil.rmtree(pristine, ignore_errors=True)
    return out


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def table(results: dict) -> str:
    lines = ["| store | step | deleted / closed | in use before → after | state.db before → after | "
             "freed, back in state.db's size | WAL before → peak → after | state.db + WAL back | "
             "writer worst / p99, failed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, steps in results.items():
        for label, s in (("(1) our run, alone", steps["alone"]),
                         ("(2) our run a window later, under the writer", steps["later"]),
                         ("(2b) the same, the writer's own FTS optimize inside it", steps["later_optimize"]),
                         ("(3) Hermes' auto-maintenance, under the writer", steps["hermes"])):
            r, w, b, a = s["run"], s["writer"], s["before"], s["after"]
            did = (f"{r.get('deleted', 0)} / {r.get('closed', 0)}" if "deleted" in r
                   else f"{r.get('pruned', 0)} / 0" + (" (VACUUM)" if r.get("vacuumed") else ""))
            writer = f"{w['max_wait_ms']} / {w['p99_wait_ms']} ms, {w['failures']}" if w else "-"
            share = f"{mb(s['back'])} of {mb(s['freed'])} ({100 * s['back_share']:.0f} %)" if s["back_share"] is not None \
                else f"{mb(s['back'])} (nothing freed)"
            lines.append(f"| {name} | {label} | {did} | {mb(b['used'])} → {mb(a['used'])} | "
                         f"{mb(b['file'])} → {mb(a['file'])} | {share} | "
                         f"{mb(b['wal'])} → {mb(s['wal_peak'])} → {mb(a['wal'])} | {mb(s['on_disk'])} | {writer} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--r-scale", type=float, default=float(os.environ.get("HERMES_ADMIN_BENCH_R_SCALE", 1)))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    source, _ = bench.workload("R", args.r_scale)
    results = {}
    with tempfile.TemporaryDirectory(prefix="hermes-admin-space-") as tmp:
        for name in ("R", "AUTO"):
            results[name] = workload(name, source, Path(tmp))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

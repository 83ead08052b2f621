"""hermes-admin's purge beside Hermes' own prune, on identical copies, under a live writer.

Usage:  python bench/run.py [--scales 1,10] [--no-hermes-at-scale-10]

1. Builds (or reuses from ~/.cache/hermes-admin-bench) workloads W1 and W10
   with the real Hermes Agent 0.19.0 (tests/peer.py's venv).
2. On two copies of W1: Hermes' `prune_sessions(older_than_days=90,
   sessions_dir=...)` and `hermes-admin purge --older-than 90 --yes`, each
   while a real SessionDB appends a message every 20 ms to a live session.
3. On W10: hermes-admin's purge only (Hermes' per-session glob would take hours).
4. Prints one table and checks that both W1 copies keep exactly the same sessions.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests import peer  # noqa: E402

CACHE = Path(os.environ.get("HERMES_ADMIN_BENCH_CACHE", Path.home() / ".cache" / "hermes-admin-bench"))
WORKLOAD_VERSION = 1
MAX_WORKLOAD_AGE_S = 3 * 86400  # ages drift; a week-old workload would cross the 90-day line

TARGETS = {"ratio": 20.0, "longest_write_ms": 100.0, "writer_wait_ms": 250.0, "rss_mb": 80.0, "w10_over_w1": 11.0}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def workload(scale: int) -> Path:
    """The cached workload's home folder (built with the real Hermes on first use)."""
    folder = CACHE / f"W{scale}-v{WORKLOAD_VERSION}"
    meta = folder / "meta.json"
    if meta.exists() and time.time() - json.loads(meta.read_text())["now"] < MAX_WORKLOAD_AGE_S:
        return folder / "home"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    now = time.time()
    log(f"building W{scale} with the real Hermes (cached in {folder}) ...")
    started = time.monotonic()
    done = subprocess.run([peer.python(), str(HERE / "build_workload.py"), str(folder / "home"), str(scale), str(now)],
                          capture_output=True, text=True, check=True)
    info = json.loads(done.stdout)
    meta.write_text(json.dumps({"now": now, **info, "build_seconds": round(time.monotonic() - started, 1)}))
    log(f"  W{scale}: {info} in {time.monotonic() - started:.0f} s")
    return folder / "home"


def copy(home: Path, into: Path) -> Path:
    target = into / "home"
    shutil.copytree(home, target)  # the cached store is closed and quiet: a file copy is a snapshot
    os.sync()  # the copy's own writeback (1.9 GB for W10) must not land in the first fsyncs measured
    return target


def with_writer(home: Path, action):
    """Run `action()` while a real Hermes process appends a message every 20 ms."""
    stop, out = home.parent / "writer.stop", home.parent / "writer.json"
    writer = subprocess.Popen([peer.python(), str(HERE / "writer.py"), str(home / "state.db"), str(stop), str(out)],
                              stderr=subprocess.DEVNULL)
    while not Path(str(out) + ".ready").exists():
        if writer.poll() is not None:
            raise RuntimeError("the concurrent writer did not start")
        time.sleep(0.05)
    time.sleep(0.5)  # let it settle into its rhythm
    try:
        measured = action()
    finally:
        time.sleep(0.5)
        stop.write_text("stop")
        writer.wait(timeout=120)
    return measured, json.loads(out.read_text())


def run_hermes(home: Path) -> dict:
    done = subprocess.run([peer.python(), str(HERE / "hermes_prune.py"), str(home)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ours(home: Path) -> dict:
    rss_file, out_file = home.parent / "time.txt", home.parent / "purge.json"
    # The console script beside this interpreter, as an installed hermes-admin runs: not a version
    # manager's shim found on PATH (pyenv's adds ~40 ms of bash to every start).
    beside = Path(sys.executable).with_name("hermes-admin")
    exe = str(beside) if beside.exists() else shutil.which("hermes-admin") or sys.argv[0]
    started = time.monotonic()
    with open(out_file, "w") as out:
        done = subprocess.run(["/usr/bin/time", "-v", "-o", str(rss_file), exe, "--root", str(home), "purge",
                               "--older-than", "90", "--yes", "--json"],
                              stdout=out, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_ADMIN_CONFIG=""))
    ended = time.monotonic()
    seconds = ended - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"hermes-admin purge failed ({done.returncode}): {done.stderr[-2000:]}")
    doc = json.loads(out_file.read_text())
    rss_kb = next(int(line.split(":")[1]) for line in rss_file.read_text().splitlines()
                  if "Maximum resident set size" in line)
    return {"seconds": round(seconds, 3), "span": (started, ended), "deleted": sum(r["rows"] for r in doc["results"]),
            "longest_write_ms": doc["longest_write_ms"], "transactions": sum(r["transactions"] for r in doc["results"]),
            "rss_mb": round(rss_kb / 1024, 1)}


def surviving(home: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="1,10", help="workloads to run (1 = W1, 10 = W10)")
    parser.add_argument("--ours-only", action="store_true", help="skip Hermes' prune (for tuning; no ratio)")
    args = parser.parse_args()
    scales = [int(s) for s in args.scales.split(",")]
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="hermes-admin-bench-") as tmp:
        for scale in scales:
            source = workload(scale)
            if scale == 1 and not args.ours_only:
                theirs_home = copy(source, Path(tmp) / "hermes-W1")
                log("W1: Hermes' prune_sessions under a live writer ...")
                theirs, theirs_writer = with_writer(theirs_home, lambda: run_hermes(theirs_home))
            ours_home = copy(source, Path(tmp) / f"ours-W{scale}")
            log(f"W{scale}: hermes-admin purge under a live writer ...")
            ours, ours_writer = with_writer(ours_home, lambda: run_ours(ours_home))
            results[scale] = {"ours": ours, "ours_writer": ours_writer}
            if scale == 1 and not args.ours_only:
                results[1].update(theirs=theirs, theirs_writer=theirs_writer,
                                  same=surviving(theirs_home) == surviving(ours_home),
                                  kept=len(surviving(ours_home)))
    print(table(results))
    for scale, r in sorted(results.items()):
        log(f"W{scale} writer's slowest appends (ms, write count): {r['ours_writer'].get('slowest')}")
    return 0 if verdict(results) else 1


def verdict(results: dict) -> bool:
    checks = []
    if 1 in results and "theirs" in results[1]:
        w1 = results[1]
        checks += [w1["theirs"]["seconds"] / w1["ours"]["seconds"] >= TARGETS["ratio"], w1["same"]]
    for r in results.values():
        checks += [r["ours"]["longest_write_ms"] <= TARGETS["longest_write_ms"],
                   r["ours_writer"]["failures"] == 0,
                   r["ours_writer"]["max_wait_ms"] <= TARGETS["writer_wait_ms"],
                   r["ours"]["rss_mb"] <= TARGETS["rss_mb"]]
    if 1 in results and 10 in results:
        checks.append(results[10]["ours"]["seconds"] / results[1]["ours"]["seconds"] <= TARGETS["w10_over_w1"])
    return all(checks)


def optimize_overlap(result: dict) -> float:
    """Seconds of our run during which the writer's own FTS optimize held the store."""
    began, ended = result["ours"]["span"]
    return sum(max(0.0, min(end, ended) - max(start, began))
               for start, end in result["ours_writer"].get("own_maintenance_spans", []))


def table(results: dict) -> str:
    rows = [("measure", "target", "result", "met")]

    def add(name, target, value, ok=None):  # ok None: a figure to read, not a target
        rows.append((name, target, value, "" if ok is None else "yes" if ok else "NO"))

    if 1 in results and "theirs" in results[1]:
        w1 = results[1]
        ratio = w1["theirs"]["seconds"] / w1["ours"]["seconds"]
        add("W1 Hermes prune_sessions wall time", "", f"{w1['theirs']['seconds']:.2f} s ({w1['theirs']['deleted']} rows)")
        add("W1 speed-up (Hermes / ours)", ">= 20x", f"{ratio:.1f}x", ratio >= TARGETS["ratio"])
        add("W1 writer during Hermes' prune", "(for comparison)",
            f"worst wait {w1['theirs_writer']['max_wait_ms']} ms, {w1['theirs_writer']['failures']} failures")
        add("W1 same sessions kept by both", "identical", f"{w1['kept']} kept, identical: {w1['same']}", w1["same"])
    for scale, r in sorted(results.items()):
        add(f"W{scale} hermes-admin purge wall time", "", f"{r['ours']['seconds']:.2f} s ({r['ours']['deleted']} rows, "
            f"{r['ours']['transactions']} transactions)")
        add(f"W{scale} longest write transaction (ours)", "<= 100 ms", f"{r['ours']['longest_write_ms']:.1f} ms",
            r["ours"]["longest_write_ms"] <= TARGETS["longest_write_ms"])
        w = r["ours_writer"]
        add(f"W{scale} writer during our purge", "no failure, <= 250 ms",
            f"worst wait {w['max_wait_ms']} ms (p99 {w['p99_wait_ms']} ms), {w['failures']} failures, {w['appends']} appends"
            + (f"; Hermes' own FTS optimize: {', '.join(f'{x:.0f}' for x in w['own_maintenance_ms'])} ms"
               if w.get("own_maintenance_ms") else ""),
            w["failures"] == 0 and w["max_wait_ms"] <= TARGETS["writer_wait_ms"])
        add(f"W{scale} peak RSS (ours)", "<= 80 MB", f"{r['ours']['rss_mb']} MB", r["ours"]["rss_mb"] <= TARGETS["rss_mb"])
    if 1 in results and 10 in results:
        growth = results[10]["ours"]["seconds"] / results[1]["ours"]["seconds"]
        add("W10 time / W1 time (ours)", "<= 11x", f"{growth:.1f}x ({results[10]['ours']['seconds']:.2f} s)",
            growth <= TARGETS["w10_over_w1"])
        blocked = {scale: optimize_overlap(r) for scale, r in results.items()}
        if any(blocked.values()):
            net = {scale: results[scale]["ours"]["seconds"] - blocked[scale] for scale in (1, 10)}
            add("  the same, less Hermes' own optimize", "(for reading the row above)",
                f"{net[10] / net[1]:.1f}x (W10 {net[10]:.2f} s, W1 {net[1]:.2f} s: "
                f"{blocked[10]:.2f} and {blocked[1]:.2f} s of our runs were Hermes' optimize)")
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

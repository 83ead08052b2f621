"""Two checkouts of hermes-admin, one purge each in turn on fresh copies of the same workload.

Usage:  python bench/alternate.py CHECKOUT_A CHECKOUT_B [--workload W1|W10|R|RF] [--r-scale F] [--runs N]
                                  [--writer [--writer-late S]] [--release 0.19.0|0.22.2] [--journal delete|wal]
                                  [--no-floor] [--no-switch]

A B A B ...: each purge (`purge --older-than 90 --yes --json`) on its own fresh copy of the cached
workload (bench/run.py builds it: `--release 0.22.2` the one Hermes 0.22.2 wrote, `--journal` each
copy switched to that journal mode first), with the real Hermes writer of that release beside it
when `--writer` is given (bench/writer.py: an append every 20 ms). For comparing a change with the
commit before it: one run of bench/run.py each is not enough to tell a change from the machine's
drift, runs in turn are.

Alone (no `--writer`), each purge is followed, on another fresh copy, by the plain-SQL floor's
statements in as many transactions as that purge committed, of about equal weight (bench/floor.py
HOME 90 N: a unit heavier than one transaction's share in steps, as ours; its file removals included), on the SQLite that checkout runs on (apsw's, else Python's sqlite3: `--apsw`): the purge's time over the floor's is the "alone / the same SQL in as many
transactions" figure (`--no-floor` skips it). Under the writer: the writer's worst and p99 wait and
its failed writes.

A purge of a store not yet in incremental auto-vacuum that nobody else holds ends with the VACUUM
that switches it (once in a store's life; since f11c970; the writer's open store prevents it):
alone, on a fresh copy of a store Hermes wrote, every run of such a checkout takes it, and the
floor does not. `--no-switch` runs the purges with the policy `incremental_vacuum: false` (every
checkout since 0ac9e84 knows it): the deletes alone, as a store's later purges are.

Prints one line a run, then a table: each checkout's runs (spread) and medians, and the bounds of
issue 50 (alone within 1.05x of the floor in as many transactions; under a writer, every run: no
failed write, worst wait <= 250 ms, p99 <= 50 ms). Exit status 1 when B misses a bound.

Each checkout runs with its own code (PYTHONPATH, from a folder that is no checkout's: `-m` puts the
current folder first), whatever an installed hermes-admin points at; a checkout's hermes-admin must
take `--root HOME purge --older-than 90 --yes --json` (every one since the purge command has). A
checkout that refuses the store (an older one, before the schema Hermes 0.22.2 writes: `0ac9e84`
knows schema 30 at most) is said so once and left out of the runs that follow; the other runs alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import run as bench  # noqa: E402

BOUNDS = {"floor_ratio": 1.05, "worst_ms": 250.0, "p99_ms": 50.0}


def purge(checkout: Path, home: Path, config: str = "") -> dict:
    """One purge by `checkout`'s hermes_admin, whatever an installed one points at (`config`: an admin
    config file, or none)."""
    out = home.parent / "purge.json"
    started, cpu = time.monotonic(), _children_cpu()
    with open(out, "w") as stdout:
        done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(home), "purge", "--older-than",
                               "90", "--yes", "--json"], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_ADMIN_CONFIG=config, PYTHONPATH=str(checkout)),
                              cwd=home.parent)  # not a checkout's folder: `-m` puts the current one first
    seconds, cpu = time.monotonic() - started, _children_cpu() - cpu
    if done.returncode == 2 and "newer than this hermes-admin knows" in done.stderr:
        return {"refused": done.stderr.strip().splitlines()[-1]}  # an older checkout, a newer Hermes' store
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{checkout}: purge failed ({done.returncode}): {done.stderr[-1000:]}")
    doc = json.loads(out.read_text())
    results = doc["results"]
    return {"seconds": round(seconds, 2), "cpu_s": round(cpu, 2), "code": done.returncode,
            "deleted": sum(r.get("rows", 0) for r in results),
            "files": sum(r.get("files_removed", 0) if isinstance(r.get("files_removed"), int)
                         else len(r.get("files_removed") or ()) for r in results),
            "transactions": sum(r["transactions"] for r in results), "longest_ms": doc["longest_write_ms"],
            "vacuumed": any(r.get("vacuumed") for r in results), "longest_was": doc.get("longest_write")}


def _children_cpu() -> float:
    """User and system CPU seconds of the children waited for so far (the purge and its remover process)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def fresh(source: Path, tmp: Path, journal: str | None) -> Path:
    home = bench.copy(source, tmp)
    if journal and bench.journal_mode(home) != journal:
        bench.set_journal(home, journal)
    return home


def one(checkout: Path, source: Path, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="hermes-admin-alternate-") as tmp:
        home = fresh(source, Path(tmp), args.journal)
        config = ""
        if args.no_switch:
            config = str(Path(tmp) / "admin.yaml")
            Path(config).write_text("defaults:\n  incremental_vacuum: false\n")
        if not args.writer:
            return purge(checkout, home, config)
        done, w = bench.with_writer(home, lambda: purge(checkout, home, config), release=args.release,
                                    late_s=args.writer_late)
        if "refused" in done:
            return done
        return {**done, "worst_ms": w["max_wait_ms"] or 0.0, "p99_ms": w["p99_wait_ms"] or 0.0,
                "failures": w["failures"], "appends": w["appends"],
                "own_optimize_ms": [round(x) for x in w.get("own_maintenance_ms", [])],
                # where the worst wait was met, to read beside our longest transaction: at COMMIT (a
                # rollback journal's commit waits for every reader), and the slowest appends
                # (whole ms, ms waited, Hermes' write count)
                "commit_wait_ms": w.get("max_commit_wait_ms"), "slowest": w.get("slowest", [])[:3]}


def floor(source: Path, transactions: int, journal: str | None, apsw: bool) -> dict:
    """The floor's SQL (and its file removals) in `transactions` transactions, on a fresh copy, on
    the SQLite the checkout compared with it runs on."""
    with tempfile.TemporaryDirectory(prefix="hermes-admin-alternate-") as tmp:
        home = fresh(source, Path(tmp), journal)
        return bench.run_floor(home, transactions=max(1, transactions), apsw=apsw)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=lambda p: Path(p).resolve())  # resolved: its purges run from another folder
    parser.add_argument("b", type=lambda p: Path(p).resolve())
    parser.add_argument("--workload", default="W1", choices=("W1", "W10", *bench.REALISTIC))
    parser.add_argument("--r-scale", type=float, default=1.0, help="R's or RF's size (1: ~1 GB; 0.05: ~50 MB)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--writer", action="store_true", help="a real Hermes writer appending every 20 ms")
    parser.add_argument("--writer-late", type=float, default=0.0, metavar="S",
                        help="the writer starts S seconds after the purge (a Hermes that starts meanwhile)")
    parser.add_argument("--release", choices=bench.RELEASES, default=bench.DEFAULT_RELEASE,
                        help="the Hermes that wrote the workload and writes beside us (R and RF only for 0.22.2)")
    parser.add_argument("--journal", choices=("delete", "wal"), help="every copy switched to this journal mode")
    parser.add_argument("--no-floor", action="store_true", help="alone: skip the floor in as many transactions")
    parser.add_argument("--no-switch", action="store_true",
                        help="policy incremental_vacuum: false: no switching VACUUM after the deletes (a store "
                             "not yet switched gets one, once, at the end of a purge nobody else holds it for)")
    args = parser.parse_args()
    if args.release != bench.DEFAULT_RELEASE and args.workload not in bench.REALISTIC:
        parser.error(f"--release {args.release}: R or RF only")
    for checkout in (args.a, args.b):
        loads_its_own(checkout)
    source, info = bench.workload(args.workload, args.r_scale, args.release)
    shown = bench.label(args.workload, args.r_scale, args.release, args.journal)
    print(f"{shown}: {describe(info, source)}", flush=True)
    print(f"{'under the writer of Hermes ' + args.release if args.writer else 'alone'}; "
          f"A = {args.a} ({commit(args.a)}), B = {args.b} ({commit(args.b)}); "
          f"load average at the start {os.getloadavg()[0]:.2f}", flush=True)
    seen: dict[str, list[dict]] = {"A": [], "B": []}
    refused: dict[str, str] = {}  # a checkout that cannot purge this store at all (a schema it does not know)
    for n in range(args.runs):
        for name, checkout in (("A", args.a), ("B", args.b)):
            if name in refused:
                continue
            done = one(checkout.resolve(), source, args)
            if "refused" in done:
                refused[name] = done["refused"]
                print(f"{shown} {name} ({checkout}) cannot purge this store: {done['refused']}", flush=True)
                continue
            if not args.writer and not args.no_floor:
                short = floor(source, done["transactions"], args.journal, bench.on_apsw(checkout))
                done.update(floor_s=short["seconds"], floor_cpu_s=short["cpu_s"], floor_sqlite=short["sqlite"], floor_longest_ms=short["longest_ms"],
                            floor_transactions=short["transactions"],
                            floor_files=short["files"], ratio=round(done["seconds"] / short["seconds"], 3),
                            cpu_ratio=round(done["cpu_s"] / max(short["cpu_s"], 0.01), 3))
            done["load"] = round(os.getloadavg()[0], 2)
            seen[name].append(done)
            print(f"{shown} run {n + 1} {name}: {json.dumps(done)}", flush=True)
    print()
    print(table(seen, args, refused))
    return 0 if seen["B"] and all(ok for _, ok in bounds(seen["B"], args)) else 1


def describe(info: dict, source: Path) -> str:
    parts = [f"{info.get('sessions')} sessions ({info.get('doomed', '?')} past retention)"]
    if "messages" in info:
        parts.append(f"{info['messages']} messages")
    store = sum((source / n).stat().st_size for n in ("state.db", "state.db-wal") if (source / n).exists())
    parts.append(f"a {store / 1e6:.0f} MB store")
    if "file_bytes" in info:
        parts.append(f"{info['files']} files of {info['file_bytes'] / 1e6:.0f} MB ({info['doomed_files']} of "
                     f"{info['doomed_file_bytes'] / 1e6:.0f} MB past retention)")
    else:
        parts.append(f"{info.get('files')} files")
    parts.append(f"written by Hermes {info.get('release', bench.DEFAULT_RELEASE)}")
    return ", ".join(parts)


def loads_its_own(checkout: Path) -> None:
    """The checkout's hermes_admin is the one its purge imports (not an installed one, not the current folder's)."""
    done = subprocess.run([sys.executable, "-c", "import hermes_admin; print(hermes_admin.__file__)"],
                          capture_output=True, text=True, cwd=tempfile.gettempdir(),
                          env=dict(os.environ, PYTHONPATH=str(checkout)))
    loaded = Path(done.stdout.strip() or "?").resolve()
    if not loaded.is_relative_to(checkout.resolve()):
        raise SystemExit(f"{checkout}: its purge would import {loaded}, not its own hermes_admin")


def commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or "?") + (" with changes" if dirty else "")


def spread(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):g}{unit} ({min(values):g}-{max(values):g})"


def bounds(runs: list[dict], args) -> list[tuple[str, bool]]:
    if not runs:
        return []
    if args.writer:
        return [(f"every run: 0 failed writes, worst <= {BOUNDS['worst_ms']:g} ms, p99 <= {BOUNDS['p99_ms']:g} ms",
                 all(r["failures"] == 0 and r["worst_ms"] <= BOUNDS["worst_ms"] and r["p99_ms"] <= BOUNDS["p99_ms"]
                     for r in runs))]
    if "ratio" in runs[0]:
        return [(f"median alone / the floor in as many transactions <= {BOUNDS['floor_ratio']}x",
                 statistics.median(r["ratio"] for r in runs) <= BOUNDS["floor_ratio"])]
    return []


def table(seen: dict[str, list[dict]], args, refused: dict[str, str]) -> str:
    rows = [("", f"A {args.a}", f"B {args.b}")]
    if refused:
        rows.append(("cannot purge this store", *(refused.get(x, "") for x in "AB")))
    some = next((runs[0] for runs in seen.values() if runs), {})

    def row(name, key, unit="", pick=spread):
        if key in some:
            rows.append((name, *(pick([r[key] for r in seen[c]], unit) if seen[c] else "-" for c in "AB")))

    row("purge, seconds: median (range)", "seconds", " s")
    row("each run's seconds", "seconds", pick=lambda v, u: ", ".join(f"{x:g}" for x in v))
    row("transactions", "transactions")
    row("our longest transaction", "longest_ms", " ms")
    row("runs that ended with the switching VACUUM", "vacuumed", pick=lambda v, u: f"{sum(v)} of {len(v)}")
    row("the floor's SQL in as many transactions, seconds", "floor_s", " s")
    row("alone / that", "ratio", "x")
    row("CPU seconds: ours (the purge and its remover process)", "cpu_s", " s")
    row("CPU seconds: the floor in as many transactions", "floor_cpu_s", " s")
    row("CPU: ours / the floor's (steadier than wall time on a shared machine)", "cpu_ratio", "x")
    row("each run's ratio", "ratio", pick=lambda v, u: ", ".join(f"{x:.2f}x" for x in v))
    row("writer's worst wait", "worst_ms", " ms")
    row("writer's p99 wait", "p99_ms", " ms")
    row("each run's worst / p99 (ms)", "worst_ms", pick=lambda v, u: "")
    if args.writer and some:
        rows[-1] = ("each run's worst / p99 (ms)", *(", ".join(f"{r['worst_ms']:g} / {r['p99_ms']:g}" for r in seen[c])
                                                    or "-" for c in "AB"))
    row("failed writes (all runs)", "failures", pick=lambda v, u: str(sum(v)))
    row("Hermes' own optimize in the run (ms)", "own_optimize_ms",
        pick=lambda v, u: ", ".join(str(x) for x in v if x) or "none")
    row("load average during the runs", "load")
    for text, _ in bounds(some and [some], args):
        rows.append((text, *(("yes" if dict(bounds(seen[c], args))[text] else "NO") if seen[c] else "-"
                             for c in "AB")))
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

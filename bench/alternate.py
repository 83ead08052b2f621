"""Two checkouts of hermes-admin, one purge each in turn on fresh copies of the same workload.

Usage:  python bench/alternate.py CHECKOUT_A CHECKOUT_B [--workload W1|R] [--runs N] [--writer]

A B A B ...: each purge (`purge --older-than 90`) on its own fresh copy of the cached workload
(bench/run.py builds it), with the real Hermes writer beside it when `--writer` is given. For
comparing a change with the commit before it: one run of bench/run.py each is not enough to tell
a change from the machine's drift, runs in turn are. Prints one line a run (its time, its
transactions, the longest, the writer's worst and p99 wait) and the medians of each checkout.
"""

from __future__ import annotations

import argparse
import json
import os
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


def purge(checkout: Path, home: Path) -> dict:
    """One purge by `checkout`'s hermes_admin, whatever an installed one points at."""
    out = home.parent / "purge.json"
    started = time.monotonic()
    with open(out, "w") as stdout:
        done = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(home), "purge", "--older-than",
                               "90", "--yes", "--json"], stdout=stdout, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_ADMIN_CONFIG="", PYTHONPATH=str(checkout)))
    seconds = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{checkout}: purge failed ({done.returncode}): {done.stderr[-1000:]}")
    doc = json.loads(out.read_text())
    return {"seconds": round(seconds, 2), "transactions": sum(r["transactions"] for r in doc["results"]),
            "longest_ms": doc["longest_write_ms"]}


def one(checkout: Path, source: Path, writer: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="hermes-admin-alternate-") as tmp:
        home = bench.copy(source, Path(tmp))
        if not writer:
            return purge(checkout, home)
        done, w = bench.with_writer(home, lambda: purge(checkout, home))
        return {**done, "worst_ms": w["max_wait_ms"], "p99_ms": w["p99_wait_ms"], "failures": w["failures"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--workload", default="W1", choices=("W1", "W10", "R"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writer", action="store_true", help="a real Hermes writer appending every 20 ms")
    args = parser.parse_args()
    source, _ = bench.workload(args.workload, 1)
    seen: dict[str, list[dict]] = {"A": [], "B": []}
    for n in range(args.runs):
        for label, checkout in (("A", args.a), ("B", args.b)):
            done = one(checkout.resolve(), source, args.writer)
            seen[label].append(done)
            print(f"{args.workload} run {n + 1} {label} ({checkout}): {done}", flush=True)
    for label, runs in seen.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0] if r_is_number(runs[0][k])}
        print(f"{args.workload} {label} medians over {len(runs)}: {medians}")
    return 0


def r_is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


if __name__ == "__main__":
    sys.exit(main())

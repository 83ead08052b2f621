"""One purge of a fresh copy of a cached workload, profiled: where its time goes, function by function.

Usage:  python bench/profile_purge.py CHECKOUT OUT_PREFIX [--workload RF] [--r-scale F] [--release R]
                                      [--journal delete|wal] [--writer] [--py-spy | --spy-only] [--no-switch]

Runs `CHECKOUT`'s `hermes-admin --root HOME purge --older-than 90 --yes --json` in this interpreter's
process tree on a fresh copy (the homes of the account it runs as are purged in-process: the engine
runs in the CLI's own process), under cProfile (OUT_PREFIX.prof: the engine's thread, cumulative
seconds per function; `python -m pstats`) and, with --py-spy, under py-spy too (OUT_PREFIX.txt:
collapsed stacks of every thread and the remover process, sampled 250 times a second (RATE), idle included).
Prints the top functions by cumulative time, with their share of the whole.

--spy-only: py-spy alone, sampling without stopping the process (`--nonblocking`), no cProfile (which
slows the engine's Python enough to change its pacing: 448 transactions of RF instead of ~180).
Prints where the engine's thread spent its time: inside write transactions, and outside them by
stack (what the deletes waited for), in seconds of wall time.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
RATE = 250  # py-spy's samples a second
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import run as bench  # noqa: E402

INNER = """
import cProfile, os, sys
sys.argv = ['hermes-admin', '--root', sys.argv[1], 'purge', '--older-than', '90', '--yes', '--json']
real_exit = os._exit


def leave(code):  # the CLI leaves by os._exit once all is written: the profile first
    raise SystemExit(code)


os._exit = leave
from hermes_admin.cli.entry import main
import hermes_admin
print('hermes_admin from', hermes_admin.__file__, file=sys.stderr)
profiler = cProfile.Profile()
code = 0
try:
    profiler.runcall(main)
except SystemExit as exc:
    code = exc.code or 0
finally:
    profiler.dump_stats(PROF)
real_exit(code)
"""


SPIED = """
import sys
sys.argv = ['hermes-admin', '--root', sys.argv[1], 'purge', '--older-than', '90', '--yes', '--json']
from hermes_admin.cli.entry import main
main()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--workload", default="RF", choices=("W1", "W10", *bench.REALISTIC))
    parser.add_argument("--r-scale", type=float, default=1.0)
    parser.add_argument("--release", choices=bench.RELEASES, default=bench.DEFAULT_RELEASE)
    parser.add_argument("--journal", choices=("delete", "wal"))
    parser.add_argument("--writer", action="store_true")
    parser.add_argument("--py-spy", action="store_true")
    parser.add_argument("--spy-only", action="store_true", help="py-spy without cProfile (see above)")
    parser.add_argument("--no-switch", action="store_true", help="policy incremental_vacuum: false (alternate.py)")
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    source, _ = bench.workload(args.workload, args.r_scale, args.release)
    prof = args.out.with_suffix(".prof").resolve()
    with tempfile.TemporaryDirectory(prefix="hermes-admin-profile-") as tmp:
        home = bench.copy(source, Path(tmp))
        if args.journal and bench.journal_mode(home) != args.journal:
            bench.set_journal(home, args.journal)
        command = [sys.executable, "-c", INNER.replace("PROF", repr(str(prof))), str(home)]
        if args.spy_only:
            command = [sys.executable, "-c", SPIED, str(home)]
        if args.py_spy or args.spy_only:
            command = ["py-spy", "record", "--subprocesses", "--threads", "--idle", "--rate", str(RATE),
                       *(["--nonblocking"] if args.spy_only else []),
                       "--format", "raw", "-o", str(args.out.with_suffix(".txt").resolve()), "--", *command]
        config = ""
        if args.no_switch:
            config = str(Path(tmp) / "admin.yaml")
            Path(config).write_text("defaults:\n  incremental_vacuum: false\n")
        env = dict(os.environ, HERMES_ADMIN_CONFIG=config, PYTHONPATH=str(args.checkout.resolve()))

        def purge():
            started = time.monotonic()
            done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  cwd=tmp)  # `-c` puts the current folder first: never a checkout's
            if done.returncode not in (0, 1):
                raise RuntimeError(done.stderr[-2000:])
            return round(time.monotonic() - started, 2)

        if args.writer:
            seconds, w = bench.with_writer(home, purge, release=args.release)
            print(f"writer: worst {w['max_wait_ms']} ms, p99 {w['p99_wait_ms']} ms, {w['failures']} failed; "
                  f"slowest {w.get('slowest')}")
        else:
            seconds = purge()
    print(f"{args.checkout}: {seconds} s (profiled), load {os.getloadavg()[0]:.2f}")
    if args.spy_only:
        return engine_thread(args.out.with_suffix(".txt"), args.top)
    stats = pstats.Stats(str(prof))
    total = max(v[3] for v in stats.stats.values())
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[: args.top]
    for (file, line, name), (cc, nc, tt, ct, _) in rows:
        short = file.split("hermes_admin/")[-1] if "hermes_admin/" in file else file.rsplit("/", 1)[-1]
        print(f"{ct:8.2f} s {100 * ct / total:5.1f} %  self {tt:7.2f} s  {nc:>7}  {short}:{line} {name}")
    return 0


def engine_thread(samples: Path, top: int) -> int:
    """The engine's thread (the process's main thread) from py-spy's raw stacks: its time inside write
    transactions, and outside them by the innermost frames."""
    inside, outside = 0, Counter()
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if len(frames) < 2 or "MainThread" not in frames[1]:  # the remover process: frames[1] names it
            continue
        if any("write_transaction" in frame for frame in frames):
            inside += int(count)
        else:
            outside[" <- ".join(frame.split(" (")[0] for frame in frames[:1:-1][:3])] += int(count)
    whole = inside + sum(outside.values())
    print(f"engine thread: {whole / RATE:.2f} s; in write transactions {inside / RATE:.2f} s; outside them:")
    for where, count in outside.most_common(top):
        print(f"{count / RATE:8.2f} s  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

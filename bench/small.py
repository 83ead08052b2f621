"""The small things BENCHMARKS.md measures: `--help` and `--version`, and `run` over 50 profiles with nothing
to do, as whole processes (medians of N runs).

    python bench/small.py [--runs 9] [--profiles 50]

Builds a root of synthetic profiles (hermes_admin.synth) in a temporary folder, runs `run` once so
nothing is left to do, then times each command as `python -m hermes_admin` with this checkout first
on sys.path."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "hermes_admin", *args], env=env, capture_output=True)
        times.append(time.perf_counter() - started)
        assert done.returncode in (0, 1), done.stderr.decode()[-500:]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--profiles", type=int, default=50)
    options = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from hermes_admin.synth.scenario import build_root

    env = dict(os.environ, PYTHONPATH=str(HERE), HERMES_ADMIN_CONFIG="", HERMES_HOME="")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "hermes"
        names = {"default": 30, **{f"p{n:02d}": 30 for n in range(options.profiles - 1)}}
        build_root(root, names, now=time.time())
        subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), "run", "--yes", "-q"], env=env,
                       capture_output=True)
        python = statistics.median(
            [(lambda s: (subprocess.run([sys.executable, "-c", "pass"]), time.perf_counter() - s)[1])(time.perf_counter())
             for _ in range(options.runs)])
        rows = [("python -c pass", python),
                ("hermes-admin --help", timed(["--help"], dict(env, COLUMNS="80"), options.runs)),
                ("hermes-admin --version", timed(["--version"], env, options.runs)),
                (f"hermes-admin -q run, {options.profiles} profiles, nothing to do",
                 timed(["--root", str(root), "-q", "run", "--yes"], env, options.runs)),
                (f"hermes-admin status, {options.profiles} profiles",
                 timed(["--root", str(root), "status"], env, options.runs))]
    for name, seconds in rows:
        print(f"| `{name}` | {seconds * 1000:.0f} ms |")


if __name__ == "__main__":
    main()

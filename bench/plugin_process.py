"""What a plugin process costs to start, in our interpreter and in a Hermes installation's, and what
a probe of that installation costs (uncached).

    python bench/plugin_process.py HERMES_PYTHON [RUNS]

HERMES_PYTHON: the python of a venv with Hermes installed (e.g. `<root>/hermes-agent/venv/bin/python`).
A throwaway home with one enabled plugin is made in a temporary folder. Medians and minimums of RUNS
(default 9), after one warm-up run each.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_admin.profile import in_hermes  # noqa: E402


def home_with_one_plugin(folder: Path) -> Path:
    plugin = folder / "plugins" / "x"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: x\n")
    (plugin / "__init__.py").write_text("def register(ctx):\n    ctx.register_hook('on_session_delete', lambda **kw: None)\n")
    (folder / "config.yaml").write_text("plugins:\n  enabled: [x]\n")
    return folder


def start(python: str, hermes: bool, home: Path) -> float:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HERMES_HOME": str(home)}
    began = time.perf_counter()
    proc = subprocess.Popen(in_hermes.command(python, "serve"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=str(home))
    spec = {"home": str(home), "profile": "default", "hermes": hermes,
            "plugins": [{"key": "x", "source": "directory", "location": str(home / "plugins" / "x")}]}
    proc.stdin.write((json.dumps(spec) + "\n").encode())
    proc.stdin.flush()
    ready = json.loads(proc.stdout.readline())
    took = time.perf_counter() - began
    proc.stdin.close()
    proc.wait()
    if ready.get("callbacks") != ["x"]:
        raise SystemExit(f"unexpected answer: {ready}")
    return took


def probe(python: str, home: Path) -> float:
    began = time.perf_counter()
    subprocess.run(in_hermes.command(python, "probe"), capture_output=True, check=True,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(home)})
    return time.perf_counter() - began


def main() -> None:
    hermes_python = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    with tempfile.TemporaryDirectory() as folder:
        home = home_with_one_plugin(Path(folder))
        for label, measure in [
            ("plugin process start to ready, our interpreter", lambda: start(sys.executable, False, home)),
            ("plugin process start to ready, Hermes' interpreter (its plugin manager)",
             lambda: start(hermes_python, True, home)),
            ("probe of the installation, uncached", lambda: probe(hermes_python, home)),
        ]:
            measure()
            times = [measure() for _ in range(runs)]
            print(f"{label}: median {statistics.median(times) * 1000:.0f} ms, min {min(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()

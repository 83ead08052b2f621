"""The real Hermes Agent 0.19.0, in its own cached venv, driven through subprocesses.

Its pins clash with ours, so it never shares our interpreter. The venv lives
at $HERMES_PEER_VENV, else ~/.cache/hermes-admin-tests/hermes-agent-<version>;
it is created on first use (pip from the package index) and reused after.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

HERMES_VERSION = "0.19.0"
HERE = Path(__file__).parent


def venv_dir() -> Path:
    if os.environ.get("HERMES_PEER_VENV"):
        return Path(os.environ["HERMES_PEER_VENV"])
    return Path.home() / ".cache" / "hermes-admin-tests" / f"hermes-agent-{HERMES_VERSION}"


def _ready(path: Path) -> bool:
    return (path / ".hermes-admin-peer-ok").exists()


def ensure_venv() -> Path:
    """The peer's venv, created once (under a lock, so parallel runs do not race)."""
    path = venv_dir()
    if _ready(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _ready(path):
            venv.EnvBuilder(with_pip=True, clear=True).create(path)
            subprocess.run(
                [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet",
                 f"hermes-agent=={HERMES_VERSION}"],
                check=True, stdout=sys.stderr, stderr=sys.stderr,
            )
            (path / ".hermes-admin-peer-ok").write_text(HERMES_VERSION + "\n")
    return path


def python() -> str:
    return str(ensure_venv() / "bin" / "python")


def _env(home: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    env["HOME"] = str(home or env.get("HOME", "/tmp"))
    env["NO_COLOR"] = "1"
    return env


def build_root(root: Path, profiles: list[str], now: float, plugins_enabled: list[str] = (),
               sessions: dict | None = None, orphans: bool = True) -> dict:
    """Write a root with the real SessionDB; returns {profile: {kind: [ids]}}."""
    spec = {"root": str(root), "now": now, "profiles": profiles, "plugins_enabled": list(plugins_enabled),
            "sessions": sessions or {}, "orphans": orphans}
    done = subprocess.run(
        [python(), str(HERE / "compat" / "peer_build.py"), json.dumps(spec)],
        check=True, capture_output=True, text=True, env=_env(), timeout=300,
    )
    return json.loads(done.stdout)


def run_script(code: str, home: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run Python code with the peer's interpreter (Hermes importable)."""
    return subprocess.run([python(), "-c", code], capture_output=True, text=True, env=_env(home), timeout=timeout)


def hermes(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Hermes' own CLI on one profile home."""
    exe = ensure_venv() / "bin" / "hermes"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=_env(home),
                          timeout=timeout, stdin=subprocess.DEVNULL)

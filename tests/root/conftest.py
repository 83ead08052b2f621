"""The as-root tier: real local users, their homes, and hermes-admin run as root over them.

CI runs as root, so this tier creates real accounts (`useradd`), installs the
project into a venv made from the system's own Python (Debian's /usr/bin/python3,
which every user can run) in a world-readable folder, and runs the installed
`hermes-admin` as root over homes the users prepared, as a hostile user would.

When the suite runs as root these tests must run: anything missing to set them
up (useradd, the system Python, its venv module) fails the suite instead of
skipping it. Run as an ordinary user, the tier is skipped (it needs root to
create accounts), which fails a run in CI or one that asks for this tier
(tests/skips.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path("/usr/bin/python3")
CACHE = Path(os.environ.get("HERMES_ADMIN_ROOT_TIER_DIR", "/var/cache/hermes-admin-tests"))


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="the as-root tier creates local users: run the suite as root (CI does)")
    for item in items:
        if "/root/" in str(item.fspath):
            item.add_marker(skip)


def _need(condition: bool, what: str) -> None:
    if not condition:
        pytest.fail(f"the as-root tier cannot run: {what}", pytrace=False)


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((REPO / "hermes_admin").rglob("*.py")) + [REPO / "pyproject.toml"]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def system_venv() -> Path:
    """A venv of /usr/bin/python3 with this checkout installed (not editable), readable by everyone."""
    _need(SYSTEM_PYTHON.exists(), f"{SYSTEM_PYTHON} is missing (apt-get install python3 python3-venv)")
    _need(shutil.which("useradd") is not None, "useradd is missing")
    CACHE.mkdir(parents=True, exist_ok=True)
    os.chmod(CACHE, 0o755)
    with open(CACHE / "venv.lock", "w") as lock:  # two runs at once never build it together
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_venv(CACHE / "venv")


def _build_venv(venv: Path) -> Path:
    if not (venv / "bin" / "python").exists():
        done = subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--clear", str(venv)], capture_output=True, text=True)
        _need(done.returncode == 0, f"{SYSTEM_PYTHON} -m venv failed: {done.stderr.strip()[-500:]}")
    stamp = venv / ".hermes-admin-source"
    wanted = _source_digest()
    if not stamp.exists() or stamp.read_text() != wanted:
        build = CACHE / "build"
        shutil.rmtree(build, ignore_errors=True)
        shutil.copytree(REPO, build, ignore=shutil.ignore_patterns(".git", "*.egg-info", "__pycache__", "build", ".pytest_cache"))
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", str(build)], capture_output=True, text=True)
        shutil.rmtree(build, ignore_errors=True)
        _need(done.returncode == 0, f"installing hermes-admin into {venv} failed: {done.stderr.strip()[-2000:]}")
        stamp.write_text(wanted)
    for folder, _, files in os.walk(venv):  # world-readable, as a sysadmin's install under /opt is
        os.chmod(folder, os.stat(folder).st_mode | 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)
    return venv


@pytest.fixture(scope="session")
def user_hermes() -> Path:
    """The real Hermes Agent, in a venv of the system Python that every user can run (the compat
    tier's peer lives under root's home): built once, under a lock, and kept in CACHE."""
    from tests import peer

    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / f"hermes-agent-{peer.HERMES_VERSION}"
    with open(CACHE / "hermes.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not peer.ready(peer.HERMES_VERSION, venv):
            done = subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--clear", str(venv)], capture_output=True, text=True)
            _need(done.returncode == 0, f"{SYSTEM_PYTHON} -m venv failed: {done.stderr.strip()[-500:]}")
            done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                   "--disable-pip-version-check", f"hermes-agent=={peer.HERMES_VERSION}"],
                                  capture_output=True, text=True)
            _need(done.returncode == 0, f"installing hermes-agent into {venv} failed: {done.stderr.strip()[-2000:]}")
            (venv / peer.MARKER).write_text(peer.HERMES_VERSION + "\n")
        for folder, _, files in os.walk(venv):
            os.chmod(folder, os.stat(folder).st_mode | 0o755)
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode | 0o444)
    for script in ("peer_build.py", "peer_holder.py"):  # where every user can read them, wherever this checkout is
        shutil.copy(REPO / "tests" / "compat" / script, CACHE / script)
        os.chmod(CACHE / script, 0o644)
    return venv


def as_user(user: "User", argv: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(user.home), "NO_COLOR": "1"}
    return subprocess.run(argv, capture_output=True, text=True, env=dict(base, **(env or {})), timeout=timeout,
                          user=user.uid, group=user.gid, extra_groups=[], cwd=str(user.home), stdin=subprocess.DEVNULL)


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path

    @property
    def root(self) -> Path:
        return self.home / ".hermes"


def chown_tree(path: Path, user: User) -> None:
    """Everything below `path` (links themselves, never followed) becomes the user's."""
    os.lchown(path, user.uid, user.gid)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), user.uid, user.gid)


def root_owned(path: Path) -> list[str]:
    """Every file or folder below `path` that root owns (links included, not followed)."""
    found = []
    for folder, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            full = os.path.join(folder, name)
            if os.lstat(full).st_uid == 0:
                found.append(full)
    return found


@pytest.fixture
def make_user():
    """Real local accounts for one test (each with a 0750 home), removed afterwards."""
    made: list[User] = []

    def make(label: str) -> User:
        name = f"ha{label[:8]}{secrets.token_hex(3)}"
        done = subprocess.run(["useradd", "--create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
                              capture_output=True, text=True)
        _need(done.returncode == 0, f"useradd {name} failed: {done.stderr.strip()}")
        entry = pwd.getpwnam(name)
        user = User(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
        os.chmod(user.home, 0o750)
        made.append(user)
        return user

    yield make
    for user in made:
        subprocess.run(["pkill", "-KILL", "-u", user.name], capture_output=True)
        subprocess.run(["userdel", "--remove", "--force", user.name], capture_output=True)
        shutil.rmtree(user.home, ignore_errors=True)


@pytest.fixture
def admin(system_venv, tmp_path):
    """hermes-admin from the system venv, run as root (or, with `as_user`, as that user)."""
    exe = system_venv / "bin" / "hermes-admin"

    def run(*args: str, as_user: User | None = None, cwd: Path | None = None, env: dict | None = None,
            timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
        base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HERMES_ADMIN_CONFIG": "",
                "HOME": str(as_user.home) if as_user else "/root"}
        base.update(env or {})
        kwargs = {}
        if as_user is not None:
            kwargs = dict(user=as_user.uid, group=as_user.gid, extra_groups=[])
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=base, timeout=timeout,
                              cwd=str(cwd or "/"), input=input if input is not None else "", **kwargs)

    return run


def build_user_root(user: User, profiles: dict[str, int] | None = None, now: float | None = None) -> dict:
    """A Hermes root in the user's home (the synthetic scenario), owned by the user; returns its kinds."""
    import time

    from hermes_admin.synth.scenario import build_root

    kinds = build_root(user.root, profiles or {"default": 30, "work": 30}, now=now or time.time())
    chown_tree(user.root, user)
    return kinds


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


__all__ = ["User", "build_user_root", "chown_tree", "root_owned", "mode", "sys"]

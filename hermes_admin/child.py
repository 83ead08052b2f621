"""How hermes-admin starts a Python process of its own (a worker, the plugin worker, the file remover).

In isolated mode (`-I`: no current folder, no user site, no PYTHON* variables on
sys.path), importing this very copy of the package by its absolute location:
a `hermes_admin/` folder in whatever folder the process starts in is never
imported, whoever planted it there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hermes_admin

# the system's own folders only: no user's folder decides which program a child runs
PATH = "/usr/local/bin:/usr/bin:/bin"


def package_parent() -> str:
    """The folder that holds the running `hermes_admin` package."""
    return str(Path(hermes_admin.__file__).resolve().parent.parent)


def argv(module: str, *args: str) -> list[str]:
    """`module`'s main() in an isolated interpreter; its own arguments start at sys.argv[2]."""
    boot = f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import main; sys.exit(main())"
    return [sys.executable, "-I", "-c", boot, package_parent(), *args]


def environment(home: str, user: str, **extra: str) -> dict[str, str]:
    """A clean environment: who the process is, a fixed PATH, the language; nothing else inherited."""
    env = {"HOME": home, "USER": user, "LOGNAME": user, "PATH": PATH, "LANG": os.environ.get("LANG") or "C.UTF-8"}
    env.update(extra)
    return env


def own_environment(**extra: str) -> dict[str, str]:
    """The clean environment of the account this process runs as (for its own children)."""
    import pwd

    try:
        entry = pwd.getpwuid(os.geteuid())
        home, user = entry.pw_dir, entry.pw_name
    except KeyError:
        home, user = os.environ.get("HOME", "/"), str(os.geteuid())
    return environment(home, user, **extra)


# -- what our children leave behind ------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36  # prctl's number for it (linux/prctl.h)
_ours: set[int] = set()  # children we started ourselves (the file remover, plugin workers)


def ours(pid: int) -> None:
    """A child this process started and waits for itself: never taken for an orphan."""
    _ours.add(pid)


def become_subreaper() -> None:
    """Linux: processes our children leave behind (double-forked, `setsid` included) become ours."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[1].decode() == me:  # the field after the state is the parent's pid
            found.append(int(name))
    return found


def reap_orphans() -> int:
    """Kill and reap every child of ours we did not start ourselves; returns how many."""
    killed = 0
    for _ in range(50):  # a plugin's leftovers may fork while we kill: a few rounds
        strays = [pid for pid in _children() if pid not in _ours]
        if not strays:
            break
        for pid in strays:
            try:
                os.kill(pid, 9)
                killed += 1
            except ProcessLookupError:
                pass
        for pid in strays:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    return killed

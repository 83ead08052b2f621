"""How hermes-admin starts a Python process of its own (a worker, the remover process).

In isolated mode (`-I`: no current folder, no user site, no PYTHON* variables on
sys.path), importing this very copy of the package by its absolute location:
a `hermes_admin/` folder in whatever folder the process starts in is never
imported, whoever planted it there.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import hermes_admin

# the system's own folders only: no user's folder decides which program a child runs
PATH = "/usr/local/bin:/usr/bin:/bin"


def package_parent() -> str:
    """The folder that holds the running `hermes_admin` package."""
    return str(Path(hermes_admin.__file__).resolve().parent.parent)


PR_SET_DUMPABLE = 4  # prctl's numbers (linux/prctl.h)
PR_GET_DUMPABLE = 3
# Before anything else: the process is no longer dumpable, so its owner can neither trace it nor take
# its descriptors (ptrace, pidfd_getfd, /proc/PID/fd, /proc/PID/mem all need a dumpable process of
# hers). Our ids changed before the exec, so the exec made it dumpable again: this undoes that.
UNDUMPABLE = f"import ctypes; ctypes.CDLL(None).prctl({PR_SET_DUMPABLE}, 0, 0, 0, 0); "


def argv(module: str, *args: str, private: bool = False) -> list[str]:
    """`module`'s main() in an isolated interpreter; its own arguments start at sys.argv[2].
    `private`: not dumpable from its first statement on (a worker: its pipes are root's conversation)."""
    boot = f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import main; sys.exit(main())"
    return [sys.executable, "-I", "-c", (UNDUMPABLE if private else "") + boot, package_parent(), *args]


def dumpable() -> bool | None:
    """Whether this process may be traced by its owner (None: cannot tell, not Linux)."""
    try:
        import ctypes
        return bool(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    except (OSError, AttributeError):
        return None


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
_ours: set[int] = set()  # children we started ourselves (the remover process, plugin processes)


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


# -- a short conversation with a program we do not trust to end ---------------------

def write_within(fd: int, data: bytes, seconds: float, poll_s: float = 0.1) -> str | None:
    """All of `data` to a non-blocking pipe within `seconds`: None once written, else why not (a
    reader that stopped, was stopped or traced, reads nothing: the wait has a deadline)."""
    deadline = time.monotonic() + seconds
    while data:
        left = deadline - time.monotonic()
        if left <= 0:
            return f"did not read for {seconds:g} s"
        _, ready, _ = select.select([], [fd], [], min(left, poll_s))
        if not ready:
            continue
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            continue
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def run_bounded(argv: list[str], timeout: float, limit: int, input: bytes = b"", **popen) -> subprocess.CompletedProcess:
    """`argv` run to its end, in a session of its own, its output read (at most `limit` bytes of
    each stream kept) until `timeout` seconds have passed: then it is killed with its whole process
    group (SIGKILL ends a stopped or traced process too) and subprocess.TimeoutExpired is raised.
    Unlike subprocess.run(timeout=), no read or write here can block past the deadline, and what it
    left running in its group goes with it."""
    deadline = time.monotonic() + timeout
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input else subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, close_fds=True, **popen)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    out = {out_fd: bytearray(), err_fd: bytearray()}
    readers = set(out)
    writer = proc.stdin.fileno() if input else None
    if writer is not None:
        os.set_blocking(writer, False)
    try:
        while readers or writer is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                if proc.poll() is None or writer is not None:
                    raise subprocess.TimeoutExpired(argv, timeout)
                break  # it ended; whatever else holds its pipes is not waited for
            ready_r, ready_w, _ = select.select(list(readers), [writer] if writer is not None else [], [], min(left, 0.5))
            for fd in ready_w:
                try:
                    input = input[os.write(fd, input):]
                except BlockingIOError:
                    continue
                except OSError:
                    input = b""
                if not input:
                    proc.stdin.close()
                    writer = None
            for fd in ready_r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    readers.discard(fd)
                elif len(out[fd]) <= limit:
                    out[fd] += chunk[:limit + 1 - len(out[fd])]
        left = max(0.0, deadline - time.monotonic())
        try:
            code = proc.wait(left)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(argv, timeout) from None
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    return subprocess.CompletedProcess(argv, code, bytes(out[out_fd]), bytes(out[err_fd]))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    proc.wait()

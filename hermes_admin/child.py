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
import threading
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
# hers). For a child that runs as the account that started it (no boundary crossed): an exec makes
# a process dumpable, and this undoes it as early as an interpreter can.
UNDUMPABLE = f"import ctypes; ctypes.CDLL(None).prctl({PR_SET_DUMPABLE}, 0, 0, 0, 0); "


def becoming(uid: int, gid: int, groups) -> str:
    """The first lines of a child that root execs as root and that then becomes `uid` itself, never
    dumpable by `uid` at any instant. Exec'd as root, no process of hers may trace it or take its
    descriptors (every one of its ids is root's). Then, before anything of ours is imported or read:
    its groups and gids become hers, then its real and effective uids with the saved one still
    root's (so, whatever the kernel's `fs.suid_dumpable` makes of that change, her ids do not match
    all of its own: still out of her reach); it makes itself not dumpable; and only then gives up the
    saved uid, which changes no effective id, so the kernel leaves it not dumpable. It checks that
    and every id, or exits with one line. What the interpreter read before (its own installation,
    isolated: no PYTHON* variables, no user site, the current folder /) is root's."""
    uid, gid, groups = int(uid), int(gid), sorted({int(g) for g in groups})
    want = f"(({uid},) * 3, ({gid},) * 3, {set(groups) | {gid}!r})"
    return (
        "import ctypes, os, sys\n"
        "prctl = ctypes.CDLL(None, use_errno=True).prctl\n"
        "try:\n"
        f"    os.setgroups({groups!r})\n"
        f"    os.setresgid({gid}, {gid}, {gid})\n"
        f"    os.setresuid({uid}, {uid}, 0)\n"
        f"    if prctl({PR_SET_DUMPABLE}, 0, 0, 0, 0) != 0:\n"
        "        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_DUMPABLE) failed')\n"
        f"    os.setresuid({uid}, {uid}, {uid})\n"
        "except OSError as exc:\n"
        f"    sys.exit(f'cannot become uid {uid}: {{exc}}')\n"
        f"if prctl({PR_GET_DUMPABLE}, 0, 0, 0, 0) != 0 or (os.getresuid(), os.getresgid(), "
        f"set(os.getgroups()) | {{{gid}}}) != {want}:\n"
        f"    sys.exit('still dumpable or not exactly uid {uid} after becoming it')\n"
    )


def argv(module: str, *args: str, private: bool = False, become: tuple[int, int, list[int]] | None = None) -> list[str]:
    """`module`'s main() in an isolated interpreter; its own arguments start at sys.argv[2].
    `private`: not dumpable from its first statement on (a worker: its pipes are root's conversation).
    `become` (uid, gid, groups): exec'd as root, the child becomes that account itself (`becoming`),
    never dumpable by it; a failure to import this installation as that account is one line."""
    boot = f"import sys; sys.path.insert(0, sys.argv[1]); from {module} import main; sys.exit(main())"
    if become is not None:
        return [sys.executable, "-I", "-c", becoming(*become) + (
            "sys.path.insert(0, sys.argv[1])\n"
            "try:\n"
            f"    from {module} import main\n"
            "except Exception as exc:  # this account cannot read the installation\n"
            f"    sys.exit(f'uid {become[0]} cannot load hermes-admin (the interpreter {{sys.executable}}, "
            "the package in {sys.argv[1]}): {exc!r}')\n"
            "sys.exit(main())\n"), package_parent(), *args]
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


# -- a child's stderr, never ours --------------------------------------------------

RELAY_PIECE = 4096  # a line longer than this is passed on in pieces (each written whole: PIPE_BUF)


def relay_stderr(stream, name: str) -> threading.Thread:
    """What a child writes on a stderr pipe of its own (`stream`), passed on to this process's stderr
    a line at a time until every holder has closed it; then `stream` is closed. So the child never
    holds our stderr itself: a worker's is root's log pipe, and a child exec'd as its owner is
    dumpable by her (she could take from it whatever it holds)."""

    def copy() -> None:
        fd, held, open_ = stream.fileno(), b"", True
        try:
            while True:
                chunk = os.read(fd, 65536)
                held += chunk
                while b"\n" in held or len(held) >= RELAY_PIECE or (held and not chunk):
                    cut = min(held.find(b"\n") + 1 or len(held), RELAY_PIECE)
                    piece, held = held[:cut], held[cut:]
                    if open_:
                        try:
                            os.write(2, piece)
                        except OSError:  # ours is gone: what follows is read and dropped
                            open_ = False
                if not chunk:
                    return
        except OSError:
            return
        finally:
            stream.close()

    thread = threading.Thread(target=copy, name=name, daemon=True)
    thread.start()
    return thread


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

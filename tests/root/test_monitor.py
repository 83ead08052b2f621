"""Root as the monitor of its workers (issue 47): the reply pipe is the worker's alone (its owner can
neither trace it nor take its descriptors), nothing a worker says makes root's run exit 70 or crash
on a row, and one owner's stalled worker delays no other owner's profiles.

A lying worker is played by the test itself: as root it takes a copy of the worker's reply pipe with
`pidfd_getfd` (what the owner could do to a dumpable worker) and writes what a liar would."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.root.conftest import as_user, chown_tree, root_owned
from tests.root.test_attacks import (STANDARD, admin, assert_maintained, explain, plant_plugin,  # noqa: F401
                                     prepare, set_config)
from tests.root.test_bounds import _roots, _workers_of, processes_of, stopping_her_workers

SYS_PIDFD_GETFD = 438  # x86_64, aarch64 and the other unified-table architectures
HELLO = {"t": "hello", "uid": 0, "gid": 0, "groups": []}
SLOW = '''
import time
def register(ctx):
    ctx.register_hook("on_session_delete", lambda session_id, **kw: time.sleep(1))
'''
LOUD = '''
import sys, time
print("the loud plugin speaks", file=sys.stderr, flush=True)
def register(ctx):
    ctx.register_hook("on_session_delete", lambda session_id, **kw: time.sleep(1))
'''

HIJACK = r'''
import ctypes, errno, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)


def attempt(pid):
    """What she gets of process `pid`: its fd 1 by pidfd_getfd, its fd list, a ptrace attach."""
    got = {}
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        return {"pidfd_open": errno.errorcode[exc.errno]}
    fd = libc.syscall(438, pidfd, 1, 0)
    got["pidfd_getfd"] = "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
    try:
        os.listdir(f"/proc/{pid}/fd")
        got["proc_fd"] = "ok"
    except OSError as exc:
        got["proc_fd"] = errno.errorcode[exc.errno]
    PTRACE_ATTACH, PTRACE_DETACH = 16, 17
    if libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == 0:
        got["ptrace"] = "ok"
        os.waitpid(pid, 0)
        libc.ptrace(PTRACE_DETACH, pid, 0, 0)
    else:
        got["ptrace"] = errno.errorcode[ctypes.get_errno()]
    return got


mine = os.fork()  # a dumpable process of hers: the control, where every attempt works
if mine == 0:
    time.sleep(60)
    os._exit(0)
result = {"control": attempt(mine)}
os.kill(mine, 9)
os.waitpid(mine, 0)
result["worker"] = attempt(int(sys.argv[1]))
print(json.dumps(result))
'''


def _pidfd_getfd(pid: int, fd: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        return got
    finally:
        os.close(pidfd)


def _root_owned_proc(pid: int) -> bool:
    """Its /proc/PID/fd is root's: the process made itself not dumpable (or it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/fd").st_uid == 0
    except OSError:
        return True


def _config(tmp_path: Path, idle: int = 30) -> str:
    path = tmp_path / "admin.yaml"
    path.write_text(f"defaults:\n  worker_idle_timeout: {idle}\n  worker_timeout: 300\n")
    os.chmod(path, 0o600)
    return str(path)


def _start(system_venv, *args) -> subprocess.Popen:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HERMES_ADMIN_CONFIG": "", "HOME": "/root"}
    return subprocess.Popen([str(system_venv / "bin" / "hermes-admin"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd="/")


def _her_worker(user, proc: subprocess.Popen, seconds: float = 60) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        found = _workers_of(user)
        if found:
            return found[0]
        time.sleep(0.002)
    raise AssertionError("her worker was never seen")


def _done(proc: subprocess.Popen, timeout: float = 120) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_she_can_neither_take_her_workers_pipe_nor_trace_it(make_user, system_venv, tmp_path):
    """While root's run waits on her worker (her plugin is slow), she tries what took its reply pipe
    before: pidfd_getfd, /proc/PID/fd, ptrace. Each is refused (EPERM, EACCES), though each works on
    a process of hers that is dumpable."""
    alice = make_user("alice")
    prepare(alice, {"default": 30})
    set_config(alice.root, plugins=["slow"])
    plant_plugin(alice.root, "slow", SLOW)
    chown_tree(alice.root, alice)
    proc = _start(system_venv, "--root", str(alice.root), "run", "--yes")
    try:
        worker = _her_worker(alice, proc)
        assert _root_owned_proc(worker)  # as soon as it is hers, it is not dumpable (child.becoming)
        try:
            os.kill(worker, signal.SIGSTOP)  # it holds still while she tries (she may stop it herself too)
            tried = as_user(alice, [str(system_venv / "bin" / "python"), "-c", HIJACK, str(worker)], timeout=60)
        finally:
            os.kill(worker, signal.SIGCONT)
    finally:
        done = _done(proc)
    assert tried.returncode == 0, tried.stderr
    got = json.loads(tried.stdout)
    assert got["control"] == {"pidfd_getfd": "ok", "proc_fd": "ok", "ptrace": "ok"}, got
    assert got["worker"] == {"pidfd_getfd": "EPERM", "proc_fd": "EACCES", "ptrace": "EPERM"}, (got, explain(done))
    assert done.returncode in (0, 1), explain(done)
    assert root_owned(alice.home) == []


STARTS = 30  # worker starts watched
CONTROL = "hermes-admin-test-control"
WORKER = "hermes_admin.profile.worker"
WATCHER = r"""
import ctypes, errno, json, os, select, sys, time
libc = ctypes.CDLL(None, use_errno=True)
me, seen, fresh = str(os.getpid()), set(), {}  # fresh: pid -> (its pidfd, when it appeared)
grabbed, workers, refused = [], set(), {}


def command(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            return source.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


print("ready", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:  # until the test closes stdin
    now = time.monotonic()
    for name in os.listdir("/proc"):
        if name.isdigit() and name not in seen and name != me:
            seen.add(name)
            try:
                fresh[int(name)] = (os.pidfd_open(int(name)), now)
            except OSError:
                pass
    for pid, (pidfd, since) in list(fresh.items()):
        line = command(pid)
        if @WORKER@ in line and @VENV@ in line:  # one of this test's workers (the pid is never reused meanwhile)
            workers.add(pid)
        for fd in (1, 2):  # the reply pipe, the log pipe
            got = libc.syscall(438, pidfd, fd, 0)
            if got >= 0:
                grabbed.append({"pid": pid, "fd": fd, "what": os.readlink(f"/proc/self/fd/{got}"), "command": line})
                os.close(got)
                continue
            code = errno.errorcode.get(ctypes.get_errno(), "?")
            if code == "ESRCH" or now - since > 20:
                os.close(pidfd)
                del fresh[pid]
                break
            if pid in workers:
                refused[code] = refused.get(code, 0) + 1
for taken in grabbed:
    taken["worker"] = taken["pid"] in workers
print(json.dumps({"grabbed": grabbed, "workers": sorted(workers), "refused": refused}))
"""


@pytest.mark.alone  # its watcher must be fast enough to win a race against a process start: a core of its own
def test_at_no_instant_of_a_workers_life_can_she_take_its_pipe(make_user, admin, system_venv):
    """A process of hers, started before root's commands, tries pidfd_getfd on the reply and log
    pipes of every process from the instant it appears to its end, over STARTS worker starts: it
    never gets a worker's. Between the starts, root starts a control as her the other way (the
    kernel switches to her ids, then the exec; not dumpable from its first statement on): the same
    watcher takes the control's pipe in the instants before that statement, so it is fast enough to
    have taken a worker's, were any instant of the worker's life open to her."""
    from hermes_admin import child

    alice = make_user("alice")
    prepare(alice, {"default": 30})
    python, venv = str(system_venv / "bin" / "python"), str(system_venv) + "/"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(alice.home)}
    hers = dict(user=alice.uid, group=alice.gid, extra_groups=[], env=env)
    # only this test's workers count (those of its venv): another suite on this machine may run workers too,
    # and a user it deleted may have left processes under the uid hers reuses
    watching = WATCHER.replace("@WORKER@", repr(WORKER)).replace("@VENV@", repr(venv))
    watcher = subprocess.Popen([python, "-c", watching], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=str(alice.home), **hers)
    failed = []
    try:
        assert watcher.stdout.readline().strip() == "ready", watcher.stderr.read()
        for _ in range(STARTS):
            control = subprocess.Popen([python, "-I", "-c", child.UNDUMPABLE + "import time; time.sleep(0.3)",
                                        CONTROL], stdout=subprocess.PIPE, cwd="/", **hers)
            control.communicate(timeout=60)
            done = admin("--root", str(alice.root), "profiles", "--json")
            if done.returncode != 0:
                failed.append(explain(done))
    finally:
        out, err = watcher.communicate(input="", timeout=120)
    assert watcher.returncode == 0, err
    assert not failed, failed[0]
    got = json.loads(out)
    assert len(got["workers"]) >= STARTS, got  # every worker was seen, and tried while it lived
    assert [g for g in got["grabbed"] if g["worker"]] == [], got["grabbed"]
    assert set(got["refused"]) == {"EPERM"}, got["refused"]
    controls = [g for g in got["grabbed"] if CONTROL in g["command"] and g["fd"] == 1]
    assert controls, ("the watcher never took a control's pipe: too slow to prove anything", got)


def _pipes(pid: int) -> set[str]:
    """The pipes process `pid` holds (`pipe:[inode]`)."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link.startswith("pipe:"):
            found.add(link)
    return found


def _plugin_processes(user) -> list[int]:
    """Her processes serving plugins (in_hermes.py)."""
    return processes_of(user, b"in_hermes.py")


def test_her_plugin_process_holds_none_of_roots_pipes(make_user, system_venv):
    """Her plugin process runs as her, exec'd by her worker: dumpable, so she may take whatever it
    holds. It holds none of the pipes between root and her worker (its stderr is a pipe of the
    worker's, which passes its lines on), and what it prints still reaches root's stderr."""
    alice = make_user("alice")
    prepare(alice, {"default": 30})
    set_config(alice.root, plugins=["loud"])
    plant_plugin(alice.root, "loud", LOUD)
    chown_tree(alice.root, alice)
    proc = _start(system_venv, "--root", str(alice.root), "run", "--yes")
    held = None
    try:
        worker = _her_worker(alice, proc)
        deadline = time.monotonic() + 60
        while held is None and time.monotonic() < deadline and proc.poll() is None:
            roots = _pipes(proc.pid)  # the host's ends of its pipes to the worker (and its own stdout, stderr)
            for plugin in _plugin_processes(alice):
                held = (_pipes(plugin), roots, _pipes(worker))
            time.sleep(0.01)
    finally:
        done = _done(proc)
    assert held is not None, ("her plugin process was never seen", explain(done))
    plugin_pipes, roots, worker_pipes = held
    assert worker_pipes & roots, held  # the check sees root's pipes where they are
    assert plugin_pipes and not plugin_pipes & roots, held
    assert done.returncode in (0, 1), explain(done)
    assert "the loud plugin speaks" in done.stderr, explain(done)


def _forge(user, system_venv, tmp_path, lines: list[dict], *args) -> subprocess.CompletedProcess:
    """Root's run over her root and another's; her worker, stopped as soon as seen, says `lines`
    through a copy of its reply pipe (as she could, were it dumpable); it is never continued."""
    bob = user("bob")
    alice = user("alice")
    kinds = {u.name: prepare(u) for u in (alice, bob)}
    proc = _start(system_venv, *_roots(alice, bob), "--config", _config(tmp_path), *args)
    try:
        worker = _her_worker(alice, proc)
        os.kill(worker, signal.SIGSTOP)
        pipe = _pidfd_getfd(worker, 1)
        os.write(pipe, b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        os.close(pipe)
    finally:
        done = _done(proc)
    return done, alice, bob, kinds


def test_a_forged_internal_error_fails_her_profiles_not_roots_run(make_user, system_venv, tmp_path):
    end = {"t": "end", "v": {"dry_run": False, "problems": [], "policies": {}, "findings": [], "internal": True}}
    done, alice, bob, kinds = _forge(make_user, system_venv, tmp_path, [HELLO, end], "run", "--yes")
    assert done.returncode == 2, explain(done)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr.replace(
        "reported an internal error", ""), explain(done)
    mine = [line for line in done.stderr.splitlines() if "error" in line]
    assert mine and all(str(alice.root) in line for line in mine), explain(done)
    for name in kinds[bob.name]:
        home = bob.root if name == "default" else bob.root / "profiles" / name
        assert_maintained(home, kinds[bob.name][name], f"bob's {name}")


def test_a_row_without_home_is_her_workers_error_not_exit_70(make_user, system_venv, tmp_path):
    row = {"t": "data", "k": "exports", "v": {"file": "/x.jsonl.gz", "profile": "default", "units": 1, "sessions": 1,
                                               "messages": 1, "reasons": ["prune"], "bytes": 1}}
    done, alice, bob, _ = _forge(make_user, system_venv, tmp_path, [HELLO, row], "exports", "list")
    assert done.returncode == 2, explain(done)
    assert "Traceback" not in done.stderr, explain(done)
    assert "broke the protocol (a row of exports: home: missing)" in done.stderr, explain(done)
    assert all(alice.name in line or str(alice.root) in line
               for line in done.stderr.splitlines() if "error" in line), explain(done)


def test_her_stalled_worker_delays_no_other_owners_profiles(make_user, admin, tmp_path):
    """She stops her worker (first in the order) at once; Bob's profiles are done before her worker's
    idle deadline (30 s) could pass, not after it, and that deadline still ends hers; the report keeps
    the order."""
    alice, bob = make_user("alice"), make_user("bob")
    kinds = {user.name: prepare(user) for user in (alice, bob)}
    stopped: list[int] = []
    stopper = stopping_her_workers(alice, stopped)
    began = time.time()
    done = admin(*_roots(alice, bob), "--config", _config(tmp_path, idle=30), "run", "--yes", "--json", timeout=180)
    took = time.time() - began
    stopper.join()

    assert stopped, "her worker was never seen"
    assert done.returncode == 2 and took >= 30, explain(done)  # hers ended at her idle deadline
    record = json.loads((bob.root / ".hermes-admin" / "last-run.json").read_text())
    # his were done before hers could have been killed (her worker began after `began`): not after it
    assert record["runs"][-1]["finished"] < began + 30, (record["runs"][-1], explain(done))
    for name in kinds[bob.name]:
        home = bob.root if name == "default" else bob.root / "profiles" / name
        assert_maintained(home, kinds[bob.name][name], f"bob's {name}")
    homes = [r["home"] for r in json.loads(done.stdout)["results"]]
    assert homes == sorted(homes, key=lambda h: not h.startswith(str(alice.root))), homes  # hers (none) first
    assert root_owned(alice.home) == [] and root_owned(bob.home) == []

"""The worker: one process per owner, started by the host, that has irrevocably become that owner.

Root's host (host/workers.py) starts it as

    python -I -c BOOT PACKAGE_PARENT JOB_FD       (child.argv, become=the owner)

with a clean environment, / as its current folder, stdin from /dev/null, no
controlling terminal, and no descriptor but the job pipe (JOB_FD), the reply pipe
(stdout) and the log pipe (stderr). It is exec'd as root, in hermes-admin's own
interpreter; BOOT (child.becoming) switches it to the owner's groups, gid and uid
before it imports or reads anything of ours, never dumpable by her at any instant
in between: she may stop or kill it, but neither trace it nor take a copy of its
pipes (`pidfd_getfd`), so what root reads on them is this process's alone
(OpenSSH's monitor keeps its unprivileged child so too). A user's own run forced
into a worker process (HERMES_ADMIN_WORKER=process) crosses no boundary: its first
statement (child.UNDUMPABLE) makes it not dumpable all the same. Before it reads
its job it checks that, and who it is: every uid and gid (real, effective, saved)
the owner's, exactly the owner's groups, and no way back to root; otherwise it
refuses to go on. Then it does the job (profile/jobs.py), each home as its current
folder, and writes the report.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from hermes_admin import child
from hermes_admin.model import Owner
from hermes_admin.protocol import Job, ProtocolError, Writer, beat_every

MAX_JOB = 16 << 20  # a job lists profiles and their layers; far below this
PR_SET_NO_NEW_PRIVS = 38  # prctl's number for it (linux/prctl.h)
REFUSED = 70  # exit status of a worker that will not run as it is


def identity_problem(owner: Owner) -> str | None:
    """Why this process is not exactly `owner` with no way back, or None."""
    if os.getresuid() != (owner.uid,) * 3:
        return f"uids are {os.getresuid()}, not {owner.uid}"
    if os.getresgid() != (owner.gid,) * 3:
        return f"gids are {os.getresgid()}, not {owner.gid}"
    if set(os.getgroups()) - {owner.gid} != set(owner.groups) - {owner.gid}:
        return f"groups are {sorted(os.getgroups())}, not {sorted(owner.groups)}"
    if owner.uid == 0:
        return None  # root's own homes: nothing to give up
    for attempt in (lambda: os.setuid(0), lambda: os.seteuid(0), lambda: os.setgid(0), lambda: os.setegid(0)):
        try:
            attempt()
        except PermissionError:
            continue
        return "could become root again"
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(("CapEff:", "CapPrm:")) and int(line.split()[1], 16):
                    return f"still holds capabilities ({line.strip()})"
    except OSError:
        pass
    return None


def _no_new_privileges() -> None:
    """Nothing this worker starts (plugins included) can gain privileges through a setuid program."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def main() -> int:
    if child.dumpable():  # its boot makes it not dumpable: a worker its owner could trace refuses
        print("worker refuses to run: its owner could trace it (still dumpable)", file=sys.stderr)
        return REFUSED
    job_fd = int(sys.argv[2])
    replies = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # whatever else prints goes to the log pipe, never into the protocol
    sys.stdout = sys.stderr
    with os.fdopen(job_fd, "rb") as source:
        line = source.readline(MAX_JOB)
    try:
        job = Job.decode(line)
    except ProtocolError as exc:  # one clear line, not a traceback: the host relays it
        print(f"worker refuses the job: {exc}", file=sys.stderr)
        return REFUSED
    problem = identity_problem(job.owner)
    if problem:
        print(f"worker for {job.owner.user} refuses to run: {problem}", file=sys.stderr)
        return REFUSED
    if job.owner.uid != 0:
        _no_new_privileges()

    from hermes_admin import stopping
    from hermes_admin.profile.jobs import serve

    def stop(signum, frame):  # after the current transaction, then report what was done
        stopping.request()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    writer = Writer(replies.write)
    writer.hello(os.getuid(), os.getgid(), sorted(os.getgroups()))
    with writer.beating(beat_every(job.context.idle_timeout)):  # the host's sign of life
        run = serve(job, isolated=True)
    writer.run(run)
    replies.flush()
    return 0

"""Deliver events to one profile's plugins, in a plugin process, bounded in time.

One plugin process per profile (`profile/in_hermes.py`, serving), started on the
first event, in the interpreter of the Hermes installation that serves the
profile (`profile/installation.py`), where Hermes' own plugin manager loads what
Hermes would; without one, in ours, with the plugins `hooks.discovery` found.
Each callback is bounded by the profile's `plugins.hook_callback_timeout`: past
it the process is killed, restarted, and the event goes on with the next callback. A raising or
crashing callback is reported once per plugin and kind of failure (a HookFailure
value, hook_failures.py), and how often it came back at the end of each engine call
(`repeats`); the others still run.

The plugin process runs plugin code, so nothing it writes is trusted: each reply is a
size-bounded JSON object of the one shape the protocol expects next, and every
wait has a deadline kept here, whatever the process writes. A stop request
(SIGTERM/SIGINT) lets the event already sent finish (it is then delivered once),
and ends a callback still running five seconds later: that event stays in the
outbox, undelivered, for the next run; no later event is sent. What a plugin started and left behind
(double-forked, `setsid` included) is killed when its plugin process goes: this process
is their child subreaper (child.py).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Mapping

from hermes_admin import child, shown, stopping
from hermes_admin import hook_failures as failed
from hermes_admin.hook_failures import HookFailure
from hermes_admin.model import Profile
from hermes_admin.profile import in_hermes
from hermes_admin.profile.hooks.discovery import PluginInfo
from hermes_admin.profile.installation import Installation

STARTUP_TIMEOUT_S = 60.0  # a cold import of Hermes and its plugins on a slow disk
SLOW_START_S = 3.0  # a start longer than this is said at once (a run otherwise silent that long looks hung)
MAX_REPLY = 64 << 10  # one reply line; a longer one is a broken plugin process
POLL_S = 0.5  # how often a wait looks at stop requests
STOP_GRACE_S = 5.0  # after a stop request, how long an event already sent may take to finish
SEND_TIMEOUT_S = 10.0  # a message a plugin process does not take in this long: it is stopped, not slow
RELAY_WAIT_S = 2.0  # after the plugin process is gone, how long its last stderr lines may take to pass


class PluginProcessGone(Exception):
    pass


class PluginProcessBroke(PluginProcessGone):
    """The plugin process wrote something that is not the protocol."""


class DeliveryStopped(Exception):
    """A stop was requested while a callback ran: the event is left for the next run."""


class HookBus:
    def __init__(self, profile: Profile, plugins: list[PluginInfo], timeout: float, log=None,
                 installation: Installation | None = None, notes: tuple[str, ...] = (), verbose: int = 0,
                 hermes_env: Mapping[str, str] | None = None):
        """`installation`: Hermes' interpreter, whose plugin manager decides the plugins (`plugins`
        is then unused); else ours, loading `plugins`. `notes`: told with the first start.
        `hermes_env`: what of the invoker's environment Hermes' plugin discovery reads (the job's)."""
        self.profile = profile
        self.verbose = verbose  # the job's -v, told to the plugin process
        self.hermes_env = dict(hermes_env or {})
        self.plugins = [p for p in plugins if p.enabled]
        self.installation = installation
        self.notes = list(notes)
        self.timeout = timeout
        self.log = log or (lambda message: print(f"hermes-admin: {shown.clean(message, 2000)}", file=sys.stderr))
        self.proc: subprocess.Popen | None = None
        self._stderr = None  # the thread passing the plugin process's stderr on to ours (child.relay_stderr)
        self.callbacks: list[str] = []
        self._buffer = b""
        self._running = 0
        # (plugin, kind of failure) -> the message it was told with, and the times seen since
        self._reported: dict[tuple[str | None, str], tuple[str, int]] = {}

    @property
    def active(self) -> bool:
        return self.installation is not None or bool(self.plugins)

    # -- the plugin process -------------------------------------------------

    def _start(self) -> list[HookFailure]:
        # This process already is the home's owner (privilege separation: host/workers.py); a
        # plugin never runs as root over another user's home, even if that were ever not so.
        if os.geteuid() == 0 and os.lstat(self.profile.home).st_uid != 0:
            raise PluginProcessGone("refusing to run another user's plugins as root")
        # A clean environment, the in_hermes.py script alone (by its path) in an isolated interpreter,
        # a session of its own, no descriptor but its own pipes: what it prints reaches our stderr
        # through a pipe of its own (its owner may trace it: it never holds root's log pipe).
        env = child.own_environment(HERMES_HOME=str(self.profile.home), PYTHONUNBUFFERED="1",
                                    **hermes_environment(self.hermes_env))
        python = self.installation.python if self.installation else sys.executable
        child.become_subreaper()
        self.proc = subprocess.Popen(
            in_hermes.command(python, "serve"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=True,
            cwd=str(self.profile.home), start_new_session=True,
        )
        child.ours(self.proc.pid)
        self._stderr = child.relay_stderr(self.proc.stderr, "hermes-admin-plugin-stderr")
        self._buffer = b""
        self._send({
            "home": str(self.profile.home), "profile": self.profile.name, "verbose": self.verbose,
            "hermes": self.installation is not None,
            "plugins": [{"key": p.key, "source": p.source, "location": p.location} for p in self.plugins],
        })
        started = time.monotonic()
        try:
            ready = self._receive(started + SLOW_START_S)
            if ready is None:
                where = f"Hermes' interpreter ({python})" if self.installation else "hermes-admin's interpreter"
                self.log(f"profile '{self.profile.shown}': starting plugins in {where}: over {SLOW_START_S:g} s "
                         f"so far, waiting up to {STARTUP_TIMEOUT_S:g} s")
                ready = self._receive(started + STARTUP_TIMEOUT_S)
                if ready is not None:
                    self.log(f"profile '{self.profile.shown}': plugins started after "
                             f"{time.monotonic() - started:.1f} s")
        except PluginProcessGone:
            ready = None
        except BaseException:  # a stop while it starts: no half-started plugin process is left to "deliver"
            self._kill()
            self.callbacks = []
            raise
        callbacks = ready.get("callbacks") if isinstance(ready, dict) and ready.get("ready") is True else None
        errors = ready.get("errors") if isinstance(ready, dict) else None
        if not _texts(callbacks) or not _load_errors(errors):
            self._kill()
            raise PluginProcessGone("plugin process did not start")
        self.callbacks = [shown.clean(c, 200) for c in callbacks]
        notes, self.notes = self.notes, []  # told once, with the first start
        failures = [HookFailure(None, failed.INTERPRETER, shown.clean(note, 2000)) for note in notes]
        for error in errors:  # said again at each start: once, then counted as repeats
            plugin = error["plugin"]
            failures += self._failure(None if plugin is None else shown.clean(plugin, 200), failed.NOT_LOADED,
                                      error["message"])
        return failures

    def _send(self, message: dict) -> None:
        """One line to the plugin process, never blocking past SEND_TIMEOUT_S (a stopped one reads nothing)."""
        fd = self.proc.stdin.fileno()
        os.set_blocking(fd, False)
        why = child.write_within(fd, (json.dumps(message) + "\n").encode(), SEND_TIMEOUT_S, POLL_S)
        if why is not None:
            raise PluginProcessGone(f"plugin process: {why}")

    def _receive(self, deadline: float) -> dict | None:
        """The next reply, or None when `deadline` (monotonic) passes first.

        After a stop request, an event already sent may still finish within STOP_GRACE_S (then it is
        marked delivered and never repeated); a callback still running past that raises
        DeliveryStopped, and its event stays in the outbox for the next run.
        """
        out = self.proc.stdout
        while b"\n" not in self._buffer:
            if stopping.requested() and time.monotonic() >= stopping.requested_at() + STOP_GRACE_S:
                raise DeliveryStopped()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([out], [], [], min(left, POLL_S))
            if not ready:
                continue
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                raise PluginProcessGone("plugin process exited")
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY and b"\n" not in self._buffer:
                raise PluginProcessBroke(f"a reply over {MAX_REPLY} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise PluginProcessBroke("a reply that is not JSON") from None
        if not isinstance(reply, dict):
            raise PluginProcessBroke("a reply that is not an object")
        return reply

    def _kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the plugin process and anything a plugin spawned
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc = None
        child.reap_orphans()  # what its plugins started, setsid or not, goes with it
        if self._stderr is not None:  # its last lines before anything we say next (every holder is gone)
            self._stderr.join(RELAY_WAIT_S)
            self._stderr = None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._kill()
        for failure in self.repeats():
            self.log(failure.text(self.profile.shown))

    def repeats(self) -> list[HookFailure]:
        """How often each reported failure came back since the last call (a value each)."""
        came_back = []
        for (plugin, kind), (message, times) in self._reported.items():
            if times > 1:
                came_back.append(HookFailure(plugin, kind, message, repeats=times - 1))
                self._reported[(plugin, kind)] = (message, 1)
        return came_back

    # -- delivery ------------------------------------------------------------

    def fire(self, payload: dict) -> list[HookFailure]:
        """Call every `on_session_delete` callback with this event; returns the failures to report.

        Raises DeliveryStopped when a stop was requested meanwhile: the caller leaves the
        event undelivered in the outbox.
        """
        if not self.active:
            return []
        failures: list[HookFailure] = []
        start = 0
        while True:
            if self.proc is None:
                try:
                    failures += self._start()
                except (PluginProcessGone, OSError) as exc:
                    return failures + self._failure(failed.EVERY_PLUGIN, failed.NOT_RUN, str(exc))
            if start >= len(self.callbacks):
                return failures
            self._running = start
            try:
                self._send({"event": payload, "start": start})
                outcome, raised = self._run_until_finished(start)
                failures += raised
            except DeliveryStopped:
                self._kill()
                raise
            except PluginProcessBroke as exc:  # the event could not be sent (its replies: above)
                outcome = ("broke", self._running, str(exc))
            except PluginProcessGone:
                outcome = ("died", self._running, "")
            if outcome == "finished":
                return failures
            what, running, detail = outcome
            name = self.callbacks[running] if running < len(self.callbacks) else "?"
            if what == "timeout":
                failures += self._failure(name, failed.TIMED_OUT, f"on_session_delete timed out after "
                                                                   f"{self.timeout:g} s; plugin process restarted")
            elif what == "broke":
                failures += self._failure(name, failed.BROKE_PROTOCOL,
                                          f"its plugin process broke the protocol ({detail}); restarted")
            else:
                failures += self._failure(name, failed.PROCESS_DIED, "its plugin process died; restarted")
            self._kill()
            start = running + 1

    def _failure(self, plugin: str | None, kind: str, message: str) -> list[HookFailure]:
        """One value per plugin and kind of failure, the first time (then none: repeats are counted
        and told by `repeats`)."""
        key = (plugin, kind)
        said, times = self._reported.get(key, (shown.clean(message, 2000), 0))
        self._reported[key] = (said, times + 1)
        return [HookFailure(plugin, kind, said)] if times == 0 else []

    def _run_until_finished(self, start: int):
        """Replies for one event, in the one order the protocol allows: start i, done i, ..., finished.

        Returns the outcome, "finished" or (what, index, detail) for the callback that hung or whose
        plugin process broke or died, with the failures of the callbacks that ran before it. Every
        wait has a deadline: `timeout` for a callback to finish, a short one between them.
        """
        failures: list[HookFailure] = []
        expected = start
        try:
            while True:
                reply = self._receive(time.monotonic() + min(self.timeout, STARTUP_TIMEOUT_S))
                if reply is None:  # silence between callbacks: the last one started has not really finished
                    return ("timeout", self._running, ""), failures
                if reply.get("finished") is True and len(reply) == 1 and expected == len(self.callbacks):
                    return "finished", failures
                if reply.get("start") != expected or len(reply) != 1 or expected >= len(self.callbacks):
                    raise PluginProcessBroke("an out-of-order reply")
                self._running = expected
                done = self._receive(time.monotonic() + self.timeout)
                if done is None:
                    return ("timeout", expected, ""), failures
                error = done.get("error")
                if done.get("done") != expected or set(done) != {"done", "error"} or not (
                        error is None or isinstance(error, str)):
                    raise PluginProcessBroke("a malformed reply")
                if error:
                    first_line = error.strip().splitlines()[0] if error.strip() else error
                    failures += self._failure(self.callbacks[expected], failed.RAISED,
                                              f"on_session_delete raised {first_line}")
                expected += 1
        except PluginProcessBroke as exc:
            return ("broke", self._running, str(exc)), failures
        except PluginProcessGone:
            return ("died", self._running, ""), failures


def hermes_environment(given: Mapping[str, str]) -> dict[str, str]:
    """What of the invoker's environment (`given`: the job's) Hermes' plugin discovery reads: where
    its bundled plugins are (Nix, packaged installs), safe mode, and the managed scope's folder its
    config is read with (the one the host read: host/managed.py); nothing else crosses into the
    clean environment."""
    return {k: given[k] for k in ("HERMES_BUNDLED_PLUGINS", "HERMES_SAFE_MODE", "HERMES_MANAGED_DIR")
            if given.get(k)}


def _texts(value) -> bool:
    return isinstance(value, list) and len(value) <= 1000 and all(isinstance(v, str) for v in value)


def _load_errors(value) -> bool:
    """The plugin process's load errors: each `{"plugin": key or null, "message": text}`, nothing else."""
    return isinstance(value, list) and len(value) <= 1000 and all(
        isinstance(e, dict) and set(e) == {"plugin", "message"} and isinstance(e["message"], str)
        and (e["plugin"] is None or isinstance(e["plugin"], str)) for e in value)

"""Deliver events to one profile's plugins, in a worker process, bounded in time.

One worker per profile, started on the first event. Each callback is bounded
by the profile's `plugins.hook_callback_timeout`: past it the worker is
killed, restarted, and the event goes on with the next callback. A raising or
crashing callback is logged; the others still run.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

from hermes_admin import child
from hermes_admin.profile.hooks.discovery import PluginInfo
from hermes_admin.protocol import Profile

STARTUP_TIMEOUT_S = 60.0


class WorkerGone(Exception):
    pass


class HookBus:
    def __init__(self, profile: Profile, plugins: list[PluginInfo], timeout: float | None, log=None):
        self.profile = profile
        self.plugins = [p for p in plugins if p.enabled]
        self.timeout = timeout
        self.log = log or (lambda message: print(f"hermes-admin: {message}", file=sys.stderr))
        self.proc: subprocess.Popen | None = None
        self.callbacks: list[str] = []
        self._buffer = b""
        self._running = 0

    @property
    def active(self) -> bool:
        return bool(self.plugins)

    # -- worker process ------------------------------------------------------

    def _start(self) -> list[str]:
        # This process already is the home's owner (privilege separation: host/workers.py); a
        # plugin never runs as root over another user's home, even if that were ever not so.
        if os.geteuid() == 0 and os.lstat(self.profile.home).st_uid != 0:
            raise WorkerGone("refusing to run another user's plugins as root")
        # A clean environment, this very package in an isolated interpreter, a session of its own,
        # no descriptor but its pipes and the log.
        env = child.own_environment(HERMES_HOME=str(self.profile.home), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            child.argv("hermes_admin.profile.hooks.worker"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, close_fds=True,
            cwd=str(self.profile.home), start_new_session=True,
        )
        self._buffer = b""
        self._send({
            "home": str(self.profile.home), "profile": self.profile.name,
            "plugins": [{"key": p.key, "source": p.source, "location": p.location} for p in self.plugins],
        })
        ready = self._receive(STARTUP_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            self._kill()
            raise WorkerGone("plugin worker did not start")
        self.callbacks = ready["callbacks"]
        return ready.get("errors", [])

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerGone(str(exc)) from exc

    def _receive(self, timeout: float | None) -> dict | None:
        """The next reply, or None when the timeout passes first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out = self.proc.stdout
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            ready, _, _ = select.select([out], [], [], left)
            if not ready:
                return None
            chunk = os.read(out.fileno(), 65536)
            if not chunk:
                raise WorkerGone("plugin worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and anything a plugin spawned
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.proc = None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._kill()

    # -- delivery ------------------------------------------------------------

    def fire(self, payload: dict) -> list[str]:
        """Call every `on_session_delete` callback with this event; returns the failures."""
        if not self.active:
            return []
        failures: list[str] = []
        start = 0
        while True:
            if self.proc is None:
                try:
                    failures += self._start()
                except (WorkerGone, OSError) as exc:
                    failures.append(f"profile '{self.profile.name}': plugins not run: {exc}")
                    return failures
            if start >= len(self.callbacks):
                return failures
            self._running = start
            try:
                self._send({"event": payload, "start": start})
                outcome = self._run_until_finished(failures)
            except WorkerGone:
                outcome = ("died", self._running)
            if outcome == "finished":
                return failures
            what, running = outcome
            name = self.callbacks[running] if running < len(self.callbacks) else "?"
            if what == "timeout":
                failures.append(f"profile '{self.profile.name}': plugin {name}: on_session_delete "
                                f"timed out after {self.timeout:g} s; worker restarted")
            else:
                failures.append(f"profile '{self.profile.name}': plugin {name}: worker died; restarted")
            self._kill()
            start = running + 1

    def _run_until_finished(self, failures: list[str]):
        """Read replies for one event: "finished", or ("timeout", index) of the callback that hung."""
        while True:
            reply = self._receive(None)
            if "finished" in reply:
                return "finished"
            if "start" not in reply:
                continue
            self._running = reply["start"]
            done = self._receive(self.timeout)
            if done is None:
                return ("timeout", self._running)
            if done.get("error"):
                failures.append(f"profile '{self.profile.name}': plugin {self.callbacks[self._running]}: "
                                f"on_session_delete raised {done['error']}")

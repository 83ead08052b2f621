"""Removing committed sessions' files beside the engine, in a process of their own (the remover process).

An unlink in `sessions/` costs the kernel ~0.1 ms, time in
which the engine can run its next transaction. The unlinks run in a process of
their own (unlinker.py, which says why not a thread). Files are queued only
after their rows' commit, so the order rows -> files holds; `drain()` waits
for everything queued, and the engine drains before it fires events (files
before events) and at its end. The remover process syncs the folder before it answers
the last batch queued, so the removals are on disk when `drain()` returns.

If the remover process cannot be started, or stops, the files are removed here,
in the engine's own thread: slower, never skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
from collections import deque

from hermes_admin import child
from hermes_admin.profile.engine import unlinker

PIPE_BYTES = 1 << 20  # room for ~15 k queued paths before the engine would wait on the remover process
WAKE_S = 1.0  # the longest single sleep of a wait here
STALL_S = 30.0  # one that takes or answers nothing this long is stopped, not slow: killed, the rest done here


class FileRemover:
    def __init__(self, folder: str):
        self.folder = folder
        self.removed: list[str] = []
        self.skipped: list[str] = []
        self._process: subprocess.Popen | None = None
        self._broken = False  # the remover process could not start, or stopped: remove here
        self._sent: deque[list[str]] = deque()  # batches the remover process has not answered yet
        self._answered = threading.Condition()
        self._reader: threading.Thread | None = None

    def remove(self, paths: list[str]) -> None:
        if not paths:
            return
        if not self._broken and self._process is None:
            self._start()
        if not self._broken:
            with self._answered:
                self._sent.append(paths)
            if not self._send(unlinker.encode(paths)):
                self._give_up()  # drain() removes here what the remover process never answered
            return
        self._here(paths)

    def drain(self) -> None:
        """Wait for every batch sent; a remover process that answers nothing for STALL_S (stopped, traced)
        is killed and the rest is removed here."""
        with self._answered:
            since = time.monotonic()  # the last answer
            while self._sent and not self._broken:
                answered = len(self._sent)
                # in slices: a waiting thread that wakes is this process at work, as the host sees it
                self._answered.wait(WAKE_S)  # (liveness.py: the main thread must run to count)
                if len(self._sent) != answered:
                    since = time.monotonic()
                elif time.monotonic() - since >= STALL_S and not self._broken:
                    break
        if self._sent and not self._broken:
            self._give_up()
        self._redo_unanswered()

    def _send(self, data: bytes) -> bool:
        """The batch to the remover process, never blocking past STALL_S; False when it did not take it."""
        return child.write_within(self._process.stdin.fileno(), data, STALL_S) is None

    def _give_up(self) -> None:
        """The remover process is stopped, traced or gone: killed (SIGKILL ends a stopped process), the
        rest done here."""
        try:
            self._process.kill()
        except (OSError, AttributeError):
            pass
        self._break()

    def take(self) -> tuple[list[str], list[str]]:
        """Wait for everything queued; what was removed and what was not, since the last take."""
        self.drain()
        return self.answered()

    def answered(self) -> tuple[list[str], list[str]]:
        """What was removed and what was not since the last call, without waiting for the rest:
        the engine moves them into its report as it goes, so they never pile up here."""
        with self._answered:
            taken = self.removed, self.skipped
            self.removed, self.skipped = [], []
        return taken

    def close(self) -> None:
        self.drain()
        if self._process is not None:
            try:
                self._process.stdin.close()
            except OSError:
                pass
            try:
                self._process.wait(STALL_S)
            except subprocess.TimeoutExpired:  # stopped after its last answer
                self._process.kill()
                self._process.wait()
            self._reader.join()
            self._process = None

    # -- the remover process ---------------------------------------------

    def _start(self) -> None:
        try:  # this very package, in an isolated interpreter (child.py)
            self._process = subprocess.Popen(
                child.argv("hermes_admin.profile.engine.unlinker", self.folder),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True, env=child.own_environment())
            child.ours(self._process.pid)
        except OSError:
            self._broken = True
            return
        try:  # Linux: a larger pipe, so a burst of paths never makes the engine wait
            fcntl.fcntl(self._process.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
        except OSError:
            pass
        os.set_blocking(self._process.stdin.fileno(), False)  # _send waits with a deadline
        self._reader = threading.Thread(target=self._read_answers, name="hermes-admin-files", daemon=True)
        self._reader.start()

    def _read_answers(self) -> None:
        for line in self._process.stdout:
            answer = json.loads(line)
            with self._answered:
                if not self._sent:  # already handed back after a failed write
                    continue
                paths = self._sent.popleft()
                self.removed += [paths[i] for i in answer["removed"]]
                self.skipped += [f"{paths[i]}: {why}" for i, why in answer["skipped"]]
                self._answered.notify_all()
        self._break()  # EOF: closed by us, or the remover process died

    def _break(self) -> None:
        with self._answered:
            self._broken = True
            self._answered.notify_all()

    def _redo_unanswered(self) -> None:
        """Batches a stopped remover process never answered: removed here (an unlink of a gone file is a no-op)."""
        if not self._broken:
            return
        with self._answered:
            left, self._sent = list(self._sent), deque()
        for paths in left:
            self._here(paths)

    def _here(self, paths: list[str]) -> None:
        removed, skipped = unlinker.remove_batch(paths)
        self.removed += [paths[i] for i in removed]
        self.skipped += [f"{paths[i]}: {why}" for i, why in skipped]
        if removed:
            unlinker.sync_folder(self.folder)

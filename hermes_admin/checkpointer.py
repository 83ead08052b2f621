"""PASSIVE checkpoints on a thread of their own, beside the engine's transactions.

Our write connection runs with automatic checkpoints off (SQLite would run
them inside our COMMIT). Left alone, the WAL would then grow until a Hermes
writer's own automatic checkpoint copied our pages inside *its* commit. So the
WAL is checkpointed after each of our writing transactions, on this thread: a
PASSIVE checkpoint takes no write lock and waits for nobody, so the engine's
next transaction (and Hermes' writers) run while its pages are copied and
synced. It also syncs the WAL first, outside the lock, which leaves little for
the engine's next synced commit to flush (measured on W10: longest transaction
218-326 ms when it ran every fourth transaction, 150 ms after each). Its own
connection: a connection is never used by two threads at once.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from hermes_admin.store.connect import open_for_checkpoints


class Checkpointer:
    """`nudge()` asks for a checkpoint soon; `wait_idle()` waits for the running one to end;
    `close()` stops the thread (no checkpoint of its own)."""

    def __init__(self, path: Path):
        self._conn = open_for_checkpoints(path)
        self._wake = threading.Condition()
        self._asked = False
        self._running = False
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name="hermes-admin-checkpoint", daemon=True)
        self._thread.start()

    def nudge(self) -> None:
        with self._wake:
            self._asked = True
            self._wake.notify_all()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._asked or self._closing):
                    self._wake.wait()
                if self._closing:
                    return
                self._asked, self._running = False, True
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                pass  # busy with another checkpointer: Hermes' writers checkpoint too
            finally:
                with self._wake:
                    self._running = False
                    self._wake.notify_all()

    def wait_idle(self) -> None:
        """Wait until no checkpoint is running or asked for.

        The engine waits here, outside any transaction, before a commit that syncs:
        a checkpoint syncs the database file, and an fsync of the WAL issued meanwhile
        queues behind it (measured on W10: commits of 200-300 ms, with the lock held).
        """
        with self._wake:
            while (self._running or self._asked) and not self._closing:
                self._wake.wait()

    def close(self) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._thread.join()
        self._conn.close()

"""PASSIVE checkpoints on a thread of their own: they copy the WAL and make our commits durable.

Our write connection runs with automatic checkpoints off (SQLite would run
them inside our COMMIT). Left alone, the WAL would then grow until a Hermes
writer's own automatic checkpoint copied our pages inside *its* commit. So the
WAL is checkpointed after each of our writing transactions, on this thread: a
PASSIVE checkpoint takes no write lock and waits for nobody, so the engine's
next transaction (and Hermes' writers) run while its pages are copied and
synced. Its own connection: a connection is never used by two threads at once.

A checkpoint syncs the WAL before it copies it (then the database file). So
once one that started after a commit reports every frame copied, that commit
is on disk, whatever level it committed at: `durable` is the newest commit
number known to be there (see group_commit.py, which relies on it).
"""

from __future__ import annotations

import apsw
import threading
import time
from pathlib import Path

from hermes_admin.profile.store.connect import open_for_checkpoints


class Checkpointer:
    """`nudge(seq)` asks for a checkpoint covering commit `seq`; `durable` is the newest commit
    a complete checkpoint covered; `wait_idle()` waits for the running one to end;
    `close()` stops the thread (no checkpoint of its own)."""

    def __init__(self, path: Path):
        self._path = path
        self._conn = None  # opened, and the thread started, on the first commit that asks: a run
        self._thread: threading.Thread | None = None  # with nothing to delete costs neither
        self._wake = threading.Condition()
        self._asked = False
        self._asked_seq = 0  # the newest commit a checkpoint was asked to cover
        self.durable = 0  # every commit numbered up to this one is on disk
        self._running = False
        self._closing = False

    def _start(self) -> None:
        self._conn = open_for_checkpoints(self._path)
        self._thread = threading.Thread(target=self._loop, name="hermes-admin-checkpoint", daemon=True)
        self._thread.start()

    def nudge(self, seq: int = 0) -> None:
        if self._thread is None:
            self._start()
        with self._wake:
            self._asked = True
            self._asked_seq = max(self._asked_seq, seq)
            self._wake.notify_all()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._asked or self._closing):
                    self._wake.wait()
                if self._closing:
                    return
                self._asked, self._running = False, True
                covers = self._asked_seq  # committed before this checkpoint starts
            complete = False
            try:
                busy, frames, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                # Incomplete when another checkpointer ran (Hermes' writers checkpoint too) or a
                # reader still uses older frames: the next nudge tries again.
                complete = not busy and frames == copied
            except apsw.Error:
                pass
            finally:
                with self._wake:
                    self._running = False
                    if complete:
                        self.durable = max(self.durable, covers)
                    self._wake.notify_all()

    def wait_idle(self) -> None:
        """Wait until no checkpoint is running or asked for.

        Group commit waits here, outside any transaction, before a commit that syncs
        (a checkpoint syncs the database file, and an fsync of the WAL issued meanwhile
        queues behind it, with the lock held),
        and `barrier()` waits here for each checkpoint it asks for.
        """
        with self._wake:
            while (self._running or self._asked) and not self._closing:
                self._wake.wait()

    def barrier(self, seq: int, tries: int, wait_s: float) -> bool:
        """Checkpoint until commit `seq` is durable; False if it could not be made so in `tries`."""
        for _ in range(tries):
            self.nudge(seq)
            self.wait_idle()
            if self.durable >= seq:
                return True
            time.sleep(wait_s)
        return False

    def close(self) -> None:
        if self._thread is None:
            return
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._thread.join()
        self._conn.close()

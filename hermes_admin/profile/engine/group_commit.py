"""Group commit: the engine's short transactions made durable by the checkpoint thread's fsyncs.

In WAL mode a commit at `synchronous=FULL` (SQLite's default, and Hermes')
syncs the WAL file, with the write lock held; at `NORMAL` it does not, and the
commit is still atomic and survives a crash of any process, only not a power
cut. The engine keeps its transactions short for Hermes' sake (~15 ms), so an
fsync each would cost a good part of the lock time, and worse, it queues behind
the checkpoint thread's own fsync of the database file (commits of hundreds
of ms). So in WAL mode the engine commits at NORMAL, and the
checkpoint that follows each commit makes it durable: a checkpoint syncs the
WAL before it copies it (checkpointer.py). Only the last transaction commits
at the store's own level.

What must follow a durable commit (removing files, firing events) waits here
until a complete checkpoint, or a synced commit, covers it. The level is a
per-connection setting, set between transactions (SQLite refuses to change it
inside one); nothing in the file changes. Outside WAL mode, or when the
store's level is already below FULL, every commit is left as it is.
"""

from __future__ import annotations

from typing import Any

from hermes_admin.profile.engine.checkpointer import Checkpointer
from hermes_admin.profile.store import pragmas

NORMAL = 1  # PRAGMA synchronous: atomic and crash-safe in WAL mode, no fsync at commit
BARRIER_TRIES, BARRIER_WAIT_S = 40, 0.05  # ~2 s for the checkpoint that makes the last commits durable


class GroupCommit:
    def __init__(self, db, checkpointer: Checkpointer | None):
        self.db = db
        self.checkpointer = checkpointer  # None outside WAL mode
        self.level = pragmas.synchronous(db)
        self.enabled = checkpointer is not None and self.level > NORMAL
        self._current = self.level
        self.seq = 0  # writing commits so far; the checkpointer reports how far they are durable
        self._synced = 0  # the newest commit made durable by a synced commit
        self._waiting: list[tuple[int, Any]] = []  # (commit it follows, work) not yet durable

    def before(self, last: bool = False) -> bool:
        """Set the level for the next transaction; True if its commit will be synced.

        Before a synced commit, the running checkpoint (if any) is waited for: its fsync of
        the database file would hold up ours, with the lock held.
        """
        synced = not self.enabled or last
        self._set(self.level if synced else NORMAL)
        if synced and self.checkpointer is not None:
            self.checkpointer.wait_idle()
        return synced

    def committed(self, synced: bool, wrote: bool, work: Any) -> list[Any]:
        """Record a commit and its after-commit work; returns the work that is durable now.

        A commit that wrote is followed by a checkpoint, synced or not: it keeps the WAL
        short, so that Hermes' writers do not copy our pages inside their own commits.
        """
        if wrote:
            self.seq += 1
            if synced:
                self._synced = self.seq
            if self.checkpointer is not None:
                self.checkpointer.nudge(self.seq)
        self._waiting.append((self.seq, work))
        return self._release(self._durable())

    def flush(self) -> list[Any]:
        """Make what is waiting durable (a stop request, or a last transaction that wrote nothing).

        No transaction is left to carry the fsync, so a checkpoint does. A reader pinning
        old frames can hold that back; after ~2 s the work is released anyway (the rows'
        commit is in the WAL: only a power cut in that moment could still undo it).
        """
        self._set(self.level)
        if self._waiting and self._durable() < self.seq and self.checkpointer is not None:
            self.checkpointer.barrier(self.seq, BARRIER_TRIES, BARRIER_WAIT_S)
        return self._release(self.seq)

    def _durable(self) -> int:
        if not self.enabled:
            return self.seq
        return max(self._synced, self.checkpointer.durable)

    def _release(self, upto: int) -> list[Any]:
        done = [work for seq, work in self._waiting if seq <= upto]
        if done:
            self._waiting = [(seq, work) for seq, work in self._waiting if seq > upto]
        return done

    def _set(self, level: int) -> None:
        if level != self._current:
            pragmas.set_synchronous(self.db, level)
            self._current = level

"""Group commit: one fsync for several of the engine's short transactions.

In WAL mode a commit at `synchronous=FULL` (SQLite's default, and Hermes')
syncs the WAL file; at `NORMAL` it does not, and the commit is still atomic
and survives a crash of any process, only not a power cut. The engine keeps
its transactions short for Hermes' sake (~15 ms), so one fsync each would
cost as much as a third of the lock time (measured on W1: 0.65 s of commits
beside 1.8 s of deleting). So the engine commits most transactions at
NORMAL and every GROUP-th, and the last, at the store's own level: that
fsync makes everything before it durable too.

What must follow a durable commit (removing files, firing events) waits here
until a synced commit covers it. The level is a per-connection setting, set
between transactions (SQLite refuses to change it inside one); nothing in the
file changes. Outside WAL mode, or when the store's level is already below
FULL, every commit is left as it is.
"""

from __future__ import annotations

import time
from typing import Any

GROUP = 4  # transactions per fsync
NORMAL = 1
BARRIER_TRIES, BARRIER_WAIT_S = 40, 0.05


class GroupCommit:
    def __init__(self, db, wal: bool):
        self.db = db
        self.level = int(db.execute_sql("PRAGMA synchronous").fetchone()[0])
        self.enabled = wal and self.level > NORMAL
        self._current = self.level
        self._unsynced = 0  # writing commits since the last synced one
        self._waiting: list[Any] = []  # after-commit work not yet durable

    def before(self, last: bool = False) -> bool:
        """Set the level for the next transaction; True if its commit will be synced."""
        synced = not self.enabled or last or self._unsynced >= GROUP - 1
        self._set(self.level if synced else NORMAL)
        return synced

    def committed(self, synced: bool, wrote: bool, work: Any) -> list[Any]:
        """Record a commit and its after-commit work; returns the work that is durable now."""
        self._waiting.append(work)
        if wrote:
            self._unsynced = 0 if synced else self._unsynced + 1
        if self._unsynced:
            return []
        done, self._waiting = self._waiting, []
        return done

    def flush(self) -> list[Any]:
        """Make what is waiting durable (a stop request, or a last transaction that wrote nothing).

        No transaction is left to carry the fsync, so a PASSIVE checkpoint does: it syncs the
        WAL before copying it. Once it reports every frame copied, all is on disk; a reader
        pinning old frames can hold that back briefly, so it is retried for ~2 s.
        """
        self._set(self.level)
        if self._unsynced:
            for _ in range(BARRIER_TRIES):
                busy, frames, copied = self.db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if not busy and frames == copied:
                    break
                time.sleep(BARRIER_WAIT_S)
            self._unsynced = 0
        done, self._waiting = self._waiting, []
        return done

    def _set(self, level: int) -> None:
        if level != self._current:
            self.db.execute_sql(f"PRAGMA synchronous={level}")
            self._current = level

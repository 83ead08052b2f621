"""Durable `on_session_delete` events: delivered once their rows committed, never otherwise.

The outbox is hermes-admin's own SQLite file in the profile home
(`.hermes-admin/outbox.db`); nothing is ever added to Hermes' store. Each
event goes through three states:

    pending    written before the store transaction commits
    committed  the store transaction committed (so the event must be delivered)
    delivered  the plugins were called

A crash between the store's commit and `committed` leaves a pending event;
on the next start it is checked against the store itself: rows gone (or,
for an archive, archived) means the transaction committed, so the event is
delivered; rows still there means it rolled back, so the event is dropped.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from hermes_admin.protocol import Profile
from hermes_admin.profile.engine.locks import regular_file, state_dir


@dataclass
class Event:
    id: int
    kind: str  # "delete" or "archive": how a pending event is verified
    session_id: str
    reason: str
    ids: list[str]  # every row that went with the unit

    def payload(self, profile: Profile) -> dict:
        """The hook's keyword arguments (design §7), JSON-safe."""
        return {
            "session_id": self.session_id,
            "reason": self.reason,
            "profile": profile.name,
            "deleted_ids": list(self.ids) if len(self.ids) > 1 else None,
            "sessions_dir": str(profile.sessions_dir),
        }


class Outbox:
    def __init__(self, profile: Profile, notes: list[str] | None = None):
        self.profile = profile
        self.path: Path = state_dir(profile, notes) / "outbox.db"
        regular_file(self.path, "the outbox")
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        # Our own file: WAL with synchronous=NORMAL keeps every commit across the death of this
        # process (kill -9 included), at a fraction of an fsync per event.
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY, created REAL NOT NULL, "
            "state TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT NOT NULL, reason TEXT NOT NULL, "
            "ids TEXT NOT NULL)"
        )

    def close(self) -> None:
        self.conn.close()

    def add_pending(self, kind: str, reason: str, units) -> list[int]:
        """One pending event per unit; returns their ids in unit order."""
        ids = []
        self.conn.execute("BEGIN IMMEDIATE")
        for unit in units:
            cur = self.conn.execute(
                "INSERT INTO events(created, state, kind, session_id, reason, ids) VALUES (?, 'pending', ?, ?, ?, ?)",
                (time.time(), kind, unit.session_id, reason, json.dumps(list(unit.ids))),
            )
            ids.append(cur.lastrowid)
        self.conn.execute("COMMIT")
        return ids

    def settle(self, committed: dict[int, list[str]], dropped: list[int]) -> None:
        """After the store transaction: committed events get the rows that really went."""
        self.conn.execute("BEGIN IMMEDIATE")
        for event_id, ids in committed.items():
            self.conn.execute("UPDATE events SET state='committed', ids=? WHERE id=?", (json.dumps(ids), event_id))
        self.conn.executemany("DELETE FROM events WHERE id=?", [(i,) for i in dropped])
        self.conn.execute("COMMIT")

    def delivered(self, event_ids: list[int]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany("UPDATE events SET state='delivered' WHERE id=?", [(i,) for i in event_ids])
        self.conn.execute("COMMIT")

    def forget_old(self) -> None:
        """Keep a short history only: delivered events are not needed after a day."""
        self.conn.execute("DELETE FROM events WHERE state='delivered' AND created < ?", (time.time() - 86400,))

    def _events(self, state: str) -> list[Event]:
        rows = self.conn.execute(
            "SELECT id, kind, session_id, reason, ids FROM events WHERE state=? ORDER BY id", (state,)
        ).fetchall()
        return [Event(i, k, s, r, json.loads(ids)) for i, k, s, r, ids in rows]

    def pending(self) -> list[Event]:
        return self._events("pending")

    def undelivered(self) -> list[Event]:
        return self._events("committed")

"""Write synthetic Hermes stores and transcript files (tests and `demo`).

This writes stores it creates itself, so it uses plain sqlite3 and may pick
the journal mode of a brand-new file (WAL, as Hermes does). It never touches
an existing store.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

from hermes_admin.synth.schema import ddl

DAY = 86400.0  # seconds, for the ages of synthetic sessions


def session_id_at(ts: float, salt: str) -> str:
    """An id shaped like Hermes' own: `YYYYmmdd_HHMMSS_<hex>`."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(ts))
    return f"{stamp}_{hashlib.sha1(salt.encode()).hexdigest()[:6]}"


class SynthStore:
    """A new store of schema `version` (22 or 30) at `path`, in WAL (0.19's stores) or a rollback
    journal (`journal="delete"`: what 0.20+ makes on a SQLite before 3.51.3)."""

    def __init__(self, path: Path, version: int = 30, profile: str | None = None, journal: str = "wal"):
        self.path = Path(path)
        self.version = version
        self.profile = profile
        self.path.parent.mkdir(parents=True, exist_ok=True)
        (self.path.parent / "sessions").mkdir(exist_ok=True)  # every Hermes home has one
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists: synthetic stores are only written new")
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute(f"PRAGMA journal_mode={'DELETE' if journal == 'delete' else 'WAL'}")  # a new file: ours
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("BEGIN")
        for statement in ddl(version):
            self.conn.execute(statement)
        self.conn.execute("COMMIT")
        self.conn.execute("BEGIN")

    @property
    def v30(self) -> bool:
        return self.version >= 30

    def session(
        self,
        sid: str,
        *,
        started: float,
        source: str = "cli",
        ended: float | None = None,
        end_reason: str | None = None,
        title: str | None = None,
        parent: str | None = None,
        delegate_from: str | None = None,
        archived: bool = False,
        pinned: bool = False,
        last_activity: float | None = None,
        session_key: str | None = None,
        profile_name: str | None = None,
        model: str = "synth/model-1",
        system_prompt: str | None = None,
    ) -> str:
        cols = {
            "id": sid, "source": source, "started_at": started, "ended_at": ended,
            "end_reason": end_reason if ended is not None else None, "title": title,
            "parent_session_id": parent, "archived": int(archived), "session_key": session_key,
            # Upstream stamps the store's profile on new rows; the PyPI release leaves it NULL.
            "profile_name": profile_name if profile_name is not None else (self.profile if self.v30 else None),
            "model": model,
            "model_config": json.dumps({"_delegate_from": delegate_from}) if delegate_from else None,
        }
        if self.v30:
            cols.update(pinned=int(pinned), last_activity_at=last_activity, created_source=source)
            if system_prompt is not None:
                digest = hashlib.sha256(system_prompt.encode()).hexdigest()
                self.conn.execute(
                    "INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (digest, system_prompt)
                )
                cols["system_prompt_hash"] = digest
        elif system_prompt is not None:
            cols["system_prompt"] = system_prompt
        names = ", ".join(cols)
        marks = ", ".join("?" for _ in cols)
        self.conn.execute(f"INSERT INTO sessions ({names}) VALUES ({marks})", list(cols.values()))
        return sid

    def messages(self, sid: str, count: int, first: float, step: float = 60.0, text: str = "message") -> None:
        """`count` alternating user/assistant messages from `first`, `step` seconds apart."""
        rows = [
            (sid, "user" if i % 2 == 0 else "assistant", f"{text} {i} of {sid}", first + i * step)
            for i in range(count)
        ]
        self.conn.executemany(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows
        )
        self.conn.execute(
            "UPDATE sessions SET message_count = message_count + ? WHERE id = ?", (count, sid)
        )

    def tool_message(self, sid: str, ts: float, output: str, tool_name: str = "terminal") -> None:
        self.conn.execute(
            "INSERT INTO messages(session_id, role, content, tool_name, timestamp) VALUES (?, 'tool', ?, ?, ?)",
            (sid, output, tool_name, ts),
        )

    def usage(self, sid: str, model: str = "synth/model-1", tokens: int = 100, when: float | None = None) -> None:
        self.conn.execute(
            "INSERT INTO session_model_usage(session_id, model, input_tokens, output_tokens, first_seen, last_seen) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (sid, model, tokens, tokens // 2, when, when),
        )

    def orphan_rows(self, missing_sid: str, messages: int, first: float) -> None:
        """Message and usage rows whose session row does not exist (as crashes leave them)."""
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA foreign_keys=OFF")
        self.conn.execute("BEGIN")
        self.messages_raw(missing_sid, messages, first)
        self.usage(missing_sid, when=first)
        self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("BEGIN")

    def messages_raw(self, sid: str, count: int, first: float) -> None:
        self.conn.executemany(
            "INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(sid, f"orphan {i}", first + i) for i in range(count)],
        )

    def compression_lock(self, sid: str, expires: float, holder: str = "synth:1") -> None:
        self.conn.execute(
            "INSERT INTO compression_locks(session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
            (sid, holder, expires - 600, expires),
        )

    def turn_lease(self, conversation_id: str, expires: float, holder: str = "synth:1") -> None:
        """A row of v30's `session_turn_leases`, keyed as Hermes keys it: by the conversation's root."""
        self.conn.execute(
            "INSERT INTO session_turn_leases(conversation_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
            (conversation_id, holder, expires - 600, expires),
        )

    def close(self) -> None:
        self.conn.execute("COMMIT")
        self.conn.close()
        os.chmod(self.path, 0o600)


def write_session_files(
    sessions_dir: Path, sid: str, kinds: tuple[str, ...] = ("json", "jsonl", "snapshot", "dump"),
    mtime: float | None = None,
) -> list[Path]:
    """Transcript files of every kind Hermes writes for a session."""
    sessions_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(mtime or time.time())) + "_000123"
    names = {
        "json": f"{sid}.json",
        "jsonl": f"{sid}.jsonl",
        "snapshot": f"session_{sid}.json",
        "dump": f"request_dump_{sid}_{stamp}.json",
    }
    paths = []
    for kind in kinds:
        path = sessions_dir / names[kind]
        path.write_text(json.dumps({"session_id": sid, "kind": kind}) + "\n")
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        paths.append(path)
    return paths

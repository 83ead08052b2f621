"""deletion-audit: one JSON line per `on_session_delete` event, in the profile's logs/.

Install by copying this folder to `<profile home>/plugins/deletion-audit/` and
adding `deletion-audit` to `plugins.enabled` in that profile's config.yaml.
Hermes itself loads it fine (it only warns that it does not fire this hook);
hermes-admin fires it after every committed deletion or archive.

Delivery is at-least-once: after a crash, the one event that was being delivered
comes again with the same `event_id`; this plugin writes it once.
"""

import json
import os
import time
from pathlib import Path

LOG_NAME = "session-deletions.jsonl"


def _already_logged(path: Path, event_id: str) -> bool:
    """Is this event the last one written (a repeat after a crash)? Only the tail is read."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            tail = log.read().splitlines()
    except OSError:
        return False
    return bool(tail) and f'"event_id": "{event_id}"'.encode() in tail[-1]


def on_session_delete(session_id, reason, profile, deleted_ids=None, sessions_dir=None, event_id=None, **_):
    home = Path(sessions_dir).parent if sessions_dir else Path(os.environ.get("HERMES_HOME", "."))
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / LOG_NAME
    if event_id is not None and _already_logged(path, event_id):
        return
    entry = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "session_id": session_id,
        "reason": reason,
        "profile": profile,
        "deleted_ids": deleted_ids,
        "event_id": event_id,
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def register(ctx):
    ctx.register_hook("on_session_delete", on_session_delete)

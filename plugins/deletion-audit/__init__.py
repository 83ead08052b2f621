"""deletion-audit: one JSON line per `on_session_delete` event, in the profile's logs/.

Install by copying this folder to `<profile home>/plugins/deletion-audit/` and
adding `deletion-audit` to `plugins.enabled` in that profile's config.yaml.
Hermes itself loads it fine (it only warns that it does not fire this hook);
hermes-admin fires it after every committed deletion or archive.
"""

import json
import os
import time
from pathlib import Path

LOG_NAME = "session-deletions.jsonl"


def on_session_delete(session_id, reason, profile, deleted_ids=None, sessions_dir=None, **_):
    home = Path(sessions_dir).parent if sessions_dir else Path(os.environ.get("HERMES_HOME", "."))
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    entry = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "session_id": session_id,
        "reason": reason,
        "profile": profile,
        "deleted_ids": deleted_ids,
    }
    with open(logs / LOG_NAME, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def register(ctx):
    ctx.register_hook("on_session_delete", on_session_delete)

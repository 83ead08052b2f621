"""Test plugin: records every event it receives, with the argument names it got."""

import json
import os
from pathlib import Path


def register(ctx):
    def on_delete(session_id, reason, profile, deleted_ids, sessions_dir):
        out = Path(os.environ["HERMES_HOME"]) / "recorded-events.jsonl"
        with open(out, "a") as f:
            f.write(json.dumps({"session_id": session_id, "reason": reason, "profile": profile,
                                "deleted_ids": deleted_ids, "sessions_dir": str(sessions_dir),
                                "sessions_dir_type": type(sessions_dir).__name__}) + "\n")

    def narrow(session_id):  # declares one name: receives only that one
        out = Path(os.environ["HERMES_HOME"]) / "recorded-narrow.jsonl"
        with open(out, "a") as f:
            f.write(json.dumps({"session_id": session_id}) + "\n")

    ctx.register_hook("on_session_delete", on_delete)
    ctx.register_hook("on_session_delete", narrow)
    ctx.register_tool("noop", "test", {}, lambda **kw: None)  # the rest of Hermes' API is accepted
    ctx.register_command("noop", lambda *a: None)

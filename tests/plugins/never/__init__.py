"""Test plugin: never enabled; importing it leaves a marker file, which must never appear."""

import os
from pathlib import Path

Path(os.environ.get("HERMES_HOME", "/tmp"), "never-imported-marker").write_text("imported!\n")


def register(ctx):
    ctx.register_hook("on_session_delete", lambda **kw: None)

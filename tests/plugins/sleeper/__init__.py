"""Test plugin: its callback hangs for 300 s (a hook timeout must cut it short)."""

import time


def register(ctx):
    def hang(session_id):
        time.sleep(300)

    ctx.register_hook("on_session_delete", hang)

"""Test plugin: its callback always raises."""


def register(ctx):
    def boom(**kwargs):
        raise RuntimeError("plugin failure on purpose")

    ctx.register_hook("on_session_delete", boom)

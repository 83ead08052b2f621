"""The plugin worker: imports one profile's enabled plugins and runs their callbacks.

Started by `hooks.bus` in an isolated interpreter (child.argv), as the home's
owner, so untrusted plugin code never runs inside hermes-admin (nor as root
over another user's home). It speaks JSON lines: requests on stdin, replies on
a private copy of stdout; the plugins' own prints go to stderr.

    -> {"home", "profile", "plugins": [{"key", "source", "location"}]}
    <- {"ready": true, "callbacks": [plugin keys], "errors": [...]}
    -> {"event": {...}, "start": i}
    <- {"start": i} ... {"done": i, "error": null|"..."} ... {"finished": true}
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from importlib.metadata import entry_points
from pathlib import Path

HOOK = "on_session_delete"


class PluginContext:
    """What `register(ctx)` receives: hooks are kept, the rest of Hermes' API is accepted."""

    def __init__(self, plugin_id: str, profile: str, hooks: list):
        self.plugin_id = plugin_id
        self.profile_name = profile
        self._hooks = hooks

    def register_hook(self, hook_name: str, callback) -> None:
        if hook_name == HOOK:
            self._hooks.append((self.plugin_id, callback))

    def get_config(self, key, default=None):
        return default

    def has_plugin(self, plugin_id) -> bool:
        return False

    def has_capability(self, capability) -> bool:
        return False

    def __getattr__(self, name: str):
        # register_tool, register_command, register_cli_command, emit, subscribe, ...:
        # accepted and ignored, so plugins written for Hermes load here unchanged.
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def _import_directory(key: str, folder: str):
    slug = "hermes_plugins." + re.sub(r"[^0-9A-Za-z_]", "_", key.replace("/", "__"))
    if "hermes_plugins" not in sys.modules:
        package = importlib.util.module_from_spec(importlib.machinery.ModuleSpec("hermes_plugins", None))
        package.__path__ = []
        sys.modules["hermes_plugins"] = package
    spec = importlib.util.spec_from_file_location(
        slug, Path(folder) / "__init__.py", submodule_search_locations=[folder]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[slug] = module
    spec.loader.exec_module(module)
    return module


def _import_entry_point(key: str):
    for ep in entry_points(group="hermes_agent.plugins"):
        if ep.name == key:
            return ep.load()
    raise LookupError(f"entry point {key!r} not found")


def load_plugins(spec: dict) -> tuple[list, list[str]]:
    hooks: list = []
    errors: list[str] = []
    for plugin in spec["plugins"]:
        key = plugin["key"]
        try:
            if plugin["source"] == "directory":
                target = _import_directory(key, plugin["location"])
            else:
                target = _import_entry_point(key)
            register = getattr(target, "register", None) or (target if callable(target) else None)
            if register is None:
                raise LookupError("no register() function")
            register(PluginContext(key, spec["profile"], hooks))
        except BaseException as exc:  # a plugin that fails to load is reported, the others still load
            errors.append(f"plugin {key}: failed to load: {type(exc).__name__}: {exc}")
    return hooks, errors


def call(callback, payload: dict):
    """Pass only the keyword arguments the callback declares, unless it takes **kwargs."""
    try:
        params = inspect.signature(callback).parameters.values()
    except (TypeError, ValueError):
        params = None
    names = {p.name for p in params or () if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if params is None or any(p.kind is p.VAR_KEYWORD for p in params):
        # Hermes' own arguments; `event_id` is hermes-admin's addition, for callbacks that name it
        kwargs = {k: v for k, v in payload.items() if k != "event_id" or k in names}
    else:
        kwargs = {k: v for k, v in payload.items() if k in names}
    result = callback(**kwargs)
    if inspect.isawaitable(result):
        asyncio.run(_await(result))


async def _await(awaitable):
    return await awaitable


def main() -> int:
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever plugins print goes to stderr, never into the protocol
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    spec = json.loads(sys.stdin.readline())
    os.environ["HERMES_HOME"] = spec["home"]
    hooks, errors = load_plugins(spec)
    send({"ready": True, "callbacks": [key for key, _ in hooks], "errors": errors})
    for line in sys.stdin:
        request = json.loads(line)
        payload = dict(request["event"], sessions_dir=Path(request["event"]["sessions_dir"]))
        for index in range(request.get("start", 0), len(hooks)):
            send({"start": index})
            error = None
            try:
                call(hooks[index][1], payload)
            except BaseException as exc:  # SystemExit included: one callback never stops the others
                error = f"{type(exc).__name__}: {exc}"[:2000]
                if spec.get("verbose"):  # the bus reports one line per plugin; the traceback only under -v
                    traceback.print_exc(file=sys.stderr)
            send({"done": index, "error": error})
        send({"finished": True})
    return 0

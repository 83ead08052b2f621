"""The script hermes-admin runs in Hermes' interpreter: the probe, the listing, the plugin process.

Run by its path (`command`) as the home's owner, in the interpreter of the
Hermes installation that serves the profile, or in ours when none was found
(plugins only). That interpreter's venv does not have hermes-admin, so this file
imports the standard library only: nothing of hermes-admin's package or
dependencies. For the same reason hermes-admin imports it from below every
module that starts it: the installation finder (`installation.py`, the probe),
the plugin listing (`hooks/listing.py`) and the hook bus (`hooks/bus.py`).

In `serve` mode it is the plugin process: it loads one profile's plugins and
runs their `on_session_delete` callbacks. In Hermes' interpreter, Hermes' own
plugin manager (`hermes_cli.plugins`) discovers and loads the plugins (bundled
folder, `<home>/plugins/`, the interpreter's entry points; its enabled/disabled
and kind rules), so the callbacks run are exactly those Hermes would register
for the profile. In ours, the plugins `hooks.discovery` found are imported here.

It speaks JSON lines: requests on stdin, replies on a private copy of stdout;
the plugins' own prints go to stderr.

    serve:  -> {"home", "profile", "hermes": bool, "plugins": [{"key", "source", "location"}]}
            <- {"ready": true, "callbacks": [plugin keys], "errors": [{"plugin": key|null, "message"}]}
            -> {"event": {...}, "start": i}
            <- {"start": i} ... {"done": i, "error": null|"..."} ... {"finished": true}
    list:   -> {"home", "profile"}   <- {"plugins": [rows], "errors": [...]}   (imports no plugin)
    probe:  <- {"hermes": version, "python", "sessions": {...}, "sessions_keys": [...], "hook_callback_timeout",
                "managed_scope": bool, "delete_hook": bool|null, "watch": [...]}
"""

from __future__ import annotations

# Only what every mode needs: hermes-admin imports this module for `command`, on its way to every
# run, and asyncio or importlib.metadata alone would cost it tens of milliseconds.
import json
import os
import sys
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
    import importlib.machinery
    import importlib.util
    import re

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
    from importlib.metadata import entry_points

    for ep in entry_points(group="hermes_agent.plugins"):
        if ep.name == key:
            return ep.load()
    raise LookupError(f"entry point {key!r} not found")


def load_plugins(spec: dict) -> tuple[list, list[dict]]:
    hooks: list = []
    errors: list[dict] = []
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
            errors.append(_load_error(key, f"{type(exc).__name__}: {exc}"))
    return hooks, errors


def call(callback, payload: dict):
    """Pass only the keyword arguments the callback declares, unless it takes **kwargs."""
    import inspect

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
        import asyncio

        asyncio.run(_await(result))


async def _await(awaitable):
    return await awaitable


# -- in Hermes' own interpreter ----------------------------------------------------

def _quiet_hermes(verbose: bool) -> None:
    """Hermes' plugin manager, made fit for running outside a Hermes session.

    Its logger warns of every unknown hook (ours is one); a plugin that fails to load is
    reported by us, once, with the interpreter. Its config reader creates a first-run home
    (SOUL.md, skills/, cron/, ...) wherever it looks: hermes-admin creates nothing in a home.
    """
    import logging

    if not verbose:
        logging.getLogger("hermes_cli.plugins").setLevel(logging.ERROR)
    try:
        import hermes_cli.config as config

        if hasattr(config, "ensure_hermes_home"):
            config.ensure_hermes_home = lambda *args, **kwargs: None
    except Exception:
        pass


def _manager_class(record_load):
    """Hermes' PluginManager with `_load_plugin` observed: which plugin registered which callback."""
    from hermes_cli import plugins as hermes_plugins

    base = hermes_plugins.PluginManager

    class Observed(base):
        def _load_plugin(self, manifest):
            record_load(self, manifest, lambda: base._load_plugin(self, manifest))

    return hermes_plugins, Observed


def _where() -> str:
    return sys.executable


def _load_error(key: str, why: str) -> dict:
    """A plugin that did not load, as the bus reads it: whose (its key, never read from a line), and why."""
    return {"plugin": key, "message": f"failed to load in {_where()}: {why}"}


def load_with_hermes(spec: dict) -> tuple[list, list[dict]]:
    """Hermes' own plugin manager loads the profile's plugins; we keep its `on_session_delete`
    callbacks, each with the key of the plugin that registered it, in Hermes' order."""
    hooks: list = []
    errors: list[dict] = []
    _quiet_hermes(bool(spec.get("verbose")))

    def record_load(manager, manifest, load) -> None:
        key = manifest.key or manifest.name
        before = len(manager._hooks.get(HOOK, []))
        try:
            load()
        except BaseException as exc:  # Hermes catches Exception only: SystemExit and the like are ours to stop
            manager._plugins.pop(key, None)
            errors.append(_load_error(key, f"{type(exc).__name__}: {exc}"))
        else:
            loaded = manager._plugins.get(key)
            if loaded is not None and getattr(loaded, "error", None):
                errors.append(_load_error(key, str(loaded.error)))
        # what it registered before failing stays registered in Hermes too
        hooks.extend((key, callback) for callback in manager._hooks.get(HOOK, [])[before:])

    try:
        hermes_plugins, Observed = _manager_class(record_load)
        manager = Observed()
        hermes_plugins._plugin_manager = manager  # a plugin asking for "the" manager gets this one
        manager.discover_and_load()
    except BaseException as exc:
        errors.append({"plugin": None, "message": f"plugins not loaded: Hermes' plugin manager failed in {_where()}: "
                                                  f"{type(exc).__name__}: {exc}"})
        return [], errors
    if not hooks and manager._hooks.get(HOOK):  # a manager without _load_plugin: attribute by module
        hooks = [(_module_key(callback), callback) for callback in manager._hooks[HOOK]]
    return hooks, errors


def _module_key(callback) -> str:
    module = getattr(callback, "__module__", "") or "?"
    return module.split(".", 1)[1].replace("__", "/") if module.startswith("hermes_plugins.") else module


def list_with_hermes(spec: dict) -> dict:
    """Every plugin Hermes sees for the profile, and whether it would load it: Hermes' own
    discovery, with loading replaced by a note (no plugin is imported)."""
    _quiet_hermes(bool(spec.get("verbose")))
    would_load: set = set()

    def record_load(manager, manifest, load) -> None:
        key = manifest.key or manifest.name
        would_load.add(key)
        manager._plugins[key] = _Row(manifest, True, None)

    hermes_plugins, Observed = _manager_class(record_load)

    class Listing(Observed):
        def _register_deferred_platform(self, manifest):  # imported on first use, by the gateway only
            self._plugins[manifest.key or manifest.name] = _Row(manifest, False, "bundled platform: the gateway's")

    manager = Listing()
    manager.discover_and_load()
    status = _hermes_status()
    rows = []
    for key, loaded in manager._plugins.items():
        manifest = loaded.manifest
        loads = key in would_load
        shown = status(str(manifest.name), key)
        rows.append({
            "key": key, "name": str(manifest.name), "source": str(manifest.source), "kind": str(manifest.kind),
            "location": str(manifest.path or ""), "loads": loads,
            "enabled": shown == "enabled" if shown is not None else loads,
            "why": ("a bundled backend: Hermes always loads it" if (manifest.source, manifest.kind) == (
                "bundled", "backend") else "in plugins.enabled") if loads else str(loaded.error or "not loaded"),
            "hooks": [str(h) for h in (manifest.provides_hooks or []) if isinstance(h, str)],
        })
    return {"plugins": rows, "errors": []}


class _Row:
    def __init__(self, manifest, enabled, error):
        self.manifest, self.enabled, self.error = manifest, enabled, error


def _hermes_status():
    """What `hermes plugins list` shows as a plugin's status (enabled / disabled / not enabled)."""
    try:
        from hermes_cli import plugins_cmd

        enabled, disabled = plugins_cmd._get_enabled_set(), plugins_cmd._get_disabled_set()
        return lambda name, key: plugins_cmd._plugin_status(name, enabled, disabled, key=key)
    except Exception:
        return lambda name, key: None


MAX_KEYS = 200  # the names of every `sessions:` key the release defines; a real one has about 15


def probe(keys: list[str]) -> dict:
    """Who this installation is: Hermes' version, the defaults it ships (of the `sessions:` keys the
    caller names: this file imports nothing of ours), and which files to watch for it to change (the
    caller's cache compares their stat)."""
    import hermes_cli  # not Hermes: the caller tells so

    answer = {"python": sys.executable, "prefix": sys.prefix, "hermes": None, "sessions": {},
              "sessions_keys": None, "hook_callback_timeout": None, "watch": [sys.executable, hermes_cli.__file__]}
    try:
        from importlib.metadata import distribution

        dist = distribution("hermes-agent")
        answer["hermes"] = dist.version
        path = getattr(dist, "_path", None)  # its dist-info folder: a reinstall rewrites METADATA
        answer["watch"].append(str(Path(path) / "METADATA") if path else "")
    except Exception:
        answer["hermes"] = str(getattr(hermes_cli, "__version__", "") or "") or None
    try:
        from hermes_cli.config import DEFAULT_CONFIG

        answer["watch"].append(sys.modules["hermes_cli.config"].__file__)
        sessions = DEFAULT_CONFIG.get("sessions") if isinstance(DEFAULT_CONFIG, dict) else None
        if isinstance(sessions, dict):
            answer["sessions"] = {k: sessions[k] for k in keys
                                  if k in sessions and isinstance(sessions[k], (bool, int, float))}
            answer["sessions_keys"] = sorted(k for k in sessions if isinstance(k, str))[:MAX_KEYS]
        plugins = DEFAULT_CONFIG.get("plugins") if isinstance(DEFAULT_CONFIG, dict) else None
        timeout = plugins.get("hook_callback_timeout") if isinstance(plugins, dict) else None
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
            answer["hook_callback_timeout"] = timeout
    except Exception as exc:
        answer["defaults_error"] = f"{type(exc).__name__}: {exc}"[:500]
    try:  # Hermes' managed scope (0.19.0 and later): merged over every profile's config.yaml by load_config()
        import importlib.util

        answer["managed_scope"] = importlib.util.find_spec("hermes_cli.managed_scope") is not None
    except Exception:
        answer["managed_scope"] = False
    answer["delete_hook"] = _knows_delete_hook()
    try:
        import sqlite3

        answer["sqlite"] = sqlite3.sqlite_version  # the library Hermes' stores are written with
    except Exception:
        pass
    answer["watch"] = [w for w in answer["watch"] if w]
    return answer


def _knows_delete_hook() -> bool | None:
    """Does Hermes' own plugin manager know `on_session_delete` (then Hermes fires it itself, and
    hermes-admin announces only its own deletions)? None: it could not be told."""
    try:
        from hermes_cli import plugins as hermes_plugins

        known = getattr(hermes_plugins, "VALID_HOOKS", None)
        return HOOK in known if isinstance(known, (set, frozenset, list, tuple, dict)) else None
    except Exception:
        return None


# -- how it is started -------------------------------------------------------------

# Loads this file by its path under a name of its own: no folder of ours goes on sys.path.
BOOT = ("import sys, importlib.util as u; s = u.spec_from_file_location('hermes_admin_in_hermes', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); sys.exit(m.main(sys.argv[2:]))")


def command(python: str, mode: str, *args: str) -> list[str]:
    """`python` running this file in `mode` (with `args`: the probe's `sessions:` keys): isolated (-I:
    no current folder, user site or PYTHON* variables), writing no bytecode into plugin folders (-B)."""
    return [python, "-I", "-B", "-c", BOOT, os.path.abspath(__file__), mode, *args]


def main(args: list[str] | None = None) -> int:
    mode = (args or ["serve"])[0]
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever plugins (or Hermes) print goes to stderr, never into the protocol
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        replies.write(json.dumps(message, default=str) + "\n")
        replies.flush()

    if mode == "probe":
        try:
            send(probe((args or [])[1:]))
        except BaseException as exc:
            send({"error": f"{type(exc).__name__}: {exc}"[:500]})
            return 3
        return 0
    spec = json.loads(sys.stdin.readline())
    os.environ["HERMES_HOME"] = spec["home"]
    if mode == "list":
        try:
            send(list_with_hermes(spec))
        except BaseException as exc:
            send({"plugins": [], "errors": [f"Hermes' plugin discovery failed in {_where()}: "
                                            f"{type(exc).__name__}: {exc}"[:2000]]})
        return 0
    hooks, errors = load_with_hermes(spec) if spec.get("hermes") else load_plugins(spec)
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
                    import traceback

                    traceback.print_exc(file=sys.stderr)
            send({"done": index, "error": error})
        send({"finished": True})
    return 0

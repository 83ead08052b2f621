"""Find a profile's plugins as Hermes does, without importing any of them.

Directory plugins live in `<home>/plugins/<name>/` (flat) or
`<home>/plugins/<category>/<name>/` (only when the category folder has no
manifest of its own), each with `plugin.yaml` (or `plugin.yml`) and an
`__init__.py` defining `register(ctx)`. Installed packages register through
the entry-point group `hermes_agent.plugins`. Plugins are opt-in: only names
in the profile's `plugins.enabled` load, `plugins.disabled` always wins, and
`HERMES_SAFE_MODE=1` loads none. Only the manifest (YAML) is read here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from hermes_admin import yamlfile

from hermes_admin.profile.hermes_config import HermesConfig

ENTRY_POINT_GROUP = "hermes_agent.plugins"  # the group Hermes loads installed plugins from
MANIFESTS = ("plugin.yaml", "plugin.yml")  # the manifest names Hermes accepts, in its order


@dataclass
class PluginInfo:
    key: str  # path-derived key: `name` or `category/name`; the entry point's name
    name: str  # the manifest's name (or the key)
    source: str  # "directory" or "entry-point"
    location: str  # folder, or `module:attr` of the entry point
    enabled: bool = False
    why: str = ""
    hooks: list[str] = field(default_factory=list)  # declared in the manifest
    error: str | None = None

    def as_dict(self) -> dict:
        return {
            "key": self.key, "name": self.name, "source": self.source, "location": self.location,
            "enabled": self.enabled, "why": self.why, "hooks": self.hooks, "error": self.error,
        }


def _manifest(folder: Path) -> Path | None:
    for name in MANIFESTS:
        if (folder / name).is_file():
            return folder / name
    return None


def _read_manifest(path: Path, key: str) -> PluginInfo:
    folder = path.parent
    info = PluginInfo(key=key, name=key, source="directory", location=str(folder))
    try:
        data = yamlfile.load(path) or {}
    except yamlfile.YAMLRefused as exc:
        info.error = f"unreadable manifest: {exc}"
        return info
    except OSError as exc:
        info.error = f"{path}: unreadable manifest ({exc.strerror})"
        return info
    if isinstance(data, dict):
        info.name = str(data.get("name") or key)
        hooks = data.get("hooks") or data.get("provides_hooks") or []
        info.hooks = [str(h) for h in hooks] if isinstance(hooks, list) else []
    if not (folder / "__init__.py").is_file():
        info.error = f"{folder}: no __init__.py"
    return info


def _directory_plugins(home: Path) -> list[PluginInfo]:
    base = home / "plugins"
    found: list[PluginInfo] = []
    if not base.is_dir():
        return found
    for entry in sorted(base.iterdir(), key=lambda p: p.name):
        if not entry.is_dir() or (entry.name.startswith("__") and entry.name.endswith("__")):
            continue
        manifest = _manifest(entry)
        if manifest:
            found.append(_read_manifest(manifest, entry.name))
            continue
        try:
            children = sorted(entry.iterdir(), key=lambda p: p.name)
        except OSError:
            continue
        for child in children:  # category layout: one level deeper
            if child.is_dir() and (nested := _manifest(child)):
                found.append(_read_manifest(nested, f"{entry.name}/{child.name}"))
    return found


@lru_cache(maxsize=1)
def _installed_entry_points() -> tuple[tuple[str, str], ...]:
    """The interpreter's `hermes_agent.plugins` entry points: the same for every profile, read once."""
    from importlib.metadata import entry_points

    return tuple((ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP))


def _entry_point_plugins() -> list[PluginInfo]:
    return [PluginInfo(key=name, name=name, source="entry-point", location=value)
            for name, value in _installed_entry_points()]


def safe_mode(environ: Mapping[str, str]) -> bool:
    """HERMES_SAFE_MODE=1 in the invoker's environment (`environ`: the job's): Hermes loads no plugins."""
    return environ.get("HERMES_SAFE_MODE", "").strip().lower() in ("1", "true", "yes", "on")


def discover(home: Path, config: HermesConfig, environ: Mapping[str, str]) -> list[PluginInfo]:
    """Every plugin of the profile, each marked enabled or not and why (`environ`: the invoker's
    environment, as the job carries it)."""
    plugins = _directory_plugins(Path(home)) + _entry_point_plugins()
    enabled, disabled = set(config.plugins_enabled), set(config.plugins_disabled)
    for plugin in plugins:
        names = {plugin.key, plugin.name}
        if safe_mode(environ):
            plugin.why = "HERMES_SAFE_MODE=1 loads no plugins"
        elif names & disabled:
            plugin.why = "listed in plugins.disabled"
        elif not names & enabled:
            plugin.why = "not in plugins.enabled (plugins are opt-in)"
        elif plugin.error:
            plugin.why = plugin.error
        else:
            plugin.enabled, plugin.why = True, "in plugins.enabled"
    return plugins

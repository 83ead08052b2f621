"""The admin config (YAML): where it is found and what it may hold (docs/design.md §4).

Looked up in order: `--config`, `$HERMES_ADMIN_CONFIG`, the user config dir,
the site config dir (platformdirs), `/etc/hermes-admin/config.yaml`. No file
at all is fine: every key has a default.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import platformdirs

from hermes_admin import yamlfile
from hermes_admin.layers import HermesPython, Layer, Managed, Origin, PolicyLayers
from hermes_admin.shown import did_you_mean
from hermes_admin.trust import expand_user, not_roots_alone, xdg_folder

APP = "hermes-admin"  # the folder name platformdirs and /etc look under
# every key the admin config may hold; any other is refused (exit 78)
TOP_LEVEL_KEYS = {"roots", "defaults", "profiles", "schedule", "metrics_file", "hermes_python", "exclude"}


class ConfigError(Exception):
    """A config that cannot be used; the message names the file, `key` the key it is about, if one,
    `line` the line YAML found the file invalid at, if it said."""

    def __init__(self, message: str, key: str | None = None, line: int | None = None):
        super().__init__(message)
        self.key = key
        self.line = line


@dataclass
class AdminConfig:
    path: Path | None = None
    roots: list[str] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)
    profiles: dict = field(default_factory=dict)
    schedule: dict = field(default_factory=dict)
    metrics_file: str | None = None
    # the python of the Hermes installation plugins run in: one path for every root, or {ROOT: path}
    hermes_python: str | dict | None = None
    # profiles left out unless named with -p: NAME (in every root), ROOT:NAME or a home folder, as -p takes them
    exclude: list[str] = field(default_factory=list)
    # Hermes' managed scope, read with the config (host/managed.py; `with_managed`): not a part of the
    # admin config's file, but what the same commands apply over every profile's own config.yaml
    managed: Managed | None = None
    managed_warning: str | None = None  # why a managed file there is ignored (malformed), said in each run


def user_config_dir() -> Path:
    """Our folder in the account's config dir: root's own (trust.xdg_folder), never $HOME's."""
    folder = xdg_folder("XDG_CONFIG_HOME", ".config")
    return folder / APP if folder is not None else Path(platformdirs.user_config_dir(APP))


def site_config_dir() -> Path:
    """Our folder in the site config dir ($XDG_CONFIG_DIRS, as root only where it is root's alone)."""
    folder = xdg_folder("XDG_CONFIG_DIRS", "/etc/xdg")
    return folder / APP if folder is not None else Path(platformdirs.site_config_dir(APP))


def candidate_paths(environ: dict[str, str] | None = None) -> list[Path]:
    env = os.environ if environ is None else environ
    paths = []
    if env.get("HERMES_ADMIN_CONFIG"):
        paths.append(Path(expand_user(env["HERMES_ADMIN_CONFIG"])))
    paths.append(user_config_dir() / "config.yaml")
    paths.append(site_config_dir() / "config.yaml")
    paths.append(Path("/etc") / APP / "config.yaml")
    return paths


def load(explicit: str | None = None, environ: dict[str, str] | None = None) -> AdminConfig:
    """The admin config in force; an explicit path must exist, the others may not."""
    if explicit:
        path = Path(expand_user(explicit))
        if not path.is_file():
            raise ConfigError(f"{path}: no such config file")
        return parse(path)
    env = os.environ if environ is None else environ
    for path in candidate_paths(env):
        if path.is_file():
            return parse(path)
        if env.get("HERMES_ADMIN_CONFIG") and path == Path(expand_user(env["HERMES_ADMIN_CONFIG"])):
            raise ConfigError(f"{path}: no such config file (from $HERMES_ADMIN_CONFIG)")
    return AdminConfig()


def trusted(path: Path) -> None:
    """As root, a config (or preset) file is used only if root owns it and nobody else can write it
    or swap it: under `sudo -E` or `su`, $HERMES_ADMIN_CONFIG and the user config dir are a user's.
    The one rule for what root takes from a path (trust.not_roots_alone)."""
    why = not_roots_alone(path, missing_ok=True)
    if why:
        raise ConfigError(f"{path}: refusing it as root: {why}")


def _mapping(path: Path, what: str, error=None) -> dict:
    """A config file's mapping; a key written twice in one mapping is refused (YAML would take the
    last silently), naming its line, as an unknown key is."""
    error = error or ConfigError
    try:
        text = yamlfile.text(path)
        data = yamlfile.load_mapping(path, what, text=text)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yamlfile.YAMLRefused as exc:
        raise error(str(exc), line=exc.line) from None
    twice = yamlfile.duplicate_keys(text)
    if twice:
        key, line = twice[0]
        raise error(f"{path}:{line}: {key} is written twice (YAML would use the last one silently); keep one",
                    key=key, line=line)
    return data


def parse(path: Path) -> AdminConfig:
    trusted(path)
    data = _mapping(path, "a mapping of keys")
    unknown = sorted(map(str, set(data) - TOP_LEVEL_KEYS))[:10]
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}{did_you_mean(unknown[0], TOP_LEVEL_KEYS)} "
                          f"(known: {', '.join(sorted(TOP_LEVEL_KEYS))})", key=unknown[0])
    roots = data.get("roots") or []
    if isinstance(roots, str):
        roots = [roots]
    if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
        raise ConfigError(f"{path}: roots must be a list of paths")
    for key in ("defaults", "profiles", "schedule"):
        if not isinstance(data.get(key) or {}, dict):
            raise ConfigError(f"{path}: {key} must be a mapping")
    exclude = data.get("exclude") or []
    if isinstance(exclude, str):
        exclude = [exclude]
    if not isinstance(exclude, list) or not all(isinstance(e, str) and e for e in exclude):
        raise ConfigError(f"{path}: exclude must be a list of profiles (NAME, ROOT:NAME or a home folder)")
    pythons = data.get("hermes_python")
    if pythons is not None and not isinstance(pythons, str) and not (
            isinstance(pythons, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in pythons.items())):
        raise ConfigError(f"{path}: hermes_python must be a path, or a mapping of root folders to paths")
    return AdminConfig(
        path=path, roots=roots, defaults=data.get("defaults") or {},
        profiles=data.get("profiles") or {}, schedule=data.get("schedule") or {},
        metrics_file=data.get("metrics_file"), hermes_python=pythons, exclude=exclude,
    )


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a config file: where (file and line, when known) and what."""

    file: str | None
    line: int | None
    message: str

    def as_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "message": self.message}

    def __str__(self) -> str:
        """`FILE:LINE: message`, as compilers and `nginx -t` say it (the file said once)."""
        message = self.message
        if not self.file:
            return message
        for said in (f"{self.file}:{self.line}: ", f"{self.file}: "):  # a message that names its file
            if message.startswith(said):
                message = message[len(said):]
                break
        return f"{self.file}:{self.line}: {message}" if self.line else f"{self.file}: {message}"


def text_of(path) -> str | None:
    """A config file's text, to find a key's line: a plain file only (a FIFO is never waited on)."""
    try:
        return yamlfile.text(path) if path else None
    except (OSError, yamlfile.YAMLRefused):
        return None


def problem_at(path, text: str | None, key: str | None, message: str, line: int | None = None) -> Problem:
    """A problem with its file and line: `line` where YAML said one (ConfigError.line), else where
    the key is written."""
    if line is None and text and key:
        line = yamlfile.line_of(text, key)
    return Problem(str(path) if path else None, line, message)


def policy_problems(admin: AdminConfig) -> list[Problem]:
    """Every problem of the admin config's policy layers (`defaults:`, each `profiles:` entry and its
    preset), not only the first, each with its file and line: the one check `config check`, `run`,
    every other command and the daemon apply before any work (a problem there is exit 78), so what
    `config check` passes is what they run, limits included (durations.RULES)."""
    from hermes_admin.profile import policy as rules

    path, text = admin.path, text_of(admin.path)
    found: list[Problem] = []
    for name in sorted(map(str, admin.profiles)) or [""]:
        layers = PolicyLayers(defaults=_defaults(admin))
        try:
            layers = _entry_and_defaults(admin, name)
            found += _python_problems(admin, name, path, text)
            layers = with_preset(layers)
        except ConfigError as exc:  # the entry is not a mapping, or its preset cannot be read
            found.append(problem_at(path, text, exc.key, str(exc), exc.line))
        for origin, key, message in rules.problems(layers, None):
            if layers.preset is not None and origin == layers.preset.origin:  # a file of its own
                found.append(problem_at(origin.file, text_of(origin.file), key, message))
            else:
                found.append(problem_at(path, text, origin.path_of(key), message))
    return list(dict.fromkeys(found))  # a default's problem, found once per profile, said once


def _python_problems(admin: AdminConfig, name: str, path, text: str | None) -> list[Problem]:
    """An entry's `hermes_python` that is not a path (the global one is checked as the file is read)."""
    python = admin.profiles[name].get("hermes_python") if admin.profiles.get(name) else None
    if python is None or _a_path(python):
        return []
    return [problem_at(path, text, f"profiles.{name}.hermes_python",
                       f"{_origin(admin, f'profiles.{name}')}: hermes_python must be the path of a python, "
                       f"not {str(python)[:60]!r}")]


def _a_path(value) -> bool:
    return isinstance(value, str) and bool(value) and "\0" not in value


def load_checked(explicit: str | None = None) -> AdminConfig:
    """The admin config in force, refused (ConfigError, every problem a line) when any of its policy
    layers is wrong: nothing runs on a config `config check` would refuse. With it, Hermes' managed
    scope (`with_managed`)."""
    admin = load(explicit)
    found = policy_problems(admin)
    if found:
        raise ConfigError("\n".join(map(str, found)))
    return with_managed(admin)


def with_managed(admin: AdminConfig) -> AdminConfig:
    """`admin` with Hermes' managed scope as it is now (host/managed.py): read afresh at each call (each
    command, each daemon run). As root, a managed folder or file that is not root's alone is refused
    as an admin config would be (ConfigError: nothing runs), since it decides what every run deletes."""
    from hermes_admin.host import managed

    try:
        scope = managed.read()
    except managed.Refused as exc:
        raise ConfigError(str(exc)) from None
    return replace(admin, managed=scope.managed, managed_warning=scope.warning)


# -- presets and the admin side of a profile's policy ---------------------------------

class PresetError(ConfigError):
    """A preset that cannot be used; the message names the file."""


def shipped(folder: str) -> Path | None:
    """A folder shipped with hermes-admin (`profiles`, `plugins`): source tree first, then the install prefix."""
    for base in (Path(__file__).resolve().parents[2], Path(sys.prefix) / "share" / APP):
        if (base / folder).is_dir():
            return base / folder
    return None


def preset_dirs() -> list[Path]:
    """Where `preset: NAME` is looked up: the admin config dirs, then the presets shipped with hermes-admin."""
    dirs = [user_config_dir() / "profiles", site_config_dir() / "profiles"]
    return dirs + ([shipped("profiles")] if shipped("profiles") else [])


def load_preset(name: str) -> tuple[dict, Path]:
    if not name or "/" in name or name.startswith("."):
        raise PresetError(f"preset {name!r}: not a preset name")
    for folder in preset_dirs():
        path = folder / f"{name}.yaml"
        if path.is_file():
            trusted(path)
            return _mapping(path, "a mapping (a preset)", PresetError), path
    known = {p.stem for folder in preset_dirs() if folder.is_dir() for p in folder.glob("*.yaml")}
    raise PresetError(f"preset {name!r} not found in {', '.join(str(d) for d in preset_dirs())}"
                      + did_you_mean(name, known))



def _origin(admin: AdminConfig, section: str) -> Origin:
    """A section of the admin config as an origin (`admin config` when no file was read)."""
    return Origin(str(admin.path or "admin config"), section)


def _defaults(admin: AdminConfig) -> Layer:
    return Layer(admin.defaults, _origin(admin, "defaults"))


def defaults_only(admin: AdminConfig) -> PolicyLayers:
    """The `defaults:` alone: what still says something when a profile's entry cannot be used."""
    return PolicyLayers(defaults=_defaults(admin))


def _entry_and_defaults(admin: AdminConfig, profile_name: str) -> PolicyLayers:
    """A profile's entry (refused unless a mapping) and the defaults, without the entry's preset."""
    origin = _origin(admin, f"profiles.{profile_name}")
    entry = admin.profiles.get(profile_name) or {}
    if not isinstance(entry, dict):
        raise ConfigError(f"{origin} must be a mapping", key=origin.section)
    return PolicyLayers(entry=Layer(entry, origin), defaults=_defaults(admin))


def with_preset(layers: PolicyLayers) -> PolicyLayers:
    """`layers` with the preset their entry names, read (PresetError when it cannot be)."""
    named = layers.entry.values.get("preset") if layers.entry is not None else None
    if named is None:
        return layers
    try:
        values, path = load_preset(str(named))
    except PresetError as exc:
        # said at the admin config's `preset:` line; the message names the preset and its own line
        raise PresetError(str(exc), key=f"{layers.entry.origin.section}.preset") from None
    return replace(layers, preset=Layer(values, Origin(str(path))))


def policy_layers(admin: AdminConfig, profile_name: str) -> PolicyLayers:
    """The admin config's part of one profile's policy, for the worker to stack under the
    profile's own `config.yaml` (`profile.policy.effective`): its entry, preset and defaults.
    ConfigError when the entry is not a mapping or its preset cannot be read."""
    return with_preset(_entry_and_defaults(admin, profile_name))


def hermes_python(admin: AdminConfig, profile_name: str, root: Path) -> HermesPython | None:
    """The admin config's `hermes_python` for one profile (its entry, else its root's, else the
    global one) and where it was set; None when it sets none, or sets one that is not a path
    (policy_problems says so)."""
    entry = admin.profiles.get(profile_name)
    if isinstance(entry, dict) and entry.get("hermes_python") is not None:
        python = entry["hermes_python"]
        return HermesPython(python, _origin(admin, f"profiles.{profile_name}")) if _a_path(python) else None
    if isinstance(admin.hermes_python, dict):
        for folder, python in admin.hermes_python.items():  # as spelled: a user's link never matches
            if os.path.normpath(expand_user(folder)) == os.path.normpath(os.path.abspath(root)):
                return HermesPython(python, _origin(admin, f"hermes_python.{folder}"))
        return None
    if admin.hermes_python is not None:
        return HermesPython(admin.hermes_python, _origin(admin, "hermes_python"))
    return None

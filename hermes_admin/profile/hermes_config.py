"""A profile's own Hermes `config.yaml`: the few keys hermes-admin reads.

Read raw (no Hermes defaults merged in) and never written. A malformed file
is reported by the caller with the profile and path; nothing is guessed.
Where the profile's Hermes reads a managed scope (host/managed.py), its
sections are merged over the file's as Hermes merges them (`merged`), and each
value still says which file it came from (`origin_of`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_admin import yamlfile
from hermes_admin.layers import Managed
from hermes_admin.problems import WARNING, Problem
from hermes_admin.shown import did_you_mean

DEFAULT_HOOK_TIMEOUT_S = 30.0  # Hermes' own default for plugins.hook_callback_timeout
# hermes-admin's ceiling for one callback in unattended runs: also what Hermes' "0 = no cap" means here.
MAX_HOOK_TIMEOUT_S = 600.0


# The keys of DEFAULT_CONFIG["sessions"] in each release hermes-admin knows (read from the releases
# themselves). Where the installed Hermes is known, the keys its own release defines count as well
# (installation.py's probe), so a release newer than these never gets its own keys called unknown.
RELEASE_SESSIONS_KEYS = {
    "0.19.0": frozenset({"auto_prune", "retention_days", "vacuum_after_prune", "min_interval_hours",
                         "write_json_snapshots"}),
    "0.20.1": frozenset({"auto_prune", "retention_days", "auto_archive", "auto_archive_days", "vacuum_after_prune",
                         "min_vacuum_interval_days", "min_interval_hours", "write_json_snapshots",
                         "fts_optimize_notice", "cjk_fts", "search_slow_ms", "max_resume_messages",
                         "max_export_messages"}),
    "0.22.2": frozenset({"auto_prune", "retention_days", "auto_archive", "auto_archive_days", "show_subagents",
                         "vacuum_after_prune", "min_vacuum_interval_days", "min_interval_hours",
                         "fts_optimize_notice", "cjk_fts", "search_slow_ms", "max_resume_messages",
                         "max_export_messages"}),
}
# Keys no release defines that a profile may still hold: `source_retention_days` (Hermes' PR #110702,
# which hermes-admin reads) and `tool_payload_retention_days` (Hermes main, not released yet).
UNRELEASED_SESSIONS_KEYS = frozenset({"source_retention_days", "tool_payload_retention_days"})
# Every `sessions:` key a known release defines or a profile may hold, known without asking the
# installation; anything else there is most likely a typo, which is warned about (never a reason to
# skip a profile: Hermes may add keys).
KNOWN_SESSIONS_KEYS = frozenset().union(*RELEASE_SESSIONS_KEYS.values()) | UNRELEASED_SESSIONS_KEYS


# The only sections read: the rest of the file (700 lines in Hermes' default) is checked, never built.
SECTIONS = frozenset({"sessions", "plugins"})


class HermesConfigError(Exception):
    pass


@dataclass
class HermesConfig:
    path: Path
    data: dict = field(default_factory=dict)  # as Hermes reads it: the file's, the managed scope merged over it
    warnings: list[Problem] = field(default_factory=list)  # each with its file and key
    managed: Managed | None = None  # the managed scope merged into `data`, where the profile's Hermes reads one
    own: dict | None = None  # the file's own sections, as written (None: `data` is the file's alone)
    # `plugins.hook_callback_timeout` as Hermes reads it, checked once when the file is read (a bad
    # value warns once, however often the timeout is asked for); None where nothing sets it.
    own_hook_timeout: float | None = field(default=None, init=False)

    def __post_init__(self):
        plugins = self.section("plugins")
        if "hook_callback_timeout" in plugins:
            self.own_hook_timeout = self._checked_hook_timeout(plugins["hook_callback_timeout"])

    def section(self, name: str) -> dict:
        """A section as Hermes reads it (the managed scope's leaves over the file's)."""
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}

    def own_section(self, name: str) -> dict:
        """A section as the profile's own file writes it."""
        value = (self.data if self.own is None else self.own).get(name)
        return value if isinstance(value, dict) else {}

    def origin_of(self, section: str, key: str) -> str:
        """The file a key's value comes from: the managed one where it pins the key, else the profile's."""
        if self.managed is not None and self.managed.sets(section, key):
            return self.managed.file
        return str(self.path)

    @property
    def plugins_enabled(self) -> list[str]:
        return _names(self.section("plugins").get("enabled"))

    @property
    def plugins_disabled(self) -> list[str]:
        return _names(self.section("plugins").get("disabled"))

    @property
    def hook_timeout(self) -> float:
        return self.hook_timeout_or(DEFAULT_HOOK_TIMEOUT_S)

    @property
    def sets_hook_timeout(self) -> bool:
        return self.own_hook_timeout is not None

    def hook_timeout_or(self, default: float) -> float:
        """`plugins.hook_callback_timeout`, else `default` (the installation's, else 30 s), by
        `hook_seconds`' rule. Asking says nothing: the file's value was checked when it was read."""
        if self.own_hook_timeout is not None:
            return self.own_hook_timeout
        seconds = hook_seconds(default)
        return DEFAULT_HOOK_TIMEOUT_S if seconds is None else seconds

    def _checked_hook_timeout(self, raw) -> float:
        seconds = hook_seconds(raw)
        if seconds is None:
            self.warnings.append(Problem(
                WARNING, f"plugins.hook_callback_timeout {str(raw)[:40]!r} is not a finite number >= 0; using 30 s",
                kind="hermes_config", path=self.origin_of("plugins", "hook_callback_timeout"),
                key="plugins.hook_callback_timeout"))
            return DEFAULT_HOOK_TIMEOUT_S
        return seconds


def hook_seconds(raw) -> float | None:
    """A hook timeout as it is used: at most 600 s, which is also what 0 (Hermes' "no cap") means for
    an unattended run; None for anything but a finite number >= 0."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw < 0:
        return None
    return MAX_HOOK_TIMEOUT_S if raw == 0 else min(float(raw), MAX_HOOK_TIMEOUT_S)


def _names(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    return []


def merged(own: dict, managed: Managed) -> dict:
    """The sections hermes-admin reads as Hermes has them once its managed scope is merged over the
    profile's own (hermes_cli.config._deep_merge, the same in 0.19.0, 0.20.1 and 0.22.2): a mapping
    over a mapping goes leaf by leaf, `null` over a mapping changes nothing, anything else (a list of
    plugins too) replaces what the profile says. Hermes' defaults always have both sections, so a
    section the profile lacks is an empty mapping here."""
    data = dict(own)
    for name in SECTIONS:
        pinned = managed.section(name)
        if pinned is None:  # none in the managed file (or `null`, which changes nothing over a mapping)
            continue
        base = {} if own.get(name) is None else own[name]  # Hermes' defaults under a missing or empty one
        data[name] = _deep_merge({name: base}, {name: pinned})[name]
    return data


def _deep_merge(base: dict, override: dict) -> dict:
    result = dict(base)
    for key, value in override.items():
        over_dict = isinstance(result.get(key), dict)
        if over_dict and isinstance(value, dict):
            result[key] = _deep_merge(result[key], value)
        elif not (over_dict and value is None):
            result[key] = value
    return result


def load(home: Path, known: Iterable[str] = (), managed: Managed | None = None) -> HermesConfig:
    """The profile's config.yaml, read raw. `known`: the `sessions:` keys of the installed release
    (installation.sessions_keys), known on top of KNOWN_SESSIONS_KEYS; a caller that has not looked the
    installation up passes none, and the releases hermes-admin knows are the measure. `managed`:
    the managed scope the profile's Hermes reads (Installations.managed_for), merged over it."""
    path = Path(home) / "config.yaml"
    if not os.path.lexists(path):
        return HermesConfig(path, merged({}, managed), managed=managed, own={}) if managed else HermesConfig(path)
    try:
        text = yamlfile.text(path)
        data = yamlfile.load_mapping(path, keys=SECTIONS, text=text)
    except OSError as exc:
        raise HermesConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yamlfile.YAMLRefused as exc:
        raise HermesConfigError(str(exc)) from None
    config = HermesConfig(path, merged(data, managed), managed=managed, own=data) if managed else HermesConfig(path, data)
    unknown = sorted(map(str, set(config.own_section("sessions")) - KNOWN_SESSIONS_KEYS - set(known)))
    if unknown:
        shown = ", ".join(k[:40] for k in unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        config.warnings.append(Problem(WARNING, f"sessions: unknown key(s) {shown}"
                                       f"{did_you_mean(unknown[0], KNOWN_SESSIONS_KEYS | set(known)) or ' (a typo?)'}"
                                       "; not used",
                                       kind="hermes_config", path=str(path), key=f"sessions.{unknown[0]}"))
    for key, line in yamlfile.duplicate_keys(text, SECTIONS):  # Hermes' YAML reader takes the last: so do we
        config.warnings.append(Problem(WARNING, f"{key}: written twice; the last one is used",
                                       kind="hermes_config", path=str(path), key=key, line=line))
    # each with the line of its key, as `config check` says it (and every command's JSON)
    config.warnings[:] = [w if w.line is not None or not w.key or w.path != str(path)  # a managed file's: its own
                          else replace(w, line=yamlfile.line_of(text, w.key)) for w in config.warnings]
    return config

"""Per-profile maintenance policy: a plain value, its precedence chain, its validation.

Effective policy for a profile, first match wins per key (docs/design.md §4):
Hermes' managed scope, where the profile's Hermes reads one (its `sessions:` keys,
which Hermes merges over every profile's config) -> the admin config's entry for
the profile (its own keys, then its `preset:`)
-> the profile's `config.yaml` `sessions:` keys -> the admin config's
`defaults:` -> the defaults of the Hermes installed for the profile
(`installation.py`) -> built-ins (Hermes 0.19.0's). Each value keeps where it
came from (`origins`), which dry runs, `config show --origin` and `profiles --json` show. Like restic's policies, a Policy can
describe itself in one sentence, which dry runs and logs print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Mapping

from hermes_admin import durations
from hermes_admin.layers import Managed, Origin, PolicyLayers
from hermes_admin.model import HERMES_SESSIONS_KEYS
from hermes_admin.shown import did_you_mean
from hermes_admin.profile.hermes_config import HermesConfig

# Hermes' own defaults, plus hermes-admin's for the keys Hermes does not have.
BUILTINS = {
    "auto_prune": False,
    "retention_days": 90,
    "auto_archive": False,
    "auto_archive_days": 3,
    "vacuum_after_prune": False,
    "empty_min_age_hours": 1,
    "empty_sweep": True,
    "ghost_prune": True,
    "repair": "report",  # `run`'s repair step: report only, or apply the fixes
    "export_dir": None,  # where deleted units are exported first (None: <home>/.hermes-admin/exports)
    "export_keep_days": 7,  # 0: export only the units deleted in several steps, and only until done
    "quick_check_hours": 24,  # `run` reads a whole store (PRAGMA quick_check) at most this often; 0: every run
    "lock_wait": 300,  # seconds another writer may hold the store's write lock without progress (store/connect.py)
    "source_retention_days": {},  # source -> days, over retention_days for that source's sessions
    "stale_grace_days": None,  # a stale-closed row's wait before a purge may take it (None: its full window)
    "max_store_mb": None,  # a size budget: over it after the usual tasks, the oldest eligible units go
    "min_keep_days": 7,  # what the size budget never takes: anything active this recently
    "incremental_vacuum": True,  # a VACUUM of ours switches the store to incremental auto-vacuum (engine.reclaim)
    # Sessions deleted outside hermes-admin (by a Hermes that does not fire `on_session_delete`
    # itself) are announced to the profile's plugins by the next pass (engine/noticed.py).
    "announce_hermes_deletes": True,
    # How long root waits for the worker of a profile's owner (host/workers.py): seconds without a
    # sign of life (it beats every few seconds; a stopped or traced one does not), and in all.
    # Read by the host from the admin config alone (admin_setting); a worker's longest wait of its
    # own (lock_wait, a plugin's timeout) never counts against the first: it beats meanwhile.
    "worker_idle_timeout": 120,
    "worker_timeout": 7200,
}
ADMIN_KEYS = set(BUILTINS) | {"preset", "hermes_python"}  # hermes_python: installation.py reads it
# keys that take true or false
_BOOLS = {"auto_prune", "auto_archive", "vacuum_after_prune", "empty_sweep", "ghost_prune", "incremental_vacuum",
          "announce_hermes_deletes"}
_CHOICES = {"repair": ("report", "apply")}  # keys that take one of a few words
_PATHS = {"export_dir"}  # keys that take a path (relative to the home)
# Durations (`120d`, `1w2d`, `3mo`, or a bare number in the key's own unit) are the keys of
# durations.RULES, each with its unit and minimum.


class PolicyError(Exception):
    """A policy that cannot be used; the message names where it came from."""


@dataclass(frozen=True)
class Policy:
    auto_prune: bool
    retention_days: float
    auto_archive: bool
    auto_archive_days: float
    vacuum_after_prune: bool
    empty_min_age_hours: float
    empty_sweep: bool
    ghost_prune: bool
    repair: str = "report"
    export_dir: str | None = None
    export_keep_days: float = 7.0
    quick_check_hours: float = 24.0
    lock_wait: float = 300.0
    source_retention_days: dict = field(default_factory=dict)
    stale_grace_days: float | None = None
    incremental_vacuum: bool = True
    max_store_mb: float | None = None
    min_keep_days: float = 7.0
    announce_hermes_deletes: bool = True
    worker_idle_timeout: float = 120.0
    worker_timeout: float = 7200.0
    origins: dict = field(default_factory=dict, compare=False)  # key -> the layer its value came from

    def describe(self) -> str:
        parts = [
            f"delete ended sessions inactive over {_days(self.retention_days)}" if self.auto_prune
            else "no retention purge (auto_prune off)",
            f"archive sessions idle over {_days(self.auto_archive_days)}" if self.auto_archive
            else "no auto-archive",
            f"sweep empty sessions ended over {self.empty_min_age_hours:g} h ago" if self.empty_sweep
            else "no empty sweep",
            "prune ghost rows" if self.ghost_prune else "no ghost pruning",
            ("apply profile repairs" if self.repair == "apply" else "report profile repairs")
            + (f", quick_check every {self.quick_check_hours:g} h" if self.quick_check_hours > 0 else ", quick_check every run"),
            (f"exports kept {_days(self.export_keep_days)}" if math.isfinite(self.export_keep_days)
             else "exports kept forever") + (f" in {self.export_dir}" if self.export_dir else "")
            if self.export_keep_days > 0 else "exports only of units deleted in steps",
        ]
        if self.source_retention_days:
            parts.insert(1, "per source: " + ", ".join(f"{s} {_days(d)}" for s, d in
                                                       sorted(self.source_retention_days.items())))
        return "; ".join(parts)

    def switch(self, key: str | None):
        """The value of a task's switch (model.TaskName.switch), the key that turns the task on for `run`:
        one of this policy's keys, read from its values as the report shows them (`values`), so that a
        new task's switch needs nothing written here; True for a task without one (always on)."""
        return True if key is None else self.values()[key]

    def windows(self):
        """Retention's windows (tasks/retention.Windows): per source, and for stale-closed rows."""
        from hermes_admin.profile.tasks.retention import Windows

        return Windows(self.retention_days, dict(self.source_retention_days), self.stale_grace_days)

    def values(self) -> dict:
        """Every key of the policy with its value (and `origins`), as the dataclass holds them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def as_dict(self) -> dict:
        """Plain JSON values: a number without end (`.inf` in YAML) is null, which JSON can hold."""
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in self.values().items()} | {
            "description": self.describe()}


def _days(days: float) -> str:
    """`1 day`, `90 days`, `0.5 days`: a policy's windows as its description says them."""
    return f"{days:g} day" + ("" if days == 1 else "s")


def _check_keys(data: Mapping, allowed: set[str], where: str) -> None:
    unknown = sorted(set(data) - allowed, key=str)
    if unknown:
        raise PolicyError(_unknown(where, "unknown key(s)", unknown, allowed))


def _unknown(where, label: str, keys: list, allowed: set[str]) -> str:
    """`WHERE: unknown key(s) a, b (did you mean …?) (known: …)`: keys as written, a long or odd one shortened."""
    shown = ", ".join(_short(k) if not isinstance(k, str) or len(k) > 60 else k for k in keys[:10])
    more = f" and {len(keys) - 10} more" if len(keys) > 10 else ""
    return f"{where}: {label} {shown}{more}{did_you_mean(keys[0], allowed)} (known: {', '.join(sorted(allowed))})"


def _short(value) -> str:
    """A value quoted in an error: never more than a line of it."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _coerce(key: str, value, where: str, hermes: bool = False):
    """`value` as the policy holds it; `hermes`: a profile's own config.yaml, where Hermes reads the same
    keys and takes plain numbers only (a duration there would break Hermes' own maintenance)."""
    if key == "source_retention_days":
        if not isinstance(value, dict) or len(value) > 100:
            raise PolicyError(f"{where}: {key} must be a mapping of sources to days, not {_short(value)}")
        return {_coerce_source(source, where): _duration(key, days, f"{where}: {key}.{source}", hermes)
                for source, days in value.items()}
    if key in ("stale_grace_days", "max_store_mb") and value is None:
        return None
    if key in _PATHS:
        if value is not None and (not isinstance(value, str) or not value or "\0" in value):
            raise PolicyError(f"{where}: {key} must be a folder path, not {_short(value)}")
        return value
    if key in _CHOICES:
        if value not in _CHOICES[key]:
            raise PolicyError(f"{where}: {key} must be one of {', '.join(_CHOICES[key])}, not {_short(value)}")
        return value
    if key in _BOOLS:
        if not isinstance(value, bool):
            raise PolicyError(f"{where}: {key} must be true or false, not {_short(value)}")
        return value
    if key in durations.RULES:
        return _duration(key, value, f"{where}: {key}", hermes)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise PolicyError(f"{where}: {key} must be a number, not {_short(value)}")
    if key == "max_store_mb" and value < 0:
        raise PolicyError(f"{where}: {key} must be 0 or more, not {_short(value)}")
    return float(value)


def _duration(key: str, value, where: str, hermes: bool) -> float:
    """A duration key's value in its unit, under the key's one rule (durations.RULES: unit, minimum).
    A value under the minimum is refused here, in every layer and whatever the command: a config
    is read unattended, so no `--force` passes it (only an option's own value may be forced)."""
    if hermes and isinstance(value, str):
        raise PolicyError(f"{where} must be a number, not {_short(value)} (Hermes reads this key too: a plain number)")
    try:
        return durations.read(key, value)
    except durations.DurationError as exc:
        raise PolicyError(f"{where}: {exc}") from None


def _coerce_source(source, where: str) -> str:
    if not isinstance(source, str) or not source or len(source) > 64 or not source.isprintable():
        raise PolicyError(f"{where}: source_retention_days: {_short(source)} is not a source name")
    return source


def effective(profile_name: str, layers: PolicyLayers, hermes: HermesConfig,
              installed: tuple[dict, str] | None = None) -> Policy:
    """The policy in force for one profile; raises PolicyError with the file to blame.

    `layers` are the admin config's, read by the host (`host.config.policy_layers`):
    the profile's entry, its preset, the defaults, each with where it came from.
    """
    policy, _ = with_origins(profile_name, layers, hermes, installed)
    return policy


def _allowed(layers: PolicyLayers):
    """The admin config's layers, each with the keys it may hold: an entry also names its preset
    and its Hermes interpreter (read by the host and installation.py, not values of the policy)."""
    for layer in layers.admin_layers():
        yield layer, ADMIN_KEYS if layer is layers.entry else set(BUILTINS)


def _values(layer, allowed: set[str]) -> dict:
    return {k: v for k, v in layer.values.items() if k in allowed and k not in ("preset", "hermes_python")}


def _own(hermes: HermesConfig) -> tuple[dict, Origin, bool]:
    """The profile's own config.yaml as a layer: the keys Hermes reads from its `sessions:`, as written
    there (those the managed scope pins are in `_managed`, over every other layer)."""
    own = hermes.own_section("sessions")
    return {k: own[k] for k in HERMES_SESSIONS_KEYS if k in own}, Origin(str(hermes.path), "sessions"), True


def _managed(hermes: HermesConfig) -> tuple[dict, Origin, bool] | None:
    """Hermes' managed scope as a layer, where the profile's Hermes reads one (hermes_config.load): the
    `sessions:` keys it pins, each with the value Hermes ends up with (the managed leaf over the user's:
    a mapping such as `source_retention_days` merged per source), from the managed file."""
    managed = hermes.managed
    if managed is None:
        return None
    merged = hermes.section("sessions")
    pinned = {k: merged[k] for k in HERMES_SESSIONS_KEYS if managed.sets("sessions", k) and k in merged}
    return pinned, Origin(managed.file, "sessions"), True


def stack(layers: PolicyLayers, hermes: HermesConfig | None,
          installed: tuple[dict, str] | None = None) -> list[tuple[dict, Origin, bool]]:
    """Every layer of a profile's policy, first match first, each with where it came from; keys
    checked (an unknown key is an error wherever it is, not only in the layer that wins)."""
    layered: list[tuple[dict, Origin, bool]] = []  # (values, where, is Hermes' own config.yaml)
    for layer, allowed in _allowed(layers):
        _check_keys(layer.values, allowed, str(layer.origin))
        layered.append((_values(layer, allowed), layer.origin, False))
    if hermes is not None:  # the profile's own config.yaml: under the entry and its preset, over the defaults
        layered.insert(len(layered) - (layers.defaults is not None), _own(hermes))
    if installed is not None:  # the defaults of the Hermes installed for the profile (installation.py)
        layered.append(({k: v for k, v in installed[0].items() if k in HERMES_SESSIONS_KEYS}, Origin(installed[1]),
                        True))
    managed = _managed(hermes) if hermes is not None else None
    if managed is not None:  # over every other layer: what Hermes applies, and users cannot change
        layered.insert(0, managed)
    return layered


def check_layers(layered: list[tuple[dict, Origin, bool]]) -> list[str]:
    """Every value of every layer checked, winner or not: one problem a line, with its place."""
    problems = []
    for layer, where, hermes in layered:
        for key, value in layer.items():
            try:
                _coerce(key, value, str(where), hermes)
            except PolicyError as exc:
                problems.append(str(exc))
    return problems


def problems(layers: PolicyLayers, hermes: HermesConfig | None) -> list[tuple[Origin, str | None, str]]:
    """Every problem of every layer, none raised: (where, key or None, message), for `config check`."""
    found: list[tuple[Origin, str | None, str]] = []
    checked: list[tuple[dict, Origin, bool]] = []
    for layer, allowed in _allowed(layers):
        where = layer.origin
        for key in sorted(set(layer.values) - allowed, key=str):
            found.append((where, str(key), _unknown(where, "unknown key", [key], allowed)))
        checked.append((_values(layer, allowed), where, False))
    if hermes is not None:
        checked.append(_own(hermes))
        managed = _managed(hermes)
        if managed is not None:
            checked.append(managed)
    for layer, where, own in checked:
        for key, value in layer.items():
            try:
                _coerce(key, value, str(where), own)
            except PolicyError as exc:
                found.append((where, key, str(exc)))
    return found


def with_origins(profile_name: str, layers: PolicyLayers, hermes: HermesConfig | None,
                 installed: tuple[dict, str] | None = None) -> tuple[Policy, dict[str, str]]:
    """The effective policy and, per key, where its value came from (a file and key, or `built-in`).
    `installed`: the defaults of the Hermes installed for the profile, and which one it is."""
    layered = stack(layers, hermes, installed)
    problems = check_layers(layered)
    if problems:
        raise PolicyError(problems[0] + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""))
    values, origins = {}, {}
    for key, default in BUILTINS.items():
        for layer, where, own in layered:
            if key in layer:
                values[key] = _coerce(key, layer[key], where, own)
                origins[key] = where.of(key)
                break
        else:
            values[key], origins[key] = default, "built-in"
    return Policy(**values, origins=origins), origins


def overridden_by_managed(layers: PolicyLayers, managed: Managed) -> list[tuple[Origin, str, str]]:
    """Where the admin config sets a key Hermes' managed scope also pins, to another value: (where,
    key, message), for the first admin layer that sets it (the one that would win without the
    managed scope). The managed value wins (docs/design.md §4), so the admin config's is not applied."""
    found = []
    for key in HERMES_SESSIONS_KEYS:
        if not managed.sets("sessions", key):
            continue
        pinned = managed.section("sessions")[key]
        for layer, allowed in _allowed(layers):
            if key not in layer.values:
                continue
            try:
                same = _coerce(key, layer.values[key], "", False) == _coerce(key, pinned, "", True)
            except PolicyError:
                same = True  # a value that cannot be used is said by the policy's own check
            if not same:
                found.append((layer.origin, key, f"{layer.origin.path_of(key)} ({_short(layer.values[key])}) is not "
                              f"applied: Hermes' managed scope sets {managed.file}: sessions.{key} "
                              f"({_short(pinned)}), which Hermes applies over every profile's config and so "
                              "does hermes-admin"))
            break
    return found


def admin_setting(layers: PolicyLayers, key: str) -> float:
    """A value only the admin config sets (`worker_timeout`, ...), for the host: from the profile's
    entry, its preset, then `defaults:`, as `effective` takes it; the built-in where none sets it or
    the value is wrong (the worker's own reading of the policy then reports the mistake)."""
    for layer in layers.admin_layers():
        if key in layer.values:
            try:
                return _coerce(key, layer.values[key], str(layer.origin))
            except PolicyError:
                break
    return float(BUILTINS[key])


def applies_repairs(layers: PolicyLayers) -> bool:
    """Would `effective` give this profile `repair: apply`? Only the admin config's layers can say so
    (Hermes' own `sessions:` has no such key), in `effective`'s order."""
    for layer in layers.admin_layers():
        if "repair" in layer.values:
            return layer.values["repair"] != "report"
    return BUILTINS["repair"] != "report"

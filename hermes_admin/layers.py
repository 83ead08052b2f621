"""The admin config's part of one profile's policy, as one typed, frozen value (docs/design.md §4).

The host reads the admin config and builds a profile's `PolicyLayers` (host/config.policy_layers):
its `profiles:` entry, the preset that entry names, the `defaults:`, and the `hermes_python` that
serves it, each with where it was written (an `Origin`). The job carries it to the worker
(protocol.py reads it field by field), where it is made into the profile's effective policy
(profile/policy.py) and its installation finder (profile/installation.py). Nothing changes it on
the way: its mappings are read-only, and the values inside them (YAML's own, a nested mapping at
most) are never changed by any reader.

Hermes' managed scope (`Managed`) is read by the host too (host/managed.py), once per command, and
carried in every job's context: the worker merges it over each profile's own `config.yaml`
(profile/hermes_config.py) where the profile's Hermes reads one.

Like model.py, it imports nothing of the package: the host, the protocol and the worker all use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class Origin:
    """Where a layer of policy is written: a file (or what stands for one: `admin config` when no file
    was read, `defaults of Hermes 0.22.2 at …`), and the section of it that holds the layer
    (`profiles.work`, `defaults`, `hermes_python./srv/hermes`, `sessions`); None when the whole
    file is the layer (a preset)."""

    file: str
    section: str | None = None

    def __str__(self) -> str:
        """As messages name the layer: `FILE: profiles.work`, or the file alone."""
        return f"{self.file}: {self.section}" if self.section else self.file

    def path_of(self, key: str | None) -> str | None:
        """A key's dotted path inside the file (`profiles.work.retention_days`), to find its line;
        the section itself without a key."""
        if key is None:
            return self.section
        return f"{self.section}.{key}" if self.section else key

    def of(self, key: str) -> str:
        """Where one key's value came from, as `config show --origin` and the dry run show it:
        `FILE: defaults.retention_days`, `PRESET: retention_days`."""
        return f"{self.file}: {self.path_of(key)}"


@dataclass(frozen=True)
class Layer:
    """One layer's keys and values as written (read-only; checked by profile/policy.py, which alone
    knows what they may be), and where."""

    values: Mapping[str, object]
    origin: Origin

    def __post_init__(self):
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    def as_dict(self) -> dict:
        return {"values": dict(self.values), "origin": {"file": self.origin.file, "section": self.origin.section}}


@dataclass(frozen=True)
class HermesPython:
    """The admin config's `hermes_python` for a profile: the interpreter named, and where."""

    path: str
    origin: Origin


@dataclass(frozen=True)
class PolicyLayers:
    """The admin config's part of one profile's policy, first match first: its entry, the entry's
    preset, the `defaults:` (the profile's own config.yaml goes between the preset and the
    defaults: profile/policy.stack); and the Hermes interpreter the admin config chose for it.
    A layer that is None is not there (a job that reads no policy carries `hermes_python` alone)."""

    entry: Layer | None = None  # profiles.NAME, as written (its `preset:` and `hermes_python:` included)
    preset: Layer | None = None
    defaults: Layer | None = None
    hermes_python: HermesPython | None = None

    def admin_layers(self) -> tuple[Layer, ...]:
        """The layers that hold policy keys, in the order they win."""
        return tuple(layer for layer in (self.entry, self.preset, self.defaults) if layer is not None)

    def as_dict(self) -> dict:
        """For the job's JSON (protocol.Job.encode); protocol reads it back field by field."""
        python = self.hermes_python
        return {"entry": self.entry and self.entry.as_dict(), "preset": self.preset and self.preset.as_dict(),
                "defaults": self.defaults and self.defaults.as_dict(),
                "hermes_python": python and {"path": python.path, "origin": {"file": python.origin.file,
                                                                             "section": python.origin.section}}}


@dataclass(frozen=True)
class Managed:
    """Hermes' managed scope (`hermes_cli/managed_scope.py`): the `config.yaml` an administrator put in
    `$HERMES_MANAGED_DIR` or `/etc/hermes`, which Hermes deep-merges over every profile's own
    `config.yaml`, leaf by leaf (docs/design.md §4). `file` is that file; `sessions` and `plugins`
    are its two sections hermes-admin reads, as written (any YAML value: a section that is not a
    mapping is what Hermes would merge too). Plain values, never changed by a reader."""

    file: str
    sessions: object = None
    plugins: object = None

    def section(self, name: str):
        """The section as written, `None` when the file has none (Hermes' merge then keeps the user's)."""
        return {"sessions": self.sessions, "plugins": self.plugins}[name]

    def sets(self, section: str, key: str) -> bool:
        """Does the managed file pin `section.key` (a leaf Hermes takes from it over the user's)?"""
        value = self.section(section)
        return isinstance(value, dict) and key in value

"""Hermes' managed scope, found and read as Hermes finds and reads it (docs/design.md §4).

Hermes (`hermes_cli/managed_scope.py`, in every release hermes-admin knows: 0.19.0, 0.20.1,
0.22.2) takes `$HERMES_MANAGED_DIR` when it is set (not blank) and is a folder, else `/etc/hermes`
when that is a folder; a variable naming a folder that is not there means no managed scope at all
(it does not fall back to `/etc/hermes`). Its `config.yaml` is deep-merged over every profile's own
`config.yaml`, leaf by leaf; a file that is absent or empty changes nothing, and one that cannot be
read or parsed, or holds no mapping, is ignored with a loud warning (Hermes fails open). Its `.env`
sets environment variables (credentials), none of which hermes-admin reads.

The host reads it once per command (and per daemon run, so an edit is seen without a reload), from
its own inputs: as root, `$HERMES_MANAGED_DIR` is root's environment (the unit's `Environment=`, or
under `sudo -E` a user's: then refused by the rule below), never a user's, and the folder and its
`config.yaml` must be root's alone, as the admin config must (trust.not_roots_alone): a file a user
could write would otherwise decide what root deletes in every home. What it holds goes to each
worker in the job's context (protocol.Context.managed); the worker merges it (profile/hermes_config.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hermes_admin import yamlfile
from hermes_admin.layers import Managed
from hermes_admin.trust import not_roots_alone

DEFAULT_DIR = Path("/etc/hermes")  # Hermes' own default on POSIX (managed_scope._DEFAULT_MANAGED_DIR)
VARIABLE = "HERMES_MANAGED_DIR"  # Hermes' own override
SECTIONS = frozenset({"sessions", "plugins"})  # the sections of it hermes-admin reads


class Refused(Exception):
    """As root, a managed folder or file that is not root's alone: the message names the path."""


@dataclass(frozen=True)
class Scope:
    """What the host found: the managed scope (None: there is none, or its file is ignored), and
    the warning saying why a file there is ignored (malformed: Hermes ignores it too)."""

    managed: Managed | None = None
    warning: str | None = None


def folder(environ: dict | None = None) -> Path | None:
    """The managed folder, as Hermes' `get_managed_dir()` resolves it; None when there is none."""
    override = _override(environ)
    place = Path(override) if override else DEFAULT_DIR
    return place if place.is_dir() else None


def _override(environ: dict | None) -> str:
    return ((os.environ if environ is None else environ).get(VARIABLE) or "").strip()


def read(environ: dict | None = None) -> Scope:
    """The managed scope in force (Refused as root when its folder or file is not root's alone)."""
    place = folder(environ)
    if place is None:
        return Scope()
    path = place / "config.yaml"
    if not path.exists():  # (a link leading nowhere too: Hermes' stat fails, and it takes no scope)
        return Scope()
    for checked in (place, path):
        why = not_roots_alone(checked)
        if why:
            by = f" (named by ${VARIABLE}: under `sudo -E` or `su` it is a user's)" if _override(environ) else ""
            raise Refused(f"{checked}: Hermes' managed scope, refusing it as root: {why}{by}")
    try:
        data = yamlfile.load(path, SECTIONS)
    except OSError as exc:
        return Scope(warning=_ignored(f"{path}: cannot be read: {exc.strerror or exc}"))
    except yamlfile.YAMLRefused as exc:  # invalid YAML, or past the bounds every config is read within
        return Scope(warning=_ignored(str(exc)))
    if not isinstance(data, (dict, type(None))):
        return Scope(warning=_ignored(f"{path}: holds {type(data).__name__}, not a mapping"))
    if not data:
        return Scope()  # empty: nothing pinned, as in Hermes
    return Scope(Managed(str(path), data.get("sessions"), data.get("plugins")))


def _ignored(why: str) -> str:
    return (f"{why}: Hermes' managed scope ignored, as Hermes ignores it (it fails open): "
            "each profile's own config.yaml applies")

"""Find Hermes roots and the profiles inside them.

A root holds the `default` profile (the root folder itself) and one folder per
named profile under `profiles/`. Nothing here opens a store: discovery only
looks at directory entries, so it is safe on live installations.
"""

from __future__ import annotations

import os
import pwd
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Hermes' own rule for profile ids; `default` is the root and never a folder.
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
STORE_FILE = "state.db"


@dataclass(frozen=True)
class Profile:
    """One Hermes profile: its name, its home folder and the root it lives in."""

    root: Path
    name: str
    home: Path

    @property
    def store_path(self) -> Path:
        return self.home / STORE_FILE

    @property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    @property
    def config_path(self) -> Path:
        return self.home / "config.yaml"

    def has_store(self) -> bool:
        # os.stat only: never open the file outside SQLite.
        return self.store_path.is_file()

    def label(self) -> str:
        return f"{self.name} ({self.home})"


@dataclass(frozen=True)
class Skipped:
    """A folder that looks like it could be a profile but is not one."""

    path: Path
    reason: str


@dataclass
class Discovery:
    profiles: list[Profile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    missing_roots: list[Path] = field(default_factory=list)


def platform_default_root() -> Path:
    """Hermes' default home: `~/.hermes` (POSIX) or `%LOCALAPPDATA%\\hermes` (Windows)."""
    suffix = os.environ.get("HERMES_DATA_DIR_SUFFIX", "")
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA")
        local = Path(base) if base else Path.home() / "AppData" / "Local"
        return local / f"hermes{suffix}"
    return Path.home() / f".hermes{suffix}"


def root_of_home(home: Path) -> Path:
    """Map a profile home back to its root: `<root>/profiles/<name>` -> `<root>`."""
    home = Path(home).expanduser()
    if home.parent.name == "profiles" and home.name and not home.name.startswith("."):
        return home.parent.parent
    return home


def all_users_roots() -> list[Path]:
    """The default root of every local user that has one (from the password database)."""
    found = []
    for entry in pwd.getpwall():
        candidate = Path(entry.pw_dir) / ".hermes"
        if entry.pw_dir and candidate.is_dir():
            found.append(candidate)
    return found


def resolve_roots(
    explicit: tuple[str, ...] | list[str] = (),
    config_roots: list[str] | None = None,
    all_users: bool = False,
    environ: dict[str, str] | None = None,
) -> list[Path]:
    """Which roots a command works on, in order, without duplicates.

    `--root` wins; else the admin config's `roots:`; else `HERMES_HOME`
    (mapped back to its root); else the platform default. `--all-users` adds
    every local user's default root.
    """
    env = os.environ if environ is None else environ
    if explicit:
        roots = [Path(p).expanduser() for p in explicit]
    elif config_roots:
        roots = [Path(p).expanduser() for p in config_roots]
    elif env.get("HERMES_HOME", "").strip():
        roots = [root_of_home(Path(env["HERMES_HOME"].strip()))]
    else:
        roots = [platform_default_root()]
    if all_users:
        roots += all_users_roots()
    unique: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        key = root.resolve() if root.exists() else root.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(key)
    return unique


def discover_root(root: Path) -> Discovery:
    """The profiles of one root: `default` plus every valid, live `profiles/<name>`."""
    found = Discovery()
    if not root.is_dir():
        found.missing_roots.append(root)
        return found
    found.profiles.append(Profile(root=root, name="default", home=root))
    profiles_dir = root / "profiles"
    if not profiles_dir.is_dir():
        return found
    tombstones = profiles_dir / ".deleted"
    try:
        entries = sorted(profiles_dir.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        found.skipped.append(Skipped(profiles_dir, f"cannot list: {exc.strerror}"))
        return found
    for entry in entries:
        if not entry.is_dir():
            continue
        name = entry.name
        if name == ".deleted":
            found.skipped.append(Skipped(entry, "tombstones of deleted profiles, not a profile"))
        elif name.startswith("."):
            found.skipped.append(Skipped(entry, "hidden folder (staging or deleted profile)"))
        elif name == "default":
            found.skipped.append(Skipped(entry, "'default' is the root itself, not a folder"))
        elif not PROFILE_NAME.match(name):
            found.skipped.append(Skipped(entry, "not a valid profile name"))
        elif (tombstones / name).exists():
            found.skipped.append(Skipped(entry, "profile is marked deleted"))
        else:
            found.profiles.append(Profile(root=root, name=name, home=entry))
    return found


def discover(roots: list[Path], only: tuple[str, ...] | list[str] = ()) -> Discovery:
    """Profiles of every root; `only` restricts to those names (all roots)."""
    total = Discovery()
    for root in roots:
        part = discover_root(root)
        total.missing_roots += part.missing_roots
        total.skipped += part.skipped
        total.profiles += [p for p in part.profiles if not only or p.name in only]
    return total

"""Root decides from root's own inputs (docs/design.md §10).

Under `sudo -E` or `su` root's environment is a user's: `HOME`, the XDG folders, and any variable
naming where code is loaded from may point into her home. Root takes a file or folder named so
only if it is root's alone, by the one rule here (`not_roots_alone`), which the admin config's own
path keeps too: the path and every folder above it (and where its links lead) root's and
writable by nobody else. Root's own folders come from the password database, never from `HOME`.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

# Variables that say where code is loaded from: Hermes' bundled plugins, the CJK tokenizer library.
STEERING = ("HERMES_BUNDLED_PLUGINS", "HERMES_FTS5_CJK_SO")


def not_roots_alone(path, missing_ok: bool = False) -> str | None:
    """As root, why `path` is not root's alone (None when it is, and always without root): it, a
    folder above it, or what a link on the way leads to, belongs to another uid or may be written
    by others (a sticky folder above, as /tmp, is fine). A path that cannot be looked at is refused,
    unless `missing_ok`: then what does not exist yet is passed over, and the folders above it that
    do are held to the rule (the read or the making that follows says the rest)."""
    if os.geteuid() != 0:
        return None
    spelled = Path(os.path.abspath(path))
    for start in dict.fromkeys([spelled, Path(os.path.realpath(spelled))]):
        for place in [start, *start.parents]:
            try:
                st = os.stat(place)
            except FileNotFoundError as exc:
                if missing_ok:
                    continue
                return f"{place}: {exc.strerror}"
            except OSError as exc:
                return f"{place}: {exc.strerror}"
            if st.st_uid != 0 or (st.st_mode & 0o022 and not (place != start and st.st_mode & stat.S_ISVTX)):
                return (f"{place} is not root's alone (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})")
    return None


def steering_environment(environ: dict | None = None) -> list[str]:
    """As root, remove from `environ` (ours) each variable of STEERING whose path is not root's
    alone, so no code of ours, in this process or a child, loads from there; a warning for each."""
    env = os.environ if environ is None else environ
    warnings = []
    for name in STEERING:
        value = env.get(name)
        if not value:
            continue
        why = not_roots_alone(value)
        if why:
            env.pop(name, None)
            warnings.append(f"${name} ignored as root: {why} (under `sudo -E` or `su` it is a user's)")
    return warnings


def own_home() -> Path:
    """This account's home by the password database (never $HOME)."""
    return Path(pwd.getpwuid(os.geteuid()).pw_dir)


def home_folder() -> Path:
    """Where this account's defaults live (its `~`: the default root, caches, config dirs): root's
    own home by the password database, never $HOME (under `sudo -E` or `su` it is a user's);
    another account's as Python finds it."""
    return own_home() if os.geteuid() == 0 else Path.home()


def xdg_folder(variable: str, default: str, environ: dict | None = None) -> Path | None:
    """As root, the folder an XDG variable names ($XDG_CONFIG_HOME, the first of $XDG_CONFIG_DIRS)
    only if it is root's alone, else `default` under root's own home (an absolute `default` as it
    is); None without root: the caller asks platformdirs, as any program does."""
    if os.geteuid() != 0:
        return None
    env = os.environ if environ is None else environ
    value = (env.get(variable) or "").split(os.pathsep)[0].strip()
    if value and os.path.isabs(value) and not_roots_alone(value, missing_ok=True) is None:
        return Path(value)
    return own_home() / default


def expand_user(path: str) -> str:
    """`~` and `~/…` expanded to this account's home by the password database, `~NAME` to NAME's."""
    if path == "~" or path.startswith("~/"):
        return str(own_home()) + path[1:]
    return os.path.expanduser(path)

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
    unless `missing_ok` (the read that follows says what is wrong)."""
    if os.geteuid() != 0:
        return None
    spelled = Path(os.path.abspath(path))
    for start in dict.fromkeys([spelled, Path(os.path.realpath(spelled))]):
        for place in [start, *start.parents]:
            try:
                st = os.stat(place)
            except OSError as exc:
                return None if missing_ok else f"{place}: {exc.strerror}"
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


def expand_user(path: str) -> str:
    """`~` and `~/…` expanded to this account's home by the password database, `~NAME` to NAME's."""
    if path == "~" or path.startswith("~/"):
        return str(own_home()) + path[1:]
    return os.path.expanduser(path)

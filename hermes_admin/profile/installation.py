"""Which Hermes installation serves a profile: its interpreter, its version, its defaults and the
`sessions:` keys its release defines.

Plugins run in that interpreter (`hooks/bus.py`), and where a profile's
`config.yaml` leaves a setting unset, that installation's default applies. The
policy looks the installation up for every profile it is read for (once per root
and job), plugins enabled or not: the defaults of Hermes 0.22.2 are not those of
0.20.1, and a key the installed release defines is never "unknown".
Looked for in this order, and nothing taken on faith: a candidate counts only
once it has run, as the home's owner, and imported `hermes_cli`.

1. the admin config's `hermes_python:` (per profile, per root, global);
2. `<root>/hermes-agent/venv` (the official installer, for a user);
3. `/usr/local/lib/hermes-agent/venv` (the official installer, for root on Linux);
4. the `hermes` command on PATH, then in `~/.local/bin` (its shebang names the
   interpreter: pipx, `uv tool`, any venv);
5. `/opt/hermes/.venv` (the Docker image).

A probe costs a Python start and Hermes' config import (a few hundred ms), so
each interpreter is probed once per job (by the job's finder, `Installations`),
and a probe's answer is kept in the owner's cache folder as long as the files it
came from are unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from hermes_admin import child
from hermes_admin.layers import HermesPython, Managed, PolicyLayers
from hermes_admin.model import HERMES_SESSIONS_KEYS, Profile
from hermes_admin.plain_files import read_plain
from hermes_admin.profile import in_hermes
from hermes_admin.profile.policy import BUILTINS
from hermes_admin.trust import expand_user, own_home

PROBE_TIMEOUT_S = 20.0  # a cold start of Hermes' config on a slow disk; past it the candidate is refused
MAX_PROBE = 64 << 10  # a probe's answer is a few hundred bytes; past this it is refused
INSTALLER_VENV = Path("hermes-agent") / "venv"  # under a root: Hermes' installer's layout for a user
ROOT_INSTALL = Path("/usr/local/lib/hermes-agent/venv")  # Hermes' installer's layout for root on Linux
DOCKER_VENV = Path("/opt/hermes/.venv")  # Hermes' Docker image
MAX_KEYS = 200  # names of `sessions:` keys a probe may report (a release defines about 15)
# What a warning about a missing installation says to do.
HOW_TO_SET = ("set `hermes_python:` in the admin config (globally, per root or per profile) to the "
              "python of the venv Hermes is installed in, or to `hermes-admin` to run them here knowingly")


@dataclass(frozen=True)
class Installation:
    python: str  # the interpreter, as found (a venv's bin/python, not what it links to)
    found_by: str  # how: "hermes_python (FILE: …)", "<root>/hermes-agent/venv", "`hermes` on PATH", …
    hermes: str | None  # Hermes' version
    sessions: dict = field(default_factory=dict)  # DEFAULT_CONFIG["sessions"] (the keys policy uses)
    hook_callback_timeout: float | None = None  # DEFAULT_CONFIG["plugins"]["hook_callback_timeout"], if any
    # every key of DEFAULT_CONFIG["sessions"]: what this release reads there (None: it could not be read)
    sessions_keys: frozenset[str] | None = None
    sqlite: str | None = None  # the SQLite its interpreter links (`sqlite3.sqlite_version`), if told
    # whether its release reads Hermes' managed scope (`hermes_cli.managed_scope`: 0.19.0 and later)
    managed_scope: bool = True
    # Its plugin manager knows `on_session_delete` (Hermes fires it for its own deletions); None: not told.
    # Every release so far (0.19.0, 0.20.1, 0.22.2) says False.
    delete_hook: bool | None = None

    @property
    def label(self) -> str:
        return f"Hermes {self.hermes or '(version unknown)'} at {self.python}"

    def as_dict(self) -> dict:
        return {"python": self.python, "found_by": self.found_by, "hermes": self.hermes,
                "defaults": dict(self.sessions, **({"hook_callback_timeout": self.hook_callback_timeout}
                                                   if self.hook_callback_timeout is not None else {})),
                "sessions_keys": sorted(self.sessions_keys) if self.sessions_keys is not None else None,
                "sqlite": self.sqlite, "managed_scope": self.managed_scope, "delete_hook": self.delete_hook}


@dataclass(frozen=True)
class Lookup:
    installation: Installation | None
    notes: tuple[str, ...] = ()  # candidates refused (a configured one that fails), or that none was found
    own_by_choice: str | None = None  # where the admin config chose hermes-admin's own interpreter

    def as_dict(self) -> dict:
        return {"installation": self.installation.as_dict() if self.installation else None,
                "notes": list(self.notes), "own_interpreter_chosen_in": self.own_by_choice}


@dataclass(frozen=True, eq=False)
class Installations:
    """The finder of a job: which installation serves each of its profiles, by what the admin config
    says for their homes (`hermes_python`, and where it was set: layers.HermesPython). Made where the job starts
    (profile/environment.Environment.of) and passed to the policy, the engine and `plugins list`.

    Lookups and probes are remembered in the finder, so once per job: a daemon sees an installation
    upgraded or removed meanwhile (the disk cache keeps that cheap). `remember`: whether a probe's
    answer may be kept on disk (never in a dry run)."""

    configured: Mapping[str, HermesPython] = field(default_factory=dict)  # per home that has one
    remember: bool = False
    managed: Managed | None = None  # Hermes' managed scope, as the host read it (host/managed.py)
    _lookups: dict = field(default_factory=dict, init=False, repr=False)  # (root, setting, where) -> Lookup
    _probes: dict = field(default_factory=dict, init=False, repr=False)  # interpreter -> Installation or why refused

    @classmethod
    def of(cls, layers: Mapping[str, PolicyLayers], remember: bool, managed: Managed | None = None) -> "Installations":
        """From the job's policy layers (per home, the admin config's part) and Hermes' managed scope."""
        return cls({home: layer.hermes_python for home, layer in layers.items() if layer.hermes_python}, remember,
                   managed)

    def managed_for(self, profile: Profile) -> Managed | None:
        """The managed scope as the profile's Hermes reads it: none where there is none, or where the
        release installed has no managed scope. Every release hermes-admin knows has one, so where
        no installation is found (its built-in defaults are 0.19.0's) the scope applies too; the
        installation is looked up only when there is a scope to decide about."""
        if self.managed is None:
            return None
        found = self.for_profile(profile).installation
        return None if found is not None and not found.managed_scope else self.managed

    def for_profile(self, profile: Profile) -> Lookup:
        """The installation serving `profile` (found once per root and setting)."""
        chosen = self.configured.get(str(profile.home))
        configured = chosen.path if chosen is not None else None
        where = str(chosen.origin) if chosen is not None else "admin config"
        key = (str(profile.root), configured, where)
        if key not in self._lookups:
            self._lookups[key] = _find(profile.root, configured, where, self.remember, self._probes)
        return self._lookups[key]


def hook_timeout(config, lookup: Lookup) -> tuple[float, str]:
    """The profile's `plugins.hook_callback_timeout` (the managed scope's where it pins it), else its
    installation's default, else 30 s; and where the value came from."""
    if config.sets_hook_timeout:
        return config.hook_timeout, f"{config.origin_of('plugins', 'hook_callback_timeout')}: plugins"
    found = lookup.installation
    if found is not None and found.hook_callback_timeout is not None:
        return config.hook_timeout_or(found.hook_callback_timeout), f"defaults of {found.label}"
    return config.hook_timeout, "built-in"


def sessions_keys(lookup: Lookup) -> frozenset[str]:
    """The `sessions:` keys the installation's release defines (none known without one): a key of
    these in a profile's config.yaml is never "unknown" (hermes_config.load)."""
    found = lookup.installation
    return (found.sessions_keys or frozenset()) if found is not None else frozenset()


def defaults_layer(lookup: Lookup) -> tuple[dict, str] | None:
    """The installation's `sessions:` defaults as a policy layer (policy.effective), with its origin."""
    found = lookup.installation
    if found is None:
        return None
    return found.sessions, f"defaults of {found.label}"


OWN = "hermes-admin"  # `hermes_python: hermes-admin`: our own interpreter, knowingly (no search, no warning)


def _find(root: Path, configured, where: str, remember: bool, probes: dict) -> Lookup:
    if configured == OWN:  # e.g. a host that keeps copies of stores and no Hermes, with stdlib-only plugins
        return Lookup(None, (), where)
    notes = []
    for python, found_by in _candidates(root, configured, where, notes):
        answer = _probe(python, remember, probes)
        if isinstance(answer, Installation):
            return Lookup(replace(answer, python=python, found_by=found_by), tuple(notes))
        if found_by.startswith("hermes_python") or os.path.exists(python):
            notes.append(f"{python} ({found_by}): not a usable Hermes: {answer}")
    notes.append(f"no Hermes installation found for {root}; plugins run in hermes-admin's own interpreter "
                 f"and Hermes' built-in defaults apply: {HOW_TO_SET}")
    return Lookup(None, tuple(notes))


def _candidates(root: Path, configured, where: str, notes: list[str]):
    if configured is not None:
        if isinstance(configured, str) and configured and "\0" not in configured:
            yield expand_user(configured), f"hermes_python ({where})"
        else:
            notes.append(f"{where}: hermes_python must be the path of a python, not {str(configured)[:60]!r}")
    yield str(Path(root) / INSTALLER_VENV / "bin" / "python"), "<root>/hermes-agent/venv (installer, user)"
    yield str(ROOT_INSTALL / "bin" / "python"), "/usr/local/lib/hermes-agent/venv (installer, root)"
    seen = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep) + [str(own_home() / ".local" / "bin")]:
        command = os.path.join(folder, "hermes") if folder else ""
        if not command or command in seen or not os.path.isfile(command):
            continue
        seen.add(command)
        python = shebang_python(command)
        if python:
            yield python, f"the `hermes` command {command} (its shebang)"
    yield str(DOCKER_VENV / "bin" / "python"), "/opt/hermes/.venv (Docker image)"


def shebang_python(script: str) -> str | None:
    """The interpreter a console script runs: `#!/path/python`, or the `'''exec' /path/python`
    line pip writes under `#!/bin/sh` when the path is too long for a shebang."""
    try:  # a command in a home may be anything: a FIFO there is never waited on
        head = read_plain(script, 4096, follow=True, head=True)
    except OSError:
        return None
    lines = head.split(b"\n")
    if not lines[0].startswith(b"#!"):
        return None
    first = lines[0][2:].strip().decode("utf-8", "replace")
    if first in ("/bin/sh", "/usr/bin/sh") and len(lines) > 1 and lines[1].startswith(b"'''exec' "):
        parts = lines[1].decode("utf-8", "replace").split()
        return parts[1].strip("'\"") if len(parts) > 1 else None
    words = first.split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env":  # `#!/usr/bin/env python3`: whichever is on PATH
        return shutil.which(words[-1]) if len(words) > 1 else None
    return words[0]


# -- the probe --------------------------------------------------------------------

def _probe(python: str, remember: bool, probes: dict) -> Installation | str:
    """What `python` answers, asked once per finder (`probes`: its answers so far)."""
    if python in probes:
        return probes[python]
    refused = runnable(python)
    if refused:
        probes[python] = refused
        return refused
    cached = _cache_read(python)
    if cached is not None:
        probes[python] = cached[0]
        return cached[0]
    try:
        # A scratch home of its own: importing Hermes 0.22.2's modules makes `$HERMES_HOME` (else
        # `~/.hermes`) with its folders and files, and the probe must leave no trace in a home.
        with tempfile.TemporaryDirectory(prefix="hermes-admin-probe-") as scratch:
            done = child.run_bounded(in_hermes.command(python, "probe", *HERMES_SESSIONS_KEYS), PROBE_TIMEOUT_S,
                                     MAX_PROBE, env=child.own_environment(HERMES_HOME=scratch, HOME=scratch), cwd="/")
    except subprocess.TimeoutExpired:
        answer: Installation | str = f"did not answer within {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:
        answer = f"cannot run it ({exc.strerror or exc})"
    else:
        answer, watch = _read_probe(done)
        if isinstance(answer, Installation) and remember:
            _cache_write(python, answer, watch)
    probes[python] = answer
    return answer


def _read_probe(done: subprocess.CompletedProcess) -> tuple[Installation | str, list[str]]:
    """What the probe said, checked: it ran code of that interpreter's, so nothing is trusted."""
    if len(done.stdout) > MAX_PROBE:
        return "its answer is too long", []
    try:
        data = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError):
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return f"no answer ({tail[0][:300]})", []
    if not isinstance(data, dict):
        return "an answer that is not an object", []
    if "error" in data:
        return f"cannot import hermes_cli ({str(data['error'])[:300]})", []
    version = data.get("hermes")
    sessions = data.get("sessions") if isinstance(data.get("sessions"), dict) else {}
    sessions = {k: v for k, v in sessions.items() if k in HERMES_SESSIONS_KEYS and _plain_value(k, v)}
    timeout = data.get("hook_callback_timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < 1e9:
        timeout = None
    watch = data.get("watch") if isinstance(data.get("watch"), list) else []
    installation = Installation("", "", str(version)[:64] if isinstance(version, str) else None,
                                sessions, float(timeout) if timeout is not None else None,
                                _key_names(data.get("sessions_keys")), _version(data.get("sqlite")),
                                data.get("managed_scope") is not False, _flag(data.get("delete_hook")))
    return installation, [w for w in watch[:10] if isinstance(w, str)]


def _flag(value) -> bool | None:
    """A yes or no a probe or the cache tells: true or false, else unknown."""
    return value if isinstance(value, bool) else None


def _version(value) -> str | None:
    """A library version as a probe or the cache tells it: digits and dots, short, or nothing."""
    if isinstance(value, str) and 0 < len(value) <= 20 and all(p.isdigit() for p in value.split(".")):
        return value
    return None


def _key_names(value) -> frozenset[str] | None:
    """The names of a release's `sessions:` keys, as a probe or the cache reports them: a bounded
    list of short printable names, or nothing (a key that fails makes the whole list unknown)."""
    if not isinstance(value, list) or len(value) > MAX_KEYS:
        return None
    if not all(isinstance(k, str) and 0 < len(k) <= 64 and k.isprintable() for k in value):
        return None
    return frozenset(value)


def _plain_value(key: str, value) -> bool:
    """A default policy may take from an installation: of the kind of the key's built-in value, true or
    false, or a number; never a mapping (`source_retention_days`: no release ships one)."""
    builtin = BUILTINS.get(key)
    if isinstance(builtin, bool):
        return isinstance(value, bool)
    if isinstance(builtin, (int, float)):
        return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < 1e9
    return False


def runnable(python: str) -> str | None:
    """Why we must not run `python` (None: we may). Every folder on its way, and what its links
    lead to, must be writable by its owner alone (a shared install is fine, one anybody could
    change is not) and belong to root or to us: root runs nothing a user could have placed, and a
    user's worker nothing of another user's, even one she may read."""
    if not os.path.isabs(python):
        return "not an absolute path"
    me = os.geteuid()
    paths = [Path(python), Path(os.path.realpath(python))]
    for path in paths:
        for place in [path, *path.parents]:
            try:
                st = os.lstat(place)
            except OSError as exc:
                return f"{place}: {exc.strerror}"
            if st.st_uid not in (0, me):
                return (f"{place} belongs to uid {st.st_uid}: root runs nothing of a user's" if me == 0 else
                        f"{place} belongs to uid {st.st_uid}: a user's plugins run in her own or root's "
                        "interpreter only")
            if stat.S_ISLNK(st.st_mode):
                continue  # what it leads to is checked with the resolved path
            if st.st_mode & 0o022 and not (place != path and st.st_mode & stat.S_ISVTX):
                return f"{place} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(python, os.X_OK):
        return "not executable"
    return None


# -- the cache: a probe's answer, for as long as what it read is unchanged -------------

CACHE_BYTES = 1 << 20  # a cache of a few interpreters is a few kB


def _cache_path() -> Path:
    """Our cache folder's file. Root's is in root's own home by the password database, never where
    $HOME or $XDG_CACHE_HOME say (under `sudo -E` or `su` they are a user's)."""
    if os.geteuid() == 0:
        return own_home() / ".cache" / "hermes-admin" / "hermes-installations.json"
    import platformdirs

    return Path(platformdirs.user_cache_dir("hermes-admin")) / "hermes-installations.json"


def _own_folder(folder: Path) -> bool:
    """A real folder (not a link) of ours that nobody else may write: where the cache may be."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _signature(paths: list[str]) -> list | None:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append([path, st.st_ino, st.st_size, st.st_mtime_ns])
    return out


def _cache_load() -> dict:
    """The cache, if it is a plain file of ours in a folder of ours: opened without following a
    link and without waiting (a FIFO there blocks nothing), its type checked on the descriptor."""
    path = _cache_path()
    if not _own_folder(path.parent):
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > CACHE_BYTES:
            return {}
        data = json.loads(os.read(fd, CACHE_BYTES + 1).decode("utf-8", "replace"))
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else {}


def _cache_read(python: str) -> tuple[Installation] | None:
    """A cached probe's answer, checked as a probe's is; an entry of any other shape is ignored
    (probed again), never trusted to change a default."""
    entry = _cache_load().get(python)
    if not isinstance(entry, dict) or not isinstance(entry.get("watch"), list) or len(entry["watch"]) > 11:
        return None
    if not all(isinstance(w, list) and len(w) == 4 and isinstance(w[0], str) for w in entry["watch"]):
        return None
    watch = [w[0] for w in entry["watch"]]
    if not watch or watch[0] != python or _signature(watch) != entry["watch"]:
        return None
    probe = entry.get("probe")
    if not isinstance(probe, dict) or "sessions_keys" not in probe or not isinstance(probe.get("managed_scope"), bool) \
            or "delete_hook" not in probe:
        return None  # older caches: probed again
    sessions = probe.get("sessions")
    if not isinstance(sessions, dict) or not all(k in HERMES_SESSIONS_KEYS and _plain_value(k, v)
                                                 for k, v in sessions.items()):
        return None
    timeout = probe.get("hook_callback_timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 <= timeout < 1e9):
        return None
    version = probe.get("hermes")
    if version is not None and not (isinstance(version, str) and len(version) <= 64):
        return None
    keys = probe["sessions_keys"]
    if keys is not None and _key_names(keys) is None:
        return None
    return (Installation("", "", version, dict(sessions), float(timeout) if timeout is not None else None,
                         _key_names(keys), _version(probe.get("sqlite")), probe["managed_scope"],
                         _flag(probe.get("delete_hook"))),)


def _cache_write(python: str, answer: Installation, watch: list[str]) -> None:
    signature = _signature([python, *watch])
    if signature is None:
        return
    data = _cache_load()
    keys = sorted(answer.sessions_keys) if answer.sessions_keys is not None else None
    data[python] = {"watch": signature, "probe": {"hermes": answer.hermes, "sessions": answer.sessions,
                                                   "hook_callback_timeout": answer.hook_callback_timeout,
                                                   "sessions_keys": keys, "sqlite": answer.sqlite,
                                                   "managed_scope": answer.managed_scope,
                                                   "delete_hook": answer.delete_hook}}
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _own_folder(path.parent):
            return  # a link, or a folder others may write: no cache rather than a write through it
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(temporary, path)  # replaces a link at `path` itself, never what it leads to
    except OSError:
        pass  # a cache: the next run probes again

"""`plugins list` for one profile: what its Hermes sees, and which of those it would load.

With an installation, Hermes' own discovery answers, in its interpreter, as
the home's owner, importing no plugin (`in_hermes.py`'s `list` mode); its answer is
read as untrusted: bounded, every field checked. Without one, our own reading
of the manifests (`discovery.py`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field

from hermes_admin import child
from hermes_admin.decode import decode
from hermes_admin.model import Profile
from hermes_admin.profile import installation
from hermes_admin.profile import in_hermes
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.hermes_config import HermesConfig
from hermes_admin.profile.hooks.bus import hermes_environment
from hermes_admin.profile.hooks.discovery import discover

LIST_TIMEOUT_S = 30.0  # Hermes' discovery imports no plugin: a cold start at most
MAX_ANSWER = 4 << 20  # far above any real listing; past it the answer is refused
MAX_PLUGINS = 2000  # far above any real installation; past it the answer is refused


def plugins_of(profile: Profile, config: HermesConfig, env: Environment) -> tuple[list[dict], list[str], installation.Lookup]:
    """(rows, problems, the installation looked up) for one profile, in the job's `env`."""
    lookup = env.installations.for_profile(profile)
    found = lookup.installation
    if found is None:
        rows = [dict(p.as_dict(), loads=p.enabled, kind="standalone")
                for p in discover(profile.home, config, env.hermes)]
        return rows, not_found(config, rows), lookup
    try:
        done = child.run_bounded(
            in_hermes.command(found.python, "list"), LIST_TIMEOUT_S, MAX_ANSWER,
            input=json.dumps({"home": str(profile.home), "profile": profile.name}).encode() + b"\n",
            env=child.own_environment(HERMES_HOME=str(profile.home), **hermes_environment(env.hermes)), cwd=str(profile.home))
    except subprocess.TimeoutExpired:
        return [], [f"Hermes' plugin discovery in {found.python} did not answer within {LIST_TIMEOUT_S:g} s"], lookup
    except OSError as exc:
        return [], [f"cannot run {found.python}: {exc.strerror or exc}"], lookup
    rows, problems = read_answer(done.stdout)
    return rows, problems + ([] if problems else not_found(config, rows)), lookup


def not_found(config: HermesConfig, rows: list[dict]) -> list[str]:
    """Each name in `plugins.enabled` that no plugin the profile's Hermes sees answers to (by key
    or manifest name): a typo enables nothing, and nothing else would say so."""
    from hermes_admin.shown import did_you_mean

    known = {r["key"] for r in rows} | {r["name"] for r in rows}
    return [f"{config.path}: plugins.enabled names {name[:80]!r}, which no plugin of this profile is"
            f"{did_you_mean(name, known)}; nothing is enabled by it"
            for name in config.plugins_enabled if name not in known]


@dataclass(frozen=True)
class Plugin:
    """A plugin as Hermes' discovery answers for it (in_hermes.list_with_hermes), each field bounded."""

    key: str = field(metadata={"max_len": 300})
    name: str = field(metadata={"max_len": 300})
    source: str = field(metadata={"max_len": 32})
    kind: str = field(metadata={"max_len": 32})
    location: str = field(metadata={"max_len": 4096})
    enabled: bool
    loads: bool
    why: str = field(metadata={"max_len": 1000})
    hooks: tuple[str, ...] = field(metadata={"max_len": 100, "keep_items": 100})


@dataclass(frozen=True)
class Answer:
    """The whole answer: far more plugins than any installation has is refused; past the first
    errors, the rest are dropped."""

    plugins: tuple[Plugin, ...] = field(metadata={"max_items": MAX_PLUGINS})
    errors: tuple[str, ...] = field(metadata={"max_len": 2000, "keep_items": 100})


def read_answer(raw: bytes) -> tuple[list[dict], list[str]]:
    if len(raw) > MAX_ANSWER:
        return [], [f"Hermes' plugin discovery answered over {MAX_ANSWER >> 20} MiB"]
    try:
        answer = decode(Answer, json.loads(raw.decode("utf-8", "replace").strip().splitlines()[-1]))
    except (ValueError, IndexError, RecursionError):
        answer = None
    if not isinstance(answer, Answer):
        return [], ["Hermes' plugin discovery gave no usable answer"]
    return [dict(asdict(p), hooks=list(p.hooks), error=None) for p in answer.plugins], list(answer.errors)

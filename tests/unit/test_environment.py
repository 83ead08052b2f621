"""Issue #39: a job's context is one frozen value made where the job starts and passed down; no
module of the worker's side keeps any of it between jobs (an in-process worker serves many, the
daemon's follow one another in one process)."""

from __future__ import annotations

import re
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import hermes_admin
from hermes_admin.layers import HermesPython, Layer, Origin, PolicyLayers
from hermes_admin.model import Owner
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.installation import Installations
from hermes_admin.protocol import Context, Job, Status

PACKAGE = Path(hermes_admin.__file__).parent


def test_a_job_s_environment_is_made_from_its_context_and_layers():
    context = Context(verbose=2, lock_wait=4.5, safe_mode="1", bundled_plugins="/nix/plugins")
    python = HermesPython("/v/bin/python", Origin("a.yaml", "hermes_python"))
    layers = {"/r": PolicyLayers(defaults=Layer({"retention_days": 30}, Origin("a.yaml", "defaults")),
                                 hermes_python=python), "/s": PolicyLayers()}
    env = Environment.of(context, layers, remember=True)
    assert (env.verbose, env.lock_wait) == (2, 4.5)
    assert env.hermes == {"HERMES_SAFE_MODE": "1", "HERMES_BUNDLED_PLUGINS": "/nix/plugins"}
    assert env.installations.remember is True
    assert env.installations.configured == {"/r": python}
    bare = Environment.of(Context())
    assert (bare.verbose, bare.lock_wait, bare.hermes, bare.installations.configured) == (0, None, {}, {})
    with pytest.raises(FrozenInstanceError):
        env.lock_wait = 1  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        env.installations.remember = False  # type: ignore[misc]


def test_a_job_is_not_changed_once_the_host_made_it():
    job = Job(Status(), Owner(1000, 1000, (1000,), "ann", "/home/ann"), [], {}, Context())
    for name, value in (("layers", {}), ("profiles", []), ("context", Context(verbose=1))):
        with pytest.raises(FrozenInstanceError):
            setattr(job, name, value)


def test_two_jobs_share_no_finder():
    assert Environment().installations is not Environment().installations
    assert Installations.of({}, False)._lookups is not Installations.of({}, False)._lookups


# What may stay a module global, and why: none of these is a job's context.
PROCESS_WIDE = {
    ("profile/store/guards.py", "_OWN_PIDNS"): "this process's pid namespace: the same for every job",
    ("stopping.py", "_requested"): "a signal's request to stop: the process's, set by its handler",
    ("stopping.py", "_at"): "when that request came",
    ("report.py", "_gathering"): "the CLI's --json document: one per command, in the CLI's process",
    ("report.py", "json_written"): "whether that document went out",
}


def test_no_module_global_is_set_per_job():
    """`global` only where PROCESS_WIDE says why; no `os.environ[...] =` but in_hermes.py's
    (a process of its own, whose Hermes reads HERMES_HOME)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        source = path.read_text()
        for names in re.findall(r"^\s+global ([\w, ]+)$", source, re.M):
            for declared in names.replace(" ", "").split(","):
                assert (name, declared) in PROCESS_WIDE, f"{name}: global {declared}"
        if re.search(r"os\.environ\[[^\]]+\]\s*=", source):
            assert name == "profile/in_hermes.py", f"{name} writes os.environ"

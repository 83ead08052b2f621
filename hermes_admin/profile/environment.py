"""What a job's work needs besides its profiles and parameters, as one frozen value.

Made once where the job starts (jobs.serve, from the job's context and policy layers) and passed
down to what needs it: every store opened, the engine, the plugin bus, the installation lookups.
Never kept in a module: an in-process worker serves many jobs, and the daemon's jobs follow one
another in one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from hermes_admin.layers import PolicyLayers
from hermes_admin.profile.installation import Installations


@dataclass(frozen=True)
class Environment:
    verbose: int = 0  # -v: tracebacks and per-unit detail; the plugin process is told too
    lock_wait: float | None = None  # --lock-wait, seconds: over the policy's `lock_wait` (None: the policy's)
    # which Hermes installation serves each profile, by the admin config's `hermes_python` (installation.py)
    installations: Installations = field(default_factory=Installations)
    # what of the invoker's environment Hermes' plugin discovery reads (HERMES_SAFE_MODE,
    # HERMES_BUNDLED_PLUGINS, and HERMES_MANAGED_DIR for its config): a worker's own environment is
    # clean, so they come with the job
    hermes: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, context, layers: Mapping[str, PolicyLayers] | None = None, remember: bool = False) -> "Environment":
        """From a job's context (protocol.Context: what the command line and the invoker's environment
        said) and policy layers (per home, the admin config's part). `remember`: a probe's answer may
        be kept on disk (never in a dry run)."""
        wait = context.lock_wait
        given = isinstance(wait, (int, float)) and not isinstance(wait, bool)
        hermes = {k: v for k, v in (("HERMES_SAFE_MODE", context.safe_mode),
                                    ("HERMES_BUNDLED_PLUGINS", context.bundled_plugins),
                                    ("HERMES_MANAGED_DIR", context.managed_dir)) if v}
        return cls(verbose=int(context.verbose or 0), lock_wait=max(0.0, float(wait)) if given else None,
                   installations=Installations.of(layers or {}, remember, context.managed), hermes=hermes)

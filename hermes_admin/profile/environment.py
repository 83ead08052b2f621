"""What a job's work needs besides its profiles and parameters, as one frozen value.

Made once where the job starts (jobs.serve, from the job's context) and passed down to what
needs it: the engine, the plugin bus. Never kept in a module: an in-process worker serves many
jobs, and the daemon's jobs follow one another in one process.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Environment:
    verbose: int = 0  # -v: tracebacks and per-unit detail; the plugin worker is told too
    lock_wait: float | None = None  # --lock-wait, seconds: over the policy's `lock_wait` (None: the policy's)

    @classmethod
    def of(cls, context) -> "Environment":
        """From a job's context (protocol.Context): what the command line said."""
        wait = context.lock_wait
        given = isinstance(wait, (int, float)) and not isinstance(wait, bool)
        return cls(verbose=int(context.verbose or 0), lock_wait=max(0.0, float(wait)) if given else None)

"""Running one piece of work per profile, collecting what happened for the report and exit code."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Callable, Iterable

import peewee

from hermes_admin import exitcodes
from hermes_admin.profile.engine.engine import Engine, Result
from hermes_admin.profile.hermes_config import HermesConfigError
from hermes_admin.host.discovery import Profile
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.engine.locks import LockHeld
from hermes_admin.profile.store import StoreError


@dataclass
class Run:
    dry_run: bool
    results: list[Result] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a profile could not be processed
    locked: list[str] = field(default_factory=list)  # another run (ours or Hermes') holds it
    warnings: list[str] = field(default_factory=list)
    policies: dict = field(default_factory=dict)  # profile name -> Policy, for reports

    def exit_code(self) -> int:
        if self.errors:
            return exitcodes.PROFILE_FAILED
        if self.locked:
            return exitcodes.LOCKED
        if self.warnings or any(r.skipped or r.hook_failures or r.files_skipped for r in self.results):
            return exitcodes.WARNINGS
        return exitcodes.OK

    def as_dict(self) -> dict:
        return {
            "dry_run": self.dry_run, "results": [r.as_dict() for r in self.results],
            "errors": self.errors, "locked": self.locked, "warnings": self.warnings,
            "policies": {name: policy.as_dict() for name, policy in self.policies.items()},
            "longest_write_ms": round(max((r.longest_write_ms for r in self.results), default=0.0), 2),
        }


def act_in_parts(engine: Engine, result: Result, parts: Iterable[list[Unit]],
                 act: Callable[[list[Unit]], Result]) -> Result:
    """`act` (one engine call) on each part's units, folded into `result`. The files and events of
    every part are settled once, at the end; after an error too, for what did commit."""
    try:
        for units in parts:
            result.absorb(act(units))
    finally:
        engine.settle(result)
    return result


def with_engine(run: Run, profile: Profile, work: Callable[[Engine], list[Result]]) -> None:
    """Open the profile's engine, do `work`, record results; one profile's failure never stops the others."""
    try:
        with Engine(profile, dry_run=run.dry_run) as engine:
            run.warnings += engine.replayed
            if engine.config is not None:
                run.warnings += engine.config.warnings
            run.results += work(engine)
    except LockHeld as exc:
        run.locked.append(f"profile '{profile.name}': skipped: {exc}")
    except StoreError as exc:
        run.errors.append(str(exc))
    except HermesConfigError as exc:
        run.errors.append(f"profile '{profile.name}': {exc}")
    except (peewee.DatabaseError, sqlite3.Error) as exc:
        # The transaction rolled back: nothing of it was deleted, and its events never fire.
        run.errors.append(f"profile '{profile.name}': {profile.store_path}: {' '.join(str(exc).split())}")

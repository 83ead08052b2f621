"""Running one piece of work per profile, collecting what happened for the report and exit code."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Callable, Iterable

import peewee

from hermes_admin import exitcodes
from hermes_admin.profile.engine.engine import Engine
from hermes_admin.results import Result, Run
from hermes_admin.profile.hermes_config import HermesConfigError
from hermes_admin.protocol import Profile
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.engine.locks import LockHeld
from hermes_admin.profile.store import StoreError


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
            run.warnings += engine.replayed + [f"profile '{profile.name}': {note}" for note in engine.notes]
            if engine.config is not None:
                run.warnings += engine.config.warnings
            results = work(engine)
            for result in results:
                result.home = str(profile.home)
            run.results += results
    except LockHeld as exc:
        run.locked.append(f"profile '{profile.name}': skipped: {exc}")
    except StoreError as exc:
        run.errors.append(str(exc))
    except HermesConfigError as exc:
        run.errors.append(f"profile '{profile.name}': {exc}")
    except (peewee.DatabaseError, sqlite3.Error) as exc:
        # The transaction rolled back: nothing of it was deleted, and its events never fire.
        run.errors.append(f"profile '{profile.name}': {profile.store_path}: {' '.join(str(exc).split())}")
    except OSError as exc:  # a folder or file of ours that is unusable: this profile only
        where = exc.filename or profile.home
        run.errors.append(f"profile '{profile.name}': {where}: {exc.strerror or exc}")

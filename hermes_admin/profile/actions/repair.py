"""`repair`: inspect every selected profile, and with `apply` fix what can be fixed."""

from __future__ import annotations

import time



from hermes_admin.model import Profile
from hermes_admin.problems import ERROR, LOCKED, WARNING, about
from hermes_admin.profile import repair as profile_repair
from hermes_admin.profile.actions.common import engine_notes
from hermes_admin.profile.state_folder import LockHeld
from hermes_admin.profile.exports import Settings
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.store import StoreError
from hermes_admin.profile.store.damage import DAMAGED_STORE as DAMAGED
from hermes_admin.profile.store.errors import SQLITE_ERRORS
from hermes_admin.results import RepairRun


def repair(run: RepairRun, profile: Profile, env: Environment, siblings: dict[str, Profile], apply: bool,
           check_fts: bool, move_legacy_main: bool = False, exports: Settings | None = None) -> None:
    """`env`: the job's. `siblings`: every profile of the same root, by name (where wrong-store rows move to).
    `move_legacy_main`: `--move-legacy-main` (rows keyed to the default profile found in a named
    one move there; else they are reported as ambiguous). `exports`: where the profile's exports are (the
    restore command of a session a damaged store lost names the one that holds it)."""
    findings = profile_repair.inspect(profile, siblings, check_fts=check_fts, move_legacy_main=move_legacy_main,
                                      lock_wait_s=env.lock_wait, exports=exports)
    for finding in findings:
        finding.home = str(profile.home)
    run.findings += findings
    if not any(f.kind in ("unusable_store", DAMAGED) for f in findings) and profile.has_store():
        from hermes_admin.profile import integrity

        if integrity.damage_known(profile):  # the store reads whole now (repaired, or restored by hand)
            integrity.passed(profile, time.time(), integrity.identity(profile))
    for finding in findings:
        if finding.kind == "unusable_store" or (finding.kind == DAMAGED and not (apply and finding.fix != "none")):
            run.add(about(profile, ERROR, DAMAGED if finding.kind == DAMAGED else finding.kind,
                          f"{finding.detail} (left untouched)", path=finding.subject))
    if not apply or not any(f.fix != "none" for f in findings):
        return
    try:
        result, set_aside = profile_repair.apply(profile, [f for f in findings if f.fix != "none"], siblings, env,
                                                     exports=exports)
        result.home = str(profile.home)
        run.results.append(result)
        run.add(*engine_notes(profile, set_aside))
    except LockHeld as exc:
        run.add(about(profile, LOCKED, "lock_held", str(exc), skipped=True))
    except (StoreError, *SQLITE_ERRORS) as exc:
        run.add(about(profile, ERROR, "store", " ".join(str(exc).split())))
    for finding in findings:
        if finding.error:
            run.add(about(profile, WARNING, finding.kind, f"{finding.kind} {finding.subject}: not fixed: {finding.error}"))

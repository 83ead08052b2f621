"""`restore FILE` and `exports list`: what the engine exported before deleting, put back or shown."""

from __future__ import annotations

from pathlib import Path

from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile
from hermes_admin.problems import ERROR, WARNING, about
from hermes_admin.profile.actions.common import Ledger, Run, export_settings, with_engine
from hermes_admin.profile import exports
from hermes_admin.profile.engine import Engine, fold, noticed_sessions
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.installation import Installations
from hermes_admin.results import Action, Result


def restore(run: Run, profile: Profile, env: Environment, path: str, sessions: list[str] | None,
            pin: bool = False, other_profile: bool = False) -> None:
    """Units of an export back into this profile's store; a session id that exists is left alone.
    What a failure cut short is reported with what it had put back (the ledger's result)."""
    ledger = Ledger()

    def work(engine: Engine) -> list[Result]:
        with ledger.begun(Result(profile.name, Action.RESTORE, None, engine.dry_run)) as result:
            _, made_in = fold(result, lambda: engine.restore(Path(path), set(sessions) if sessions else None,
                                                             pin=pin, other_profile=other_profile))
        if made_in is not None:  # as asked, and worth a word (exit 1): another profile's conversations are here now
            run.add(about(profile, WARNING, "other_profile", f"an export made in the profile at {made_in}: "
                          f"{'would be restored' if engine.dry_run else 'restored'} into this one as asked "
                          "(--other-profile)", path=path))
        return ledger.results

    with_engine(run, profile, env, work, ledger=ledger)


def listing(run: Run, profile: Profile, layers: PolicyLayers, installations: Installations,
            export_dir: str | None, held: bool = False) -> None:
    """This profile's exports: file, when, how many units, sessions and messages; or, `held`, every
    unit they hold with its ids (`held` rows: the host finds a session among them)."""
    settings = export_settings(profile, layers, installations, export_dir)
    try:
        if held:
            run.data.setdefault("held", []).extend(exports.held_units(profile, settings))
            # and the sessions found deleted outside hermes-admin (engine/noticed.py): no export holds those
            run.data.setdefault("noticed", []).extend(noticed_sessions(profile))
            return
        found = exports.listing(profile, settings)
    except exports.ExportError as exc:
        run.add(about(profile, ERROR, "exports", str(exc)))
        return
    for item in found:
        if "problem" in item:
            run.add(about(profile, WARNING, "export_file", item["problem"]))
        else:
            run.data.setdefault("exports", []).append(item)


def remove(run: Run, profile: Profile, layers: PolicyLayers, installations: Installations,
           export_dir: str | None, files: list[str], dry_run: bool) -> None:
    """`exports prune`: remove the exports the host chose, each with its manifest; only files this
    profile's own listing holds (a name from elsewhere is never removed)."""
    try:
        settings = export_settings(profile, layers, installations, export_dir)
        found = {item["file"]: item for item in exports.listing(profile, settings) if "problem" not in item}
    except exports.ExportError as exc:
        run.add(about(profile, ERROR, "exports", str(exc)))
        return
    for name in files:
        item = found.get(name)
        if item is None:
            run.add(about(profile, WARNING, "not_an_export", "not one of its exports; left alone", path=name))
            continue
        failed = [] if dry_run else exports.remove_export(name)
        run.add(*(about(profile, ERROR, "os", problem) for problem in failed))
        if not failed:
            run.data.setdefault("removed", []).append(dict(item, dry_run=dry_run))

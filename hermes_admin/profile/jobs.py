"""The kinds of work a worker does, each over the profiles of its one owner.

A job names its kind and carries plain parameters (protocol.Job); the answer is
always a Run: results, errors, warnings, and for list-type jobs its rows in
`run.data`. The host merges the answers of every owner and renders them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from hermes_admin.protocol import Job, Profile
from hermes_admin.results import RepairRun, Run


class HomeChanged(Exception):
    """The home is not the owner's any more (swapped since the host looked at it)."""


def _enter(profile: Profile, isolated: bool) -> None:
    """In a worker of its own: the home as the current folder, and still the owner's."""
    if not isolated:
        return
    os.chdir(profile.home)
    if os.stat(".").st_uid != os.geteuid():
        raise HomeChanged(f"profile '{profile.shown}': {profile.home}: not owned by this worker's user any more; "
                          "left alone")


def _each(job: Job, run: Run, isolated: bool, work: Callable[[Profile], None]) -> None:
    """`work` on every profile of the job; a home that changed hands is an error, the others go on."""
    from hermes_admin import stopping

    for n, profile in enumerate(job.profiles):
        if stopping.requested():
            left = [p.shown for p in job.profiles[n:]]
            run.warnings.append("stopped on request: " + ", ".join(left[:20])
                                + (f" and {len(left) - 20} more" if len(left) > 20 else "") + " not worked on")
            break
        try:
            _enter(profile, isolated)
        except HomeChanged as exc:
            run.errors.append(str(exc))
            continue
        except OSError as exc:
            run.errors.append(f"profile '{profile.shown}': {profile.home}: {exc.strerror}")
            continue
        try:
            work(profile)
        except KeyboardInterrupt:
            raise
        except OSError as exc:  # disk full, read-only, an I/O error: this profile's fault, named
            where = exc.filename or profile.home
            run.errors.append(f"profile '{profile.shown}': {where}: {exc.strerror or exc}")
        except Exception as exc:  # a bug of ours: this profile ends, the others go on (exit 70)
            import traceback

            from hermes_admin import report
            run.internal = True
            run.errors.append(f"profile '{profile.shown}': internal error: {type(exc).__name__}: {exc}"
                              + ("" if report.VERBOSE else " (run with -v for the traceback)"))
            if report.VERBOSE:
                traceback.print_exc()


def _request(params: dict):
    from hermes_admin.profile.actions.maintenance import Request
    from hermes_admin.filters import Filters

    fields = dict(params["request"])
    fields["tasks"] = tuple(fields["tasks"])
    fields["filters"] = Filters(**fields.get("filters") or {})
    return Request(**fields)


def _siblings_by_root(job: Job) -> dict[Path, dict[str, Profile]]:
    """Per root, its profiles of this owner (the host lists them): where a wrong-store row may move
    (design §6). Built once per job, not once per profile."""
    return {Path(root): {name: Profile(Path(root), name, Path(home)) for name, home in listed}
            for root, listed in job.params.get("siblings", {}).items()}


def _siblings(by_root: dict[Path, dict[str, Profile]], profile: Profile) -> dict[str, Profile]:
    return {profile.name: profile, **by_root.get(profile.root, {})}


def maintain(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile import fork
    from hermes_admin.profile.actions.maintenance import maintain as maintain_profile
    from hermes_admin.profile.views import profile_summary

    if fork.worth_it(job):  # half of the profiles in a second process (fork.py says when)
        return fork.in_two(job, lambda half: maintain(replace(half, params=dict(half.params, processes=1)), isolated))

    request = _request(job.params)
    run = Run(dry_run=request.dry_run)
    siblings = _siblings_by_root(job)

    def work(profile: Profile) -> None:
        maintain_profile(run, profile, job.layers.get(str(profile.home), {}), request, _siblings(siblings, profile))
        if job.params.get("summaries"):
            run.data.setdefault("summaries", []).append(dict(profile_summary(profile), label=profile.shown))

    _each(job, run, isolated, work)
    return run


def profiles(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.views import profile_summary, profile_settings

    run = Run(dry_run=True)
    from hermes_admin.profile.views import stale_open

    def row(profile: Profile) -> dict:
        summary = dict(profile_summary(profile), **profile_settings(profile, job.layers.get(str(profile.home), {})))
        summary["stale_open"] = stale_open(profile, summary["policy"]) if summary["ok"] else None
        return summary

    _each(job, run, isolated, lambda p: run.data.setdefault("profiles", []).append(row(p)))
    return run


def _rows_of_stores(job: Job, isolated: bool, key: str, rows: Callable) -> Run:
    """`rows(profile, store)` from every profile's store opened read-only, into `run.data[key]`;
    a profile without a store has none, an unusable store is that profile's error."""
    from hermes_admin.profile.store import Store, StoreError

    run = Run(dry_run=True)

    def work(profile: Profile) -> None:
        if not profile.has_store():
            return
        try:
            with Store.open(profile) as store:
                run.data.setdefault(key, []).extend(rows(profile, store))
        except StoreError as exc:
            run.errors.append(str(exc))

    _each(job, run, isolated, work)
    return run


def sessions_list(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.store.read import most_recent
    from hermes_admin.profile.views import session_brief

    limit = int(job.params["limit"])
    return _rows_of_stores(job, isolated, "sessions",
                           lambda profile, store: [session_brief(profile, row) for row in most_recent(store, limit)])


def resolve(job: Job, isolated: bool) -> Run:
    """Which sessions each wanted id (or prefix) names, in each profile: the host decides exactness and
    ambiguity over all of them (cli/mutate.targets)."""
    from hermes_admin.profile.store.read import find_session_ids

    return _rows_of_stores(job, isolated, "matches", lambda profile, store: [
        {"wanted": wanted, "home": str(profile.home), "session_id": sid}
        for wanted in job.params["wanted"] for sid in find_session_ids(store, wanted)])


def session_detail(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.views import session_detail as detail

    run = Run(dry_run=True)
    _each(job, run, isolated,
          lambda p: run.data.setdefault("session", []).append(detail(p, job.params["session_id"])))
    return run


def change(job: Job, isolated: bool) -> Run:
    """`sessions delete|archive|unarchive`: named ids per home, and/or filters."""
    from hermes_admin.profile.actions import sessions as actions
    from hermes_admin.filters import Filters

    params = job.params
    run = Run(dry_run=bool(params["dry_run"]))
    filters = Filters(**params["filters"]) if params.get("filters") is not None else None
    verb, force = params["verb"], bool(params.get("force"))

    def work(profile: Profile) -> None:
        ids = list(params["ids"].get(str(profile.home), []))
        if not ids and (filters is None or not filters.given()):
            # Nothing named here: only what an earlier run left in the outbox, which opening replays.
            from hermes_admin.profile.actions.common import with_engine
            from hermes_admin.profile.engine.outbox import has_work
            if not run.dry_run and has_work(profile):
                with_engine(run, profile, lambda engine: [])
            return
        if verb == "delete":
            from hermes_admin.profile.actions.common import export_settings
            exports = export_settings(profile, job.layers.get(str(profile.home)), params.get("export_dir"))
            actions.delete(run, profile, ids, filters, force, exports)
        else:
            actions.archive(run, profile, ids, verb == "archive", filters if verb == "archive" else None, force)

    _each(job, run, isolated, work)
    return run


def restore(job: Job, isolated: bool) -> Run:
    """`restore FILE`: one profile (the host chose it), the file read as its owner."""
    from hermes_admin.profile.actions.exports import restore as restore_units

    run = Run(dry_run=bool(job.params["dry_run"]))
    _each(job, run, isolated, lambda p: restore_units(run, p, job.params["file"], job.params.get("sessions")))
    return run


def exports_list(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.actions.exports import listing

    run = Run(dry_run=True)
    _each(job, run, isolated, lambda p: listing(run, p, job.layers.get(str(p.home)), job.params.get("export_dir")))
    return run


def repair(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.actions.repair import repair as repair_profile

    apply = bool(job.params["apply"])
    run = RepairRun(dry_run=not apply)
    siblings = _siblings_by_root(job)
    _each(job, run, isolated,
          lambda p: repair_profile(run, p, _siblings(siblings, p), apply, bool(job.params.get("check_fts"))))
    return run


def plugins_list(job: Job, isolated: bool) -> Run:
    from hermes_admin.profile.hermes_config import HermesConfigError
    from hermes_admin.profile.hermes_config import load as load_hermes_config
    from hermes_admin.profile.hooks.listing import plugins_of

    run = Run(dry_run=True)

    def work(profile: Profile) -> None:
        try:
            config = load_hermes_config(profile.home)
        except HermesConfigError as exc:
            run.errors.append(f"profile '{profile.shown}': {exc}")
            return
        rows, problems, lookup = plugins_of(profile, config)
        run.data.setdefault("plugins", []).extend(dict(profile=profile.name, home=str(profile.home), **r) for r in rows)
        run.data.setdefault("installations", []).append(
            dict(profile=profile.name, home=str(profile.home), **lookup.as_dict()))
        run.warnings += [f"profile '{profile.shown}': {p}" for p in problems]

    _each(job, run, isolated, work)
    return run


KINDS: dict[str, Callable[[Job, bool], Run]] = {
    "maintain": maintain, "profiles": profiles, "sessions_list": sessions_list, "resolve": resolve,
    "session_detail": session_detail, "change": change, "repair": repair, "plugins_list": plugins_list,
    "restore": restore, "exports_list": exports_list,
}


def serve(job: Job, isolated: bool = False) -> Run:
    """Do one job. `isolated`: in a worker process of its own, which may change its current folder."""
    from hermes_admin import report

    report.VERBOSE = int(job.params.get("verbose") or 0)
    from hermes_admin.profile import installation

    installation.configure(job.layers, remember=not job.params.get("dry_run", True))
    if isolated and job.params.get("safe_mode"):  # the invoker's HERMES_SAFE_MODE, into a clean environment
        os.environ["HERMES_SAFE_MODE"] = str(job.params["safe_mode"])
    if isolated and job.params.get("bundled_plugins"):  # where Hermes' bundled plugins are (Nix, packages)
        os.environ["HERMES_BUNDLED_PLUGINS"] = str(job.params["bundled_plugins"])
    return KINDS[job.kind](job, isolated)

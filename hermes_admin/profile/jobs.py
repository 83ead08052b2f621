"""The kinds of work a worker does, each over the profiles of its one owner.

A job carries its kind's typed parameters (protocol.Job: `job.params` is one of
protocol.Maintain, protocol.Change, ...) and the host's context; the answer is
always a Run: results, errors, warnings, and for list-type jobs its rows in
`run.data`. The host merges the answers of every owner and renders them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile
from hermes_admin.plain_files import read_plain
from hermes_admin.problems import ERROR, WARNING, Problem, about
from hermes_admin.profile.environment import Environment
from hermes_admin.protocol import Job
from hermes_admin.results import RepairRun, Run


class HomeChanged(Exception):
    """The home is not the owner's any more (swapped since the host looked at it)."""


def _enter(profile: Profile, isolated: bool) -> None:
    """In a worker of its own: the home as the current folder, and still the owner's."""
    if not isolated:
        return
    os.chdir(profile.home)
    if os.stat(".").st_uid != os.geteuid():
        raise HomeChanged("not owned by this worker's user any more; left alone")


def _each(job: Job, run: Run, isolated: bool, work: Callable[[Profile], None], view: bool = False) -> None:
    """`work` on every profile of the job; a home that changed hands is an error, the others go on.
    `view`: a command that reads: a store the last check found damaged is said as the profile's
    error even where the view's own reads did not meet the damage."""
    from hermes_admin import stopping

    for n, profile in enumerate(job.profiles):
        if stopping.requested():
            left = [p.shown for p in job.profiles[n:]]
            run.add(Problem(WARNING, "stopped on request: " + ", ".join(left[:20])
                            + (f" and {len(left) - 20} more" if len(left) > 20 else "") + " not worked on",
                            kind="stopped"))
            break
        try:
            _enter(profile, isolated)
        except HomeChanged as exc:
            run.add(about(profile, ERROR, "home_changed", str(exc), path=profile.home))
            continue
        except OSError as exc:
            run.add(about(profile, ERROR, "os", str(exc.strerror), path=profile.home))
            continue
        try:
            before = len(run.problems)
            work(profile)
            if view:
                _known_damage(run, profile, before)
        except KeyboardInterrupt:
            raise
        except OSError as exc:  # disk full, read-only, an I/O error: this profile's fault, named
            where = exc.filename or profile.home
            run.add(about(profile, ERROR, "os", str(exc.strerror or exc), path=where))
        except Exception as exc:
            from hermes_admin.profile.store.damage import damage_error, is_damage

            if is_damage(exc):  # a damaged store is the profile's problem (exit 2), named, never ours
                run.add(damage_error(profile, " ".join(str(exc).split())).as_problem(profile.home))
                continue
            import traceback  # a bug of ours: this profile ends, the others go on (exit 70)

            run.internal = True
            run.add(about(profile, ERROR, "internal", f"internal error: {type(exc).__name__}: {exc}"
                          + ("" if job.context.verbose else " (run with -v for the traceback)")))
            if job.context.verbose:
                traceback.print_exc()


def _known_damage(run: Run, profile: Profile, before: int) -> None:
    """The damage the last check (`run`, `repair`) recorded for this very store file, unless this
    view met it itself (store/damage.py, profile/integrity.py)."""
    from hermes_admin.profile import integrity
    from hermes_admin.profile.store.damage import DAMAGED_STORE

    if any(p.kind in (DAMAGED_STORE, "store") for p in run.problems[before:]):
        return
    known = integrity.damage_known(profile)
    if known:
        run.add(about(profile, ERROR, DAMAGED_STORE, f"{known} (found by the last check)", path=profile.store_path))


def _siblings_by_root(job: Job) -> dict[Path, dict[str, Profile]]:
    """Per root, its profiles of this owner (the host lists them): where a wrong-store row may move
    (docs/design.md §8). Built once per job, not once per profile."""
    return {Path(root): {name: Profile(Path(root), name, Path(home)) for name, home in listed.items()}
            for root, listed in job.context.siblings.items()}


def _siblings(by_root: dict[Path, dict[str, Profile]], profile: Profile) -> dict[str, Profile]:
    return {profile.name: profile, **by_root.get(profile.root, {})}


def maintain(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile import fork
    from hermes_admin.profile.actions.maintenance import maintain as maintain_profile
    from hermes_admin.profile.views import profile_summary

    if fork.worth_it(job):  # half of the profiles in a second process (fork.py says when)
        return fork.in_two(job, lambda half: maintain(replace(half, context=replace(half.context, processes=1)),
                                                      isolated, env))

    request = job.params.request
    run = Run(dry_run=request.dry_run)
    siblings = _siblings_by_root(job)

    def work(profile: Profile) -> None:
        import time

        from hermes_admin import stopping
        from hermes_admin.profile import run_record

        before, started = (len(run.results), len(run.problems)), time.time()
        try:
            maintain_profile(run, profile, job.layers_of(profile), request, env,
                             _siblings(siblings, profile))
        finally:  # what `status` reads: written as the owner, in the home, for every run that was not dry
            if not request.dry_run and profile.has_store():
                run_record.write(profile, run_record.summarise(run, before, profile, job.params.command, started,
                                                               interrupted=stopping.requested()))
        if job.params.summaries:
            run.data.setdefault("summaries", []).append(dict(profile_summary(profile, lock_wait_s=env.lock_wait),
                                                                    label=profile.shown))

    _each(job, run, isolated, work)
    return run


def status(job: Job, isolated: bool, env: Environment) -> Run:
    """The runs recorded in each profile (`hermes-admin status`); changes nothing."""
    from hermes_admin.profile import run_record

    run = Run(dry_run=True)

    def one(p: Profile) -> None:
        runs, problem = run_record.read(p)
        if problem:
            run.add(about(p, WARNING, "run_record", problem))
        run.data.setdefault("status", []).append(
            {"profile": p.name, "home": str(p.home), "store": p.has_store(), "runs": runs or []})

    _each(job, run, isolated, one, view=True)
    return run


def policy(job: Job, isolated: bool, env: Environment) -> Run:
    """Each profile's effective policy with the origin of every value, and the problems of its own
    config.yaml with their lines (`config check`, `config show --origin`); changes nothing."""
    from hermes_admin import yamlfile
    from hermes_admin.profile import installation
    from hermes_admin.profile import policy as rules
    from hermes_admin.profile.hermes_config import HermesConfigError
    from hermes_admin.profile.hermes_config import load as load_hermes_config

    run = Run(dry_run=True)

    def work(profile: Profile) -> None:
        path = profile.home / "config.yaml"
        row = {"profile": profile.name, "home": str(profile.home), "problems": [], "warnings": [],
               "values": None, "origins": None}
        text = _small_text(path)
        row["read"] = text is not None  # `config check` names the files it read: not one that is not there

        def problem(kind: str, message: str, key: str | None = None, file: str | None = None,
                    line: int | None = None) -> None:
            """A problem of the profile's config.yaml, or of the managed file (`file`) merged over it."""
            file = file or str(path)
            if line is None:
                where = text if file == str(path) else _small_text(Path(file))
                line = yamlfile.line_of(where, key) if key and where else None
            row[kind].append({"file": file, "line": line, "message": message})

        lookup = env.installations.for_profile(profile)  # its release's keys and defaults, as `run` reads them
        row["hermes"] = lookup.as_dict()  # none found: the built-in defaults are not its Hermes' (said by the host)
        try:
            config = load_hermes_config(profile.home, installation.sessions_keys(lookup),
                                        env.installations.managed_for(profile))
        except HermesConfigError as exc:
            problem("problems", str(exc))
            config = None
        if config is not None:
            for warning in config.warnings:  # its message: the file and line are the row's own fields
                problem("warnings", warning.message, warning.key, warning.path, warning.line)
            if config.plugins_enabled:  # a name no plugin answers to enables nothing: said, as `plugins list` says it
                from hermes_admin.profile.hooks.listing import plugins_of
                for message in plugins_of(profile, config, env)[1]:
                    problem("warnings", message.removeprefix(f"{path}: "), "plugins.enabled")
            for where, key, message in rules.problems(PolicyLayers(), config):  # the admin layers: by the host
                problem("problems", message, f"sessions.{key}" if key else "sessions", where.file)
            try:
                chosen, origins = rules.with_origins(profile.shown, job.layers_of(profile), config,
                                                     installed=installation.defaults_layer(lookup))
                values = {k: v for k, v in chosen.as_dict().items() if k not in ("origins", "description")}
                # every value `run` uses, as its dry run reports them (actions/maintenance._policy)
                values["hook_callback_timeout"], origins["hook_callback_timeout"] = installation.hook_timeout(config, lookup)
                row["values"], row["origins"] = values, origins
            except rules.PolicyError as exc:
                if not row["problems"]:
                    row["problems"].append({"file": None, "line": None, "message": str(exc)})
        run.data.setdefault("policy", []).append(row)

    _each(job, run, isolated, work, view=True)
    return run


def _small_text(path: Path) -> str | None:
    """A config file's text for finding a key's line: never through a link, at most 1 MiB."""
    try:
        return read_plain(path, 1 << 20, head=True).decode("utf-8", "replace")
    except OSError:
        return None


def profiles(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.views import profile_settings, profile_summary, sqlite_of

    run = Run(dry_run=True)
    def row(profile: Profile) -> dict:
        settings = profile_settings(profile, job.layers_of(profile), env.installations)
        summary = profile_summary(profile, settings["policy"], env.lock_wait)  # one look at the store for both
        stale = summary.pop("stale_open", None)
        sqlite, warning = sqlite_of(profile, summary["journal_mode"], env.installations)
        if warning:
            run.add(warning)
        return dict(summary, **settings, stale_open=stale, sqlite=sqlite)

    _each(job, run, isolated, lambda p: run.data.setdefault("profiles", []).append(row(p)))
    return run


def _rows_of_stores(job: Job, isolated: bool, env: Environment, key: str, rows: Callable) -> Run:
    """`rows(profile, store)` from every profile's store opened read-only, into `run.data[key]`;
    a profile without a store has none, an unusable store is that profile's error."""
    from hermes_admin.profile.store import Store, StoreError

    run = Run(dry_run=True)

    def work(profile: Profile) -> None:
        if not profile.has_store():
            return
        try:
            with Store.open(profile, lock_wait_s=env.lock_wait) as store:
                run.data.setdefault(key, []).extend(rows(profile, store))
        except StoreError as exc:
            run.add(exc.as_problem(profile.home))

    _each(job, run, isolated, work, view=True)
    return run


def sessions_list(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.store.read import count_sessions, most_recent
    from hermes_admin.profile.views import session_brief

    limit = job.params.limit
    counts: list[dict] = []

    def rows(profile: Profile, store) -> list[dict]:
        # how many there are in all: a listing cut at the limit says so (`sessions list`)
        counts.append({"home": str(profile.home), "sessions": count_sessions(store)})
        return [session_brief(profile, row) for row in most_recent(store, limit)]

    run = _rows_of_stores(job, isolated, env, "sessions", rows)
    if counts:
        run.data["counts"] = counts
    return run


IDS_ROW_CHARS = 256 << 10  # of session ids in one row: a message stays well under protocol.MAX_LINE


def resolve(job: Job, isolated: bool, env: Environment) -> Run:
    """Every session id of each profile, a row of ids at a time: the host finds what it was asked for
    and decides exactness and ambiguity over all of them (cli/mutate.targets)."""
    from hermes_admin.profile.store.read import session_ids

    def rows(profile: Profile, store) -> list[dict]:
        found, chunk, size = [], [], 0
        for sid in session_ids(store):
            chunk.append(sid)
            size += len(sid) + 4
            if size >= IDS_ROW_CHARS:
                found.append({"home": str(profile.home), "ids": chunk})
                chunk, size = [], 0
        if chunk:
            found.append({"home": str(profile.home), "ids": chunk})
        return found

    return _rows_of_stores(job, isolated, env, "session_ids", rows)


def session_detail(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.views import session_detail as detail

    run = Run(dry_run=True)
    _each(job, run, isolated,
          lambda p: run.data.setdefault("session", []).append(detail(p, job.params.session_id, env.lock_wait)),
          view=True)
    return run


def change(job: Job, isolated: bool, env: Environment) -> Run:
    """`sessions delete|archive|unarchive`: named ids per home, and/or filters."""
    from hermes_admin.profile.actions import sessions as actions

    params = job.params
    run = Run(dry_run=params.dry_run)
    filters, verb, force = params.filters, params.verb, params.force

    def work(profile: Profile) -> None:
        ids = list(params.ids.get(str(profile.home), ()))
        if not ids and (filters is None or not filters.given()):
            # Nothing named here: only what an earlier run left in the outbox, which opening replays.
            from hermes_admin.profile.actions.common import with_engine
            from hermes_admin.profile.engine import has_work
            if not run.dry_run and has_work(profile):
                with_engine(run, profile, env, lambda engine: [])
            return
        if verb == "delete":
            from hermes_admin.profile.actions.common import export_settings
            exports = export_settings(profile, job.layers_of(profile), env.installations,
                                      params.export_dir)
            actions.delete(run, profile, env, ids, filters, force, exports)
        else:
            actions.archive(run, profile, env, ids, verb == "archive", filters if verb == "archive" else None, force)

    _each(job, run, isolated, work)
    return run


def restore(job: Job, isolated: bool, env: Environment) -> Run:
    """`restore FILE`: one profile (the host chose it), the file read as its owner."""
    from hermes_admin.profile.actions.exports import restore as restore_units

    run = Run(dry_run=job.params.dry_run)
    sessions = list(job.params.sessions) if job.params.sessions else None
    _each(job, run, isolated, lambda p: restore_units(run, p, env, job.params.file, sessions, job.params.pin,
                                                      job.params.other_profile))
    return run


def usage(job: Job, isolated: bool, env: Environment) -> Run:
    """`hermes-admin usage`: where each profile's bytes are; read-only."""
    from hermes_admin.profile.actions.common import export_settings
    from hermes_admin.profile.store.read import journal_mode
    from hermes_admin.profile import exports
    from hermes_admin.profile.engine import held_by
    from hermes_admin.profile.usage import profile_usage
    from hermes_admin.profile.views import sqlite_of

    warnings = []

    def rows(profile: Profile, store) -> list[dict]:
        try:  # the exports `exports list` shows for this profile, whatever else shares its folder
            settings = export_settings(profile, job.layers_of(profile), env.installations)
            exported = exports.listed_bytes(profile, settings)
        except exports.ExportError as exc:  # a value, as every problem (run.problems holds Problems only)
            exported = 0
            warnings.append(about(profile, WARNING, "exports", exc.strerror or str(exc), path=exc.filename))
        sqlite, warning = sqlite_of(profile, journal_mode(store), env.installations)
        warnings.extend([warning] if warning else [])
        return [dict(profile_usage(profile, store, exported, held_by(store)), sqlite=sqlite)]

    run = _rows_of_stores(job, isolated, env, "usage", rows)
    run.add(*warnings)
    return run


def exports_list(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.actions.exports import listing

    run = Run(dry_run=True)
    _each(job, run, isolated, lambda p: listing(run, p, job.layers_of(p), env.installations,
                                                job.params.export_dir, job.params.held), view=True)
    return run


def exports_prune(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.actions.exports import remove

    run = Run(dry_run=job.params.dry_run)
    _each(job, run, isolated, lambda p: remove(run, p, job.layers_of(p), env.installations,
                                               job.params.export_dir,
                                               list(job.params.files.get(str(p.home), ())), run.dry_run))
    return run


def repair(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.actions.common import export_settings
    from hermes_admin.profile.actions.repair import repair as repair_profile

    apply = job.params.apply
    run = RepairRun(dry_run=not apply)
    siblings = _siblings_by_root(job)
    _each(job, run, isolated, lambda p: repair_profile(
        run, p, env, _siblings(siblings, p), apply, job.params.check_fts, job.params.move_legacy_main,
        export_settings(p, job.layers_of(p), env.installations)))
    return run


def plugins_list(job: Job, isolated: bool, env: Environment) -> Run:
    from hermes_admin.profile.hermes_config import HermesConfigError
    from hermes_admin.profile.hermes_config import load as load_hermes_config
    from hermes_admin.profile.hooks.listing import plugins_of

    run = Run(dry_run=True)

    def work(profile: Profile) -> None:
        try:
            config = load_hermes_config(profile.home, (), env.installations.managed_for(profile))
        except HermesConfigError as exc:
            run.add(about(profile, ERROR, "hermes_config", str(exc)))
            return
        rows, problems, lookup = plugins_of(profile, config, env)
        run.data.setdefault("plugins", []).extend(dict(profile=profile.name, home=str(profile.home), **r) for r in rows)
        run.data.setdefault("installations", []).append(
            dict(profile=profile.name, home=str(profile.home), **lookup.as_dict()))
        run.add(*(about(profile, WARNING, "plugin", p) for p in problems))

    _each(job, run, isolated, work)
    return run


def compact(job: Job, isolated: bool, env: Environment) -> Run:
    """`hermes-admin compact`: each profile's free pages back to the file system."""
    from hermes_admin.profile.actions.space import compact as compact_profile

    run = Run(dry_run=job.params.dry_run)
    _each(job, run, isolated, lambda p: compact_profile(run, p, job.layers_of(p), env, job.params.force))
    return run


KINDS: dict[str, Callable[[Job, bool, Environment], Run]] = {
    "maintain": maintain, "profiles": profiles, "sessions_list": sessions_list, "resolve": resolve,
    "session_detail": session_detail, "change": change, "repair": repair, "plugins_list": plugins_list,
    "restore": restore, "exports_list": exports_list, "status": status,
    "policy": policy, "exports_prune": exports_prune, "usage": usage, "compact": compact,
}


def serve(job: Job, isolated: bool = False) -> Run:
    """Do one job. `isolated`: in a worker process of its own, which may change its current folder.
    What the job's work needs besides its parameters is made here, once, and passed down."""
    env = Environment.of(job.context, job.layers, remember=not job.params.dry_run)
    return KINDS[job.kind](job, isolated, env)

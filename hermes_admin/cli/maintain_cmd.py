"""`purge`, `sweep-empty`, `prune-ghosts`, `archive-inactive` and `run` (one pass of every enabled task)."""

from __future__ import annotations

import time
from dataclasses import replace

import click

from hermes_admin import report
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.params import ARCHIVE_DAYS, OLDER_THAN, WHEN, at_least
from hermes_admin.filters import FilterError, Filters, parse_when
from hermes_admin.model import AUTO_ARCHIVE, BY_COMMAND, ORDER, PURGE, TaskName
from hermes_admin.cli.mutate import NOT_ALL_FOUND
from hermes_admin.problems import ERROR, WARNING, Problem
from hermes_admin.protocol import Maintain, Request
from hermes_admin.trust import expand_user


def export_dir_option(f):
    return click.option("--export-dir", metavar="DIR", type=click.Path(file_okay=False),
                        help="Export deleted units here (default: the policy's export_dir, else "
                             "<home>/.hermes-admin/exports).")(f)


def task_options(f):
    for option in (
        click.option("--force", is_flag=True, help="Allow --older-than or --days under 1 day, or filters matching every candidate without an age bound."),
        json_option, mutate.yes_option, mutate.dry_run_option, profile_option,
    ):
        f = option(f)
    return f


def filter_options(f):
    """The filter surface a Hermes user knows from `hermes sessions prune`, ANDed."""
    for option in reversed([
        click.option("--source", help="Only sessions of this source (cli, telegram, ...)."),
        click.option("--end-reason", help="Only sessions that ended for this reason."),
        click.option("--title", help="Title contains this (case-insensitive)."),
        click.option("--model", help="Model contains this (case-insensitive)."),
        click.option("--min-messages", type=click.IntRange(min=0), help="At least this many message rows."),
        click.option("--max-messages", type=click.IntRange(min=0), help="At most this many message rows."),
        click.option("--before", metavar="WHEN", type=WHEN,
                     help="Last active before WHEN: a duration back (12h, 90d, 1w2d, 3mo) or an ISO time (local "
                          "unless it names a zone)."),
        click.option("--after", metavar="WHEN", type=WHEN,
                     help="Last active after WHEN: a duration back (12h, 90d, 1w2d, 3mo) or an ISO time."),
    ]):
        f = option(f)
    return f


def build_filters(now: float, source=None, end_reason=None, title=None, model=None, min_messages=None,
                  max_messages=None, before=None, after=None) -> Filters:
    try:
        return Filters(source=source, end_reason=end_reason, title=title, model=model,
                       min_messages=min_messages, max_messages=max_messages,
                       before=_when(before, now), after=_when(after, now))
    except FilterError as exc:
        raise click.BadParameter(str(exc)) from None


def filter_problems(filters: Filters | None) -> list[Problem]:
    """A `--source` Hermes never writes: said with the nearest (it filters all the same: a newer
    Hermes may write another)."""
    from hermes_admin.model import SOURCES
    from hermes_admin.shown import did_you_mean

    source = filters.source if filters is not None else None
    if source is None or source in SOURCES:
        return []
    return [Problem(WARNING, f"--source {source!r} is not a source Hermes writes{did_you_mean(source, SOURCES)} "
                             f"(known: {', '.join(sorted(SOURCES))}); only sessions of exactly that source match",
                    kind="unknown_source")]


def _when(value, now: float) -> float | None:
    """A Unix time as the option type gave it, or text (a caller outside click) read the same way."""
    return None if value is None else value if isinstance(value, float) else parse_when(value, now)


def absolute_dir(path: str | None) -> str | None:
    """A folder named on the command line, as the invoker meant it (a worker runs in the home)."""
    import os
    return os.path.abspath(expand_user(path)) if path else None


def run_tasks(app: App, profiles, wanted: Request, yes: bool, as_json: bool, what: str,
              metrics_file: str | None = None) -> None:
    found = app.discover(profiles)
    dry_run = wanted.dry_run
    if found.profiles and mutate.asks(yes, dry_run):
        # what a person is asked to agree to: counted first by a dry run of the same work
        preview = app.work(Maintain(replace(wanted, dry_run=True)), found.profiles, with_policy=True)
        mutate.confirm(f"{what}: {mutate.counted(preview)}. Go on?", yes, dry_run)
    target = metrics_file or app.config.metrics_file
    summaries = bool(target and not dry_run)
    run = app.work(Maintain(wanted, summaries=summaries, command=what), found.profiles, with_policy=True)
    run.dry_run = dry_run
    run.add(*filter_problems(wanted.filters))
    if app.failed_discovery(found, profiles):
        run.add(NOT_ALL_FOUND)
    if summaries:
        from hermes_admin.host import metrics
        try:
            why = metrics.write(target, run, run.data.pop("summaries", []))
        except (OSError, ValueError) as exc:  # the report still goes out; the exit code says a part failed
            run.add(Problem(ERROR, f"metrics file {target}: {exc.strerror or exc}", kind="metrics_file"))
        else:
            if why:
                run.add(metrics_refused(app, target, why, from_config=not metrics_file))
    mutate.finish(run, as_json, what, app.verbose, app.quiet)


def metrics_refused(app: App, target: str, why: str, from_config: bool) -> Problem:
    """The line for a metrics path root may not write: a configuration error, said with the admin
    config's file and line when the path came from there; the run itself was done."""
    from hermes_admin.host import config as admin_config

    message = (f"metrics_file {target}: refusing it as root: {why}; the run was done, its metrics were not "
               "written")
    if not (from_config and app.config.path):
        return Problem(ERROR, message, kind="metrics_file", key="metrics_file")
    path = app.config.path
    where = admin_config.problem_at(path, admin_config.text_of(path), "metrics_file", message)
    return Problem(ERROR, message, kind="metrics_file", path=str(path), key="metrics_file", line=where.line)


@click.command()
@click.option("--older-than", type=OLDER_THAN, metavar="AGE",
              help="Inactive for longer than AGE: 90 (days), 90d, 12h, 1w2d, 3mo (default: the profile's retention_days; with filters and "
                   "no --older-than, as in Hermes, no age bound at all).")
@click.option("--vacuum", is_flag=True, help="VACUUM afterwards (whatever was purged) if over 25 % of pages are free "
                                             "and nobody holds the store; `compact` does it on your word.")
@filter_options
@export_dir_option
@task_options
@pass_app
def purge(app: App, older_than, vacuum, profiles, dry_run, yes, as_json, force, export_dir, **filters):
    """Delete ended, unpinned sessions past retention, whole lineages at a time (reason `prune`)."""
    now = time.time()
    at_least("retention_days", older_than, force, "--older-than")
    chosen = build_filters(now, **filters)
    if chosen.given() and older_than is None:
        report.warn("filters without --older-than replace the retention window (as in Hermes): every ended "
                    "session they match goes, whatever its age; add --older-than AGE to keep recent ones")
    wanted = Request((PURGE.name,), now, explicit=True, force=force, older_than=older_than,
                     filters=chosen, vacuum=vacuum, dry_run=dry_run, export_dir=absolute_dir(export_dir))
    run_tasks(app, profiles, wanted, yes, as_json, PURGE.command)


def _single_task(task: TaskName, help_text: str) -> click.Command:
    """A command that runs one maintenance task, whatever the policy enables."""
    @click.command(task.command, help=help_text)
    @export_dir_option
    @task_options
    @pass_app
    def command(app: App, profiles, dry_run, yes, as_json, force, export_dir):
        run_tasks(app, profiles, Request((task.name,), time.time(), explicit=True, force=force, dry_run=dry_run,
                                         export_dir=absolute_dir(export_dir)), yes, as_json, task.command)
    return command


sweep_empty = _single_task(BY_COMMAND["sweep-empty"],
                           "Delete ended sessions that never got a message (reason `empty_sweep`).")
prune_ghosts = _single_task(BY_COMMAND["prune-ghosts"],
                            "Delete TUI ghosts and rows or files whose session is gone (reason `ghost_prune`).")


@click.command(AUTO_ARCHIVE.command)
@click.option("--days", type=ARCHIVE_DAYS, metavar="AGE",
              help="Idle for longer than AGE: 30 (days), 30d, 1w2d, 3mo (default: auto_archive_days).")
@task_options
@pass_app
def archive_inactive(app: App, days, profiles, dry_run, yes, as_json, force):
    """Archive idle lineages, open ones included; pinned never (silent: no event)."""
    at_least("auto_archive_days", days, force, "--days")
    run_tasks(app, profiles, Request((AUTO_ARCHIVE.name,), time.time(), explicit=True, force=force,
                                     archive_days=days, dry_run=dry_run), yes, as_json, AUTO_ARCHIVE.command)


@click.command()
@click.option("--metrics-file", type=click.Path(dir_okay=False), help="Write Prometheus textfile metrics after the run.")
@export_dir_option
@task_options
@pass_app
def run(app: App, metrics_file, profiles, dry_run, yes, as_json, force, export_dir):
    """One pass of every task the policy enables: what the timer calls."""
    run_tasks(app, profiles, Request(ORDER, time.time(), force=force, dry_run=dry_run,
                                     export_dir=absolute_dir(export_dir)), yes, as_json, "run", metrics_file)

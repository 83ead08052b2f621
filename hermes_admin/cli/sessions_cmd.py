"""`hermes-admin sessions list|show`."""

from __future__ import annotations

import time

import click

from hermes_admin import exitcodes, report
from hermes_admin.profile.actions import sessions as actions
from hermes_admin.profile.actions.common import Run
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.maintain_cmd import build_filters, filter_options
from hermes_admin.profile.views import resolve, session_brief, session_detail
from hermes_admin.profile.store import Store, StoreError
from hermes_admin.profile.store.read import most_recent


@click.group()
def sessions():
    """Look at, delete or archive sessions."""


@sessions.command("list")
@profile_option
@click.option("--limit", "-n", type=click.IntRange(min=1), default=50, show_default=True,
              help="At most this many sessions, most recently active first.")
@json_option
@pass_app
def list_cmd(app: App, profiles, limit: int, as_json: bool):
    """List sessions, most recently active first."""
    found = app.discover(profiles)
    briefs, errors = [], []
    for profile in found.profiles:
        if not profile.has_store():
            continue
        try:
            with Store.open(profile) as store:
                briefs += [session_brief(profile, row) for row in most_recent(store, limit)]
        except StoreError as exc:
            errors.append(str(exc))
    briefs.sort(key=lambda b: b["last_activity"] or "", reverse=True)
    briefs = briefs[:limit]
    if as_json:
        report.emit_json({"sessions": briefs, "errors": errors})
    else:
        report.stdout_console().print(report.table(
            None, ["profile", "id", "source", "title", "last activity", "msgs", "state"],
            [[b["profile"], b["id"], b["source"], b["title"], b["last_activity"], b["messages"], _state(b)]
             for b in briefs],
        ))
    for message in errors:
        report.error(message)
    failed = errors or found.missing_roots or (set(profiles) - {p.name for p in found.profiles})
    raise click.exceptions.Exit(exitcodes.PROFILE_FAILED if failed else exitcodes.OK)


def _state(brief: dict) -> str:
    flags = ["open" if brief["open"] else "ended"]
    flags += [name for name in ("archived", "pinned") if brief[name]]
    return ",".join(flags)


@sessions.command("show")
@click.argument("session_id")
@profile_option
@json_option
@pass_app
def show_cmd(app: App, session_id: str, profiles, as_json: bool):
    """Show one session (ID or a unique prefix): lineage, delegates and files."""
    found = app.discover(profiles)
    matches, errors = resolve(found.profiles, session_id)
    for exc in errors:
        report.error(str(exc))
    if not matches:
        report.error(f"no session matches '{session_id}'")
        raise click.exceptions.Exit(exitcodes.WARNINGS if not errors else exitcodes.PROFILE_FAILED)
    if len(matches) > 1:
        names = ", ".join(f"{m.profile.name}:{m.session_id}" for m in matches[:10])
        report.error(f"'{session_id}' is ambiguous: {names}")
        raise click.exceptions.Exit(exitcodes.WARNINGS)
    detail = session_detail(matches[0].profile, matches[0].session_id)
    if as_json:
        report.emit_json({"session": detail})
        return
    out = report.stdout_console()
    for key, value in detail.items():
        if key == "files":
            value = "\n".join(f["path"] + (" (symlink)" if f["symlink"] else "") for f in value) or None
        elif isinstance(value, list):
            value = ", ".join(value) or None
        out.print(f"[bold]{key:>20}[/bold]  {'-' if value is None else value}", highlight=False)


def _read_ids(source) -> list[str]:
    """One id a line; blank lines and `#` comments are skipped."""
    text = source.read()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _change(app: App, ids: tuple[str, ...], ids_from, profiles, dry_run: bool, yes: bool, as_json: bool,
            force: bool, filter_values: dict, verb: str, act) -> None:
    now = time.time()
    filters = build_filters(now, **filter_values) if filter_values is not None else None
    wanted = list(ids) + (_read_ids(ids_from) if ids_from is not None else [])
    if not wanted and not (filters and filters.given()):
        raise click.UsageError("name at least one session id, --ids-from FILE, or a filter")
    found = app.discover(profiles)
    by_profile, missing, problems = mutate.targets(found.profiles, wanted)
    run = Run(dry_run=dry_run)
    run.warnings += [f"no session matches '{m}'" for m in missing]
    run.errors += problems
    chosen = list(by_profile) if not (filters and filters.given()) else found.profiles
    if chosen:
        what = f"{sum(len(v) for v in by_profile.values())} named session(s)" + (
            " and the sessions the filters match" if filters and filters.given() else "")
        mutate.confirm(f"{verb.capitalize()} {what} in {len(chosen)} profile(s)?", yes, dry_run)
    for profile in chosen:
        act(run, profile, by_profile.get(profile, []), filters, force)
    mutate.finish(run, as_json, verb)


def _change_command(name: str, verb: str, act, help_text: str, with_filters: bool) -> None:
    """Register `sessions NAME ID...` with the options every changing command shares."""
    def command(app: App, ids, ids_from, profiles, dry_run, yes, as_json, force=False, **filter_values):
        _change(app, ids, ids_from, profiles, dry_run, yes, as_json, force,
                filter_values if with_filters else None, verb, act)

    options = [
        click.argument("ids", nargs=-1),
        click.option("--ids-from", type=click.File("r"), metavar="FILE", help="Also the ids in FILE, one a line (- for stdin)."),
        profile_option, mutate.dry_run_option, mutate.yes_option, json_option,
    ]
    if with_filters:
        options += [filter_options, click.option("--force", is_flag=True,
                                                  help="Allow filters that match every candidate session.")]
    for option in reversed(options):
        command = option(command)
    sessions.command(name, help=help_text)(pass_app(command))


_change_command("delete", "delete", actions.delete,
                "Delete sessions (ID or unique prefix, --ids-from, or filters), each with its delegates; "
                "fires `delete`.", with_filters=True)
_change_command("archive", "archive",
                lambda run, profile, sids, filters, force: actions.archive(run, profile, sids, True, filters, force),
                "Archive sessions with their whole compression lineage; fires `archive` on a real change.",
                with_filters=True)
_change_command("unarchive", "unarchive",
                lambda run, profile, sids, filters, force: actions.archive(run, profile, sids, False),
                "Unarchive sessions with their whole compression lineage (silent: no event).", with_filters=False)

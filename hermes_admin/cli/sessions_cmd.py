"""`hermes-admin sessions list|show`."""

from __future__ import annotations

import click

from hermes_admin import exitcodes, report
from hermes_admin.actions import sessions as actions
from hermes_admin.actions.common import Run
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.views import list_sessions, resolve, session_brief, session_detail
from hermes_admin.store import Store, StoreError


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
                briefs += [session_brief(profile, row) for row in list_sessions(store)]
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


def _change(app: App, ids: tuple[str, ...], profiles, dry_run: bool, yes: bool, as_json: bool,
            verb: str, act) -> None:
    found = app.discover(profiles)
    by_profile, missing, problems = mutate.targets(found.profiles, list(ids))
    run = Run(dry_run=dry_run)
    run.warnings += [f"no session matches '{m}'" for m in missing]
    run.errors += problems
    if by_profile:
        count = sum(len(v) for v in by_profile.values())
        mutate.confirm(f"{verb.capitalize()} {count} session(s) in {len(by_profile)} profile(s)?", yes, dry_run)
    for profile, sids in by_profile.items():
        act(run, profile, sids)
    mutate.finish(run, as_json, verb)


def _change_command(name: str, verb: str, act, help_text: str) -> None:
    """Register `sessions NAME ID...` with the options every changing command shares."""
    @sessions.command(name, help=help_text)
    @click.argument("ids", nargs=-1, required=True)
    @profile_option
    @mutate.dry_run_option
    @mutate.yes_option
    @json_option
    @pass_app
    def command(app: App, ids, profiles, dry_run, yes, as_json):
        _change(app, ids, profiles, dry_run, yes, as_json, verb, act)


_change_command("delete", "delete", actions.delete,
                "Delete sessions (ID or unique prefix), each with its delegates; fires `delete`.")
_change_command("archive", "archive", lambda run, profile, sids: actions.archive(run, profile, sids, True),
                "Archive sessions with their whole compression lineage; fires `archive` on a real change.")
_change_command("unarchive", "unarchive", lambda run, profile, sids: actions.archive(run, profile, sids, False),
                "Unarchive sessions with their whole compression lineage (silent: no event).")

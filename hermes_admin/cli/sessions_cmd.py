"""`hermes-admin sessions list|show`."""

from __future__ import annotations

import time

import click

from dataclasses import replace

from hermes_admin import exitcodes, report, tables
from hermes_admin.shown import clean
from hermes_admin.tables import Column
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin.cli.maintain_cmd import absolute_dir, build_filters, export_dir_option, filter_options, filter_problems
from hermes_admin.protocol import Change, ListExports, ListSessions, SessionDetail
from hermes_admin.cli.mutate import AMBIGUOUS, NOT_ALL_FOUND
from hermes_admin.problems import WARNING, Problem
from hermes_admin.results import Run


# On a narrow terminal: the counts and states go first; the title is cut before anything else is.
COLUMNS = [Column("profile", whole=True), Column("id", whole=True), Column("title", cut=True),
           Column("last activity", drop=1), Column("source", drop=4), Column("msgs", drop=3), Column("state", drop=2)]


@click.group(cls=SuggestingGroup)
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
    answer = app.work(ListSessions(limit), found.profiles)
    briefs, errors = answer.data.get("sessions", []), answer.errors
    labels = app.labels()
    briefs.sort(key=lambda b: b["last_activity"] or "", reverse=True)
    briefs = briefs[:limit]
    total = sum(c["sessions"] for c in answer.data.get("counts", []) if isinstance(c.get("sessions"), int))
    if as_json:
        report.emit_json({"sessions": briefs, "total": total, "errors": errors})
    else:
        tables.show(COLUMNS, [[labels.get(b.get("home"), b["profile"]), b["id"], b["title"],
                               report.local_time(b["last_activity"]), b["source"], b["messages"], _state(b)]
                              for b in briefs])
        if total > len(briefs):  # never stop at the limit silently
            report.note(f"{len(briefs)} of {total} sessions shown, the most recently active; -n N for more")
    for message in errors:
        report.error(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))


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
    """Show one session (ID or a unique prefix): lineage, delegates and files.

    A session that was deleted is found in the exports: when, why, which export holds it, and the
    command that puts it back (exit 1: it is not in the store)."""
    found = app.discover(profiles)
    by_profile, missing, problems = mutate.targets(app, found.profiles, [session_id])
    ambiguous = [p for p in problems if p.kind == AMBIGUOUS]
    for problem in problems:
        report.error(problem.text())
    if missing:
        failed = problems or app.failed_discovery(found, profiles)
        _show_deleted(app, found, session_id, as_json, said={problem.text() for problem in problems})
        raise click.exceptions.Exit(exitcodes.PROFILE_FAILED if failed else exitcodes.WARNINGS)
    if ambiguous or not by_profile:
        raise click.exceptions.Exit(exitcodes.WARNINGS)
    ((profile, (sid,)),) = by_profile.items()
    answer = app.work(SessionDetail(sid), [profile])
    for message in answer.errors:
        report.error(message)
    if not answer.data.get("session"):
        raise click.exceptions.Exit(exitcodes.INTERNAL if answer.internal else exitcodes.PROFILE_FAILED)
    detail = answer.data["session"][0]
    if as_json:
        report.emit_json({"session": detail})
    else:
        _print_detail(detail, profile)
    if problems or app.failed_discovery(found, profiles):  # another profile's store could not be read
        raise click.exceptions.Exit(exitcodes.PROFILE_FAILED)


def _print_detail(detail: dict, profile) -> None:
    from rich.text import Text

    out = report.stdout_console()
    for key, value in detail.items():
        if key == "files":
            lines = [clean(f["path"]) + (" (symlink)" if f["symlink"] else "") for f in value] or ["-"]
        elif key == "profile":  # as every other command names it: ROOT:NAME with several roots in view
            lines = [clean(profile.shown)]
        elif isinstance(value, list):
            lines = [clean(", ".join(str(v) for v in value) or "-")]
        elif key.endswith("_at") or key == "last_activity":  # one time format for people (JSON keeps ISO)
            lines = [clean(report.local_time(value) or "-")]
        else:
            lines = [clean("-" if value is None else value)]
        for n, text in enumerate(lines):  # Text: markup inside a title is never interpreted
            out.print(Text.assemble((f"{key if n == 0 else '':>20}", "bold"), "  ", text), highlight=False)


def _show_deleted(app: App, found, session_id: str, as_json: bool, said: set[str] = frozenset()) -> None:
    """Where the exports hold a session no store has: each export and unit, oldest first (a session
    restored and deleted again is in two), found by its id or a prefix of it, as live ones are.
    `said`: the errors the look for the id in the stores said already (a damaged store's line: this
    second job meets the same profiles, and says it once)."""
    answer = app.work(ListExports(held=True), found.profiles, with_policy=True)  # no worker is told the id
    errors = [message for message in answer.errors if message not in said]
    held = holding(answer.data.get("held", []), session_id)
    exact = [h for h in held if h.get("session_id") == session_id]
    held = sorted(exact or held, key=lambda h: (h.get("exported_at") or 0, str(h.get("file"))))
    outside = answer.data.get("noticed", [])  # found deleted outside hermes-admin (no export holds those)
    outside = [n for n in outside if isinstance(n, dict) and str(n.get("session_id")).startswith(session_id)]
    outside = [n for n in outside if n.get("session_id") == session_id] or outside[:HELD_SHOWN]
    labels = app.labels()
    if not held and not outside:  # as before exports knew: one error, inside the JSON document under --json
        report.error(f"no session matches '{clean(session_id)}', in the stores, in their exports or among "
                     "the sessions found deleted outside hermes-admin")
    elif as_json:
        report.emit_json({"session": None, "deleted": held, "noticed": outside, "errors": errors})
    for n in outside if not as_json else []:
        name = labels.get(n.get("home"), n.get("profile"))
        unit = "" if n.get("unit") == n.get("session_id") else f", with the unit of {clean(n.get('unit'))}"
        report.line(f"{clean(n.get('session_id'))}: deleted outside hermes-admin from profile '{clean(name)}'{unit}, "
                    f"between {report.local_time(n.get('looked_at')) or '?'} and "
                    f"{report.local_time(n.get('noticed_at')) or '?'}, when it was noticed and announced to the "
                    f"plugins with reason {clean(n.get('reason') or 'unknown')}; no export holds it")
    for h in held if not as_json else []:
        name = labels.get(h.get("home"), h.get("profile"))
        unit = "" if h.get("unit") == h.get("session_id") else f", with the unit of {clean(h.get('unit'))}"
        made = f" (made in the profile at {clean(h['made_in'])})" if h.get("made_in") else ""
        report.line(f"{clean(h.get('session_id'))}: deleted from profile '{clean(name)}'{unit}, "
                    f"reason {clean(h.get('reason') or 'unknown')}, exported "
                    f"{report.local_time(h.get('exported_at')) or 'at an unknown time'} into {clean(h.get('id'))}{made}: "
                    f"{clean(h.get('file'))}")
        other = " --other-profile" if h.get("made_in") else ""
        report.line(f"  restore: hermes-admin{clean(app.given())} restore {clean(h.get('id'))} --session {clean(h.get('session_id'))} "
                    f"-p {clean(name)}{other} (--pin keeps it from retention)")
    for message in errors:
        report.error(message)


HELD_SHOWN = 20  # exports named for one sought id in one profile: a prefix of one character finds many


def holding(units: list, wanted: str) -> list[dict]:
    """Of the units the workers' exports hold (`held` rows), one row per session whose id is `wanted`
    or begins with it: its export, its unit and why it was deleted (at most HELD_SHOWN a profile)."""
    found, shown = [], {}
    for unit in units:
        if not (isinstance(unit, dict) and isinstance(unit.get("ids"), list)):
            continue
        for sid in unit["ids"]:
            if not (isinstance(sid, str) and sid.startswith(wanted)):
                continue
            if sid == wanted or shown.get(unit.get("home"), 0) < HELD_SHOWN:  # the id itself always
                shown[unit.get("home")] = shown.get(unit.get("home"), 0) + 1
                found.append({"session_id": sid, **{k: v for k, v in unit.items() if k != "ids"}})
    return found


def _read_ids(source) -> list[str]:
    """One id a line; blank lines and `#` comments are skipped."""
    text = source.read()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _change(app: App, ids: tuple[str, ...], ids_from, profiles, dry_run: bool, yes: bool, as_json: bool,
            force: bool, filter_values: dict, verb: str, export_dir: str | None = None) -> None:
    now = time.time()
    filters = build_filters(now, **filter_values) if filter_values is not None else None
    wanted = list(ids) + (_read_ids(ids_from) if ids_from is not None else [])
    if not wanted and not (filters and filters.given()):
        raise click.UsageError("name at least one session id, --ids-from FILE, or a filter")
    found = app.discover(profiles)
    by_profile, missing, problems = mutate.targets(app, found.profiles, wanted)
    run = Run(dry_run=dry_run)
    run.add(*(Problem(WARNING, f"no session matches '{m}'", kind="no_match") for m in missing), *problems,
            *filter_problems(filters))
    if app.failed_discovery(found, profiles):
        run.add(NOT_ALL_FOUND)
    filtering = bool(filters and filters.given())
    targets = found.profiles if filtering else [p for p in found.profiles if p in by_profile]
    params = Change(verb, dry_run, force, ids={str(p.home): tuple(ids) for p, ids in by_profile.items()},
                    filters=filters, export_dir=absolute_dir(export_dir))
    if targets and mutate.asks(yes, dry_run):  # counted first, by a dry run of the same change
        preview = app.work(replace(params, dry_run=True), targets)
        units = sum(len(r.done) for r in preview.results)
        rows = sum(r.rows for r in preview.results)
        where = len({r.home for r in preview.results if r.done})
        mutate.confirm(f"{verb.capitalize()} {units} unit(s), {rows} session(s), in {where} profile(s)?", yes, dry_run)
    if targets or not dry_run:
        # Every selected profile goes to its worker: one that holds none of the ids only replays what
        # an earlier run left in its outbox (any command that writes delivers those first).
        run.merge(app.work(params, targets if dry_run else found.profiles, with_policy=verb == "delete"))
    mutate.finish(run, as_json, verb, app.verbose, app.quiet)


def _change_command(name: str, help_text: str, with_filters: bool) -> None:
    """Register `sessions NAME ID...` with the options every changing command shares."""
    def command(app: App, ids, ids_from, profiles, dry_run, yes, as_json, force=False, export_dir=None,
                **filter_values):
        _change(app, ids, ids_from, profiles, dry_run, yes, as_json, force,
                filter_values if with_filters else None, name, export_dir)

    options = [
        click.argument("ids", nargs=-1),
        click.option("--ids-from", type=click.File("r"), metavar="FILE", help="Also the ids in FILE, one a line (- for stdin)."),
        profile_option, mutate.dry_run_option, mutate.yes_option, json_option,
    ]
    if with_filters:
        options += [filter_options, click.option("--force", is_flag=True,
                                                  help="Allow filters that match every candidate session.")]
    if name == "delete":
        options.append(export_dir_option)
    for option in reversed(options):
        command = option(command)
    sessions.command(name, help=help_text)(pass_app(command))


_change_command("delete",
                "Delete sessions (ID or unique prefix, --ids-from, or filters), each with its delegates; "
                "fires `delete`.", with_filters=True)
_change_command("archive",
                "Archive sessions with their whole compression lineage; fires `archive` on a real change.",
                with_filters=True)
_change_command("unarchive",
                "Unarchive sessions with their whole compression lineage (silent: no event).", with_filters=False)

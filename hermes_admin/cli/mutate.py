"""Shared by the commands that change stores: target resolution, confirmation, output."""

from __future__ import annotations

import sys

import click

from hermes_admin import report
from hermes_admin.profile.actions.common import Run
from hermes_admin.host.discovery import Profile
from hermes_admin.profile.views import resolve_many


def dry_run_option(f):
    return click.option("--dry-run", is_flag=True, help="Show what would change; write nothing, fire nothing.")(f)


def yes_option(f):
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")(f)


def targets(profiles: list[Profile], ids: list[str]) -> tuple[dict[Profile, list[str]], list[str], list[str]]:
    """Which profile holds each id (exact or unique prefix): (by profile, not found, problems)."""
    by_profile: dict[Profile, list[str]] = {}
    missing = []
    found, errors = resolve_many(profiles, list(dict.fromkeys(ids)))
    problems = [str(e) for e in errors]
    for wanted, matches in found.items():
        if not matches:
            missing.append(wanted)
        elif len(matches) > 1:
            problems.append(f"'{wanted}' is ambiguous: " + ", ".join(f"{m.profile.name}:{m.session_id}" for m in matches[:10]))
        else:
            by_profile.setdefault(matches[0].profile, []).append(matches[0].session_id)
    return by_profile, missing, problems


def confirm(question: str, yes: bool, dry_run: bool) -> None:
    if yes or dry_run or not sys.stdin.isatty():
        return
    click.confirm(question, abort=True, err=True)


def _human(run: Run, verbose: int = 0) -> None:
    for name, policy in run.policies.items():
        click.echo(f"{name}: policy: {policy.describe()}")
    for result in run.results:
        click.echo(report.summary_line(result, run.dry_run))
        for done in result.done:
            more = f" (+{len(done.ids) - 1}: {', '.join(done.ids[1:])})" if len(done.ids) > 1 else ""
            rule = f": {done.rule}" if done.rule else ""
            click.echo(f"  {done.session_id}{more}{rule}")
        for skip in result.skipped:
            click.echo(f"  skipped {skip['session_id']}: {skip['why']}")
        for note in result.notes:
            click.echo(f"  {note}")
        if verbose:
            for sid, why in result.kept.items():
                click.echo(f"  kept {sid}: {why}")


def problems(run: Run) -> None:
    """Warnings and errors on stderr, whatever the output format."""
    for result in run.results:
        for line in [*result.files_skipped, *result.hook_failures]:
            report.warn(line)
    for line in run.warnings:
        report.warn(line)
    for line in run.locked + run.errors:
        report.error(line)


def finish(run: Run, as_json: bool, verb: str, verbose: int = 0) -> None:
    if as_json:
        report.emit_json(run.as_dict())
    else:
        _human(run, verbose)
    problems(run)
    raise click.exceptions.Exit(run.exit_code())

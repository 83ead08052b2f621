"""Shared by the commands that change stores: target resolution, confirmation, output."""

from __future__ import annotations

import signal
import sys

import click

from hermes_admin import exitcodes, report, stopping
from hermes_admin.protocol import Profile
from hermes_admin.results import Run


def dry_run_option(f):
    return click.option("--dry-run", is_flag=True, help="Show what would change; write nothing, fire nothing.")(f)


def yes_option(f):
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")(f)


def targets(app, profiles: list[Profile], ids: list[str]) -> tuple[dict[Profile, list[str]], list[str], list[str]]:
    """Which profile holds each id (exact or unique prefix): (by profile, not found, problems).

    Every owner's worker says what each id names in its profiles; ambiguity is decided
    here, over all of them, so an id is never taken in two places at once.
    """
    wanted = list(dict.fromkeys(ids))
    by_profile: dict[Profile, list[str]] = {}
    missing = []
    if not wanted:
        return by_profile, missing, []
    answer = app.work("resolve", {"wanted": wanted}, profiles)
    problems = list(answer.errors)
    homes = {str(p.home): p for p in profiles}
    found: dict[str, list[tuple[Profile, str]]] = {w: [] for w in wanted}
    for match in answer.data.get("matches", []):
        if match.get("wanted") in found and match.get("home") in homes:
            found[match["wanted"]].append((homes[match["home"]], match["session_id"]))
    for want, matches in found.items():
        exact = [m for m in matches if m[1] == want]
        matches = exact or matches
        if not matches:
            missing.append(want)
        elif len(matches) > 1:
            problems.append(f"'{want}' is ambiguous: " + ", ".join(f"{p.shown}:{sid}" for p, sid in matches[:10]))
        else:
            by_profile.setdefault(matches[0][0], []).append(matches[0][1])
    return by_profile, missing, problems


def asks(yes: bool, dry_run: bool) -> bool:
    """Will `confirm` ask? Only a person at a terminal, for a change without --yes."""
    return not (yes or dry_run or not sys.stdin.isatty())


def counted(preview: Run) -> str:
    """`12 session(s) in 3 profile(s) would be deleted, 4 archived`: what a prompt asks about."""
    gone = {r.home for r in preview.results if r.action in ("delete", "repair") and r.rows}
    archived = {r.home for r in preview.results if r.action == "archive" and r.rows}
    deleted = sum(r.rows for r in preview.results if r.action in ("delete", "repair"))
    flipped = sum(r.rows for r in preview.results if r.action == "archive")
    return (f"{deleted} session(s) in {len(gone)} profile(s) would be deleted, "
            f"{flipped} in {len(archived)} archived")


def confirm(question: str, yes: bool, dry_run: bool) -> None:
    """Ask on a terminal; Ctrl-C at the prompt aborts at once (nothing was done yet). "No" is an
    answer, not an interruption: nothing is changed and the exit code is 1, not 130."""
    if not asks(yes, dry_run):
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        agreed = click.confirm(question, err=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    if not agreed:
        report.note("answered no: nothing was changed")
        raise click.exceptions.Exit(exitcodes.WARNINGS)


def _human(run: Run, verbose: int = 0) -> None:
    for policy in run.policies.values():
        name = policy.get('label') or policy.get('profile')
        report.line(f"{name}: policy: {policy.get('description')}")
        origins = policy.get("origins") if isinstance(policy.get("origins"), dict) else {}
        chosen = [f"{key} {_value(policy.get(key))} ({where})" for key, where in origins.items() if where != "built-in"]
        if (verbose or run.dry_run) and chosen:  # where each value that is not a built-in came from
            report.line(f"  set: {'; '.join(chosen)}")
    for result in run.results:  # one line per task per profile; the units under -v, or in a dry run
        report.line(report.summary_line(result, run.dry_run))
        if verbose or run.dry_run:
            for done in result.done:
                more = f" (+{len(done.ids) - 1}: {', '.join(done.ids[1:])})" if len(done.ids) > 1 else ""
                rule = f": {done.rule}" if done.rule else ""
                report.line(f"  {done.session_id}{more}{rule}")
            for skip in result.skipped:
                report.line(f"  skipped {skip['session_id']}: {skip['why']}")
        for note in result.notes:
            report.line(f"  {note}")
        if verbose:
            for sid, why in result.kept.items():
                report.line(f"  kept {sid}: {why}")


def _value(value) -> str:
    return "forever" if value is None else str(value).lower() if isinstance(value, bool) else f"{value:g}" \
        if isinstance(value, float) else str(value)


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
    if stopping.requested():
        report.warn("stopped on request: the report above is what was done; the rest waits for the next run")
    raise click.exceptions.Exit(exitcodes.INTERRUPTED if stopping.requested() else run.exit_code())

"""Shared by the commands that change stores: target resolution, confirmation, output."""

from __future__ import annotations

import itertools
import signal
import sys

import click

from hermes_admin import exitcodes, report, stopping
from hermes_admin.model import Profile
from hermes_admin.problems import ERROR, LOCKED, Problem
from hermes_admin.protocol import Resolve
from hermes_admin.results import Action, Run, Status

AMBIGUOUS = "ambiguous"  # the kind of an id that names sessions in several places
# said once discovery refused or missed some of what was named (the refusals were said above)
NOT_ALL_FOUND = Problem(ERROR, "some roots or profiles were not found or were refused (see above)", kind="not_found")


def dry_run_option(f):
    return click.option("--dry-run", is_flag=True, help="Show what would change; write nothing, fire nothing.")(f)


def yes_option(f):
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation on a terminal.")(f)


def targets(app, profiles: list[Profile], ids: list[str]) -> tuple[dict[Profile, list[str]], list[str], list[Problem]]:
    """Which profile holds each id (exact or unique prefix): (by profile, not found, problems).

    Every owner's worker lists the session ids of its profiles, without being told which are
    wanted: the ids are found here, and ambiguity decided over all of them, so an id is never taken
    in two places at once, and no owner's worker can answer for an id it was never told of (to
    make it ambiguous, or to draw it into her profile).
    """
    wanted = list(dict.fromkeys(ids))
    by_profile: dict[Profile, list[str]] = {}
    missing = []
    if not wanted:
        return by_profile, missing, []
    answer = app.work(Resolve(), profiles)
    problems = [p for p in answer.problems if p.severity == ERROR]
    found = matches_of(wanted, profiles, answer.data.get("session_ids", []))
    for want, matches in found.items():
        matches = list(dict.fromkeys(matches))  # an id listed twice is one session
        exact = [m for m in matches if m[1] == want]
        matches = exact or matches
        if not matches:
            missing.append(want)
        elif len(matches) > 1:
            more = f" and {len(matches) - 10} more: give more of the id" if len(matches) > 10 else ""
            problems.append(Problem(ERROR, f"'{want}' is ambiguous: {len(matches)} sessions match: "
                                    + ", ".join(f"{p.shown}:{sid}" for p, sid in matches[:10]) + more, kind=AMBIGUOUS))
        else:
            by_profile.setdefault(matches[0][0], []).append(matches[0][1])
    return by_profile, missing, problems


def matches_of(wanted: list[str], profiles: list[Profile], rows: list) -> dict[str, list[tuple[Profile, str]]]:
    """Each wanted id -> (profile, session id) of every id listed that is it or begins with it (the
    id itself always, else at most PREFIX_MATCHES a profile); rows name their profile's home (a
    worker's rows are of its own homes: protocol.Reader). Each id listed is looked up once per length
    of the ids wanted, however many are wanted."""
    homes = {str(p.home): p for p in profiles}
    found: dict[str, list[tuple[Profile, str]]] = {w: [] for w in wanted}
    by_length: dict[int, set[str]] = {}
    for want in wanted:
        by_length.setdefault(len(want), set()).add(want)
    counted: dict[tuple[str, str], int] = {}
    for row in rows:
        if not (isinstance(row, dict) and row.get("home") in homes and isinstance(row.get("ids"), list)):
            continue
        home = row["home"]
        for sid in row["ids"]:
            if not isinstance(sid, str):
                continue
            for length, wants in by_length.items():
                want = sid[:length]
                if len(sid) < length or want not in wants:
                    continue
                if sid != want:
                    if counted.get((want, home), 0) >= PREFIX_MATCHES:
                        continue
                    counted[(want, home)] = counted.get((want, home), 0) + 1
                found[want].append((homes[home], sid))
    return found


PREFIX_MATCHES = 50  # of one profile's ids beginning with a wanted prefix: enough to say it is ambiguous


def asks(yes: bool, dry_run: bool) -> bool:
    """Will `confirm` ask? Only a person at a terminal, for a change without --yes."""
    return not (yes or dry_run or not sys.stdin.isatty())


def counted(preview: Run) -> str:
    """`12 session(s) in 3 profile(s) would be deleted, 4 in 2 archived, 6 old export(s) (1.2 MiB)
    removed`: what a prompt asks about, from the dry run of the same work (the one plan)."""
    gone = {r.home for r in preview.results if r.action in (Action.DELETE, Action.REPAIR) and r.rows}
    archived = {r.home for r in preview.results if r.action == Action.ARCHIVE and r.rows}
    deleted = sum(r.rows for r in preview.results if r.action in (Action.DELETE, Action.REPAIR))
    flipped = sum(r.rows for r in preview.results if r.action == Action.ARCHIVE)
    closed = sum(r.rows for r in preview.results if r.action == Action.CLOSE)
    removed = preview.data.get("exports_removed", [])  # restore copies: named as the sessions are
    exports = (f", {len(removed)} old export(s) ({report.human_bytes(sum(r.get('bytes') or 0 for r in removed))}) "
               "removed" if removed else "")
    return (f"{deleted} session(s) in {len(gone)} profile(s) would be deleted"
            + (f", {flipped} in {len(archived)} archived" if flipped else "")  # never `0 in 0 archived`
            + (f", {closed} stale open one(s) closed" if closed else "") + exports)


def confirm(question: str, yes: bool, dry_run: bool) -> None:
    """Ask on a terminal; Ctrl-C at the prompt, or before it while its counts were made, ends the
    command at once (nothing was done yet: 130). "No" is an answer, not an interruption: nothing is
    changed and the exit code is 1, not 130."""
    if not asks(yes, dry_run):
        return
    if stopping.requested():  # Ctrl-C while the question was being counted: no question, nothing done
        report.note("stopped while planning: nothing was changed")
        raise click.exceptions.Exit(exitcodes.INTERRUPTED)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        agreed = click.confirm(question, err=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    if not agreed:
        report.note("answered no: nothing was changed")
        raise click.exceptions.Exit(exitcodes.WARNINGS)


def _human(run: Run, verbose: int = 0, quiet: bool = False) -> None:
    """One line per task per profile, or one line for a profile where nothing changed; under -q only
    the tasks that changed something (a run with nothing to do prints nothing, as `restic -q` and
    logrotate). The policy of each profile, and where its values came from, in a dry run or under -v."""
    for home, policy in run.policies.items() if (verbose or run.dry_run) and not quiet else []:
        name = policy.get('label') or policy.get('profile')
        report.line(f"{name}: policy: {policy.get('description')}")
        origins = policy.get("origins") if isinstance(policy.get("origins"), dict) else {}
        for line in set_lines(origins, policy, home):  # where each value that is not a built-in came from
            report.line(line)
        hermes = policy.get("hermes") or {}
        found = hermes.get("installation")
        if found:
            report.line(f"  Hermes {found.get('hermes') or '?'} at {found['python']} (found by {found['found_by']}): "
                        "its defaults apply, its plugins run there")
        elif hermes.get("own_interpreter_chosen_in"):
            report.line("  no Hermes installation used (hermes_python: hermes-admin): Hermes' built-in defaults "
                        "apply, plugins run in hermes-admin's own interpreter")
        else:  # what to do about it is said once, at the end (report.installation_notes)
            report.line("  no Hermes installation found: Hermes' built-in defaults apply (see the note at the end)")
    by_profile: dict[str, list] = {}
    for result in run.results:
        by_profile.setdefault(result.home or result.profile, []).append(result)
    stops = stopped(run)  # label -> why not all was done: said here too, never as "nothing to do"
    for results in by_profile.values():
        label = results[0].label or results[0].profile
        why = stops.pop(label, None)
        if not (verbose or run.dry_run) and not any(report.changed(r) for r in results):
            if not quiet:
                report.line(f"{label}: nothing done: {why}" if why else _nothing_line(results, run.findings))
            continue
        for result in results:
            if not quiet or report.changed(result):
                _result_lines(result, run.dry_run, verbose, quiet, run.findings)
        for path in dict.fromkeys(r.export for r in results if r.export):  # once a profile, whatever the tasks
            report.line(f"{label}: exported to {path}")
        if why and not quiet:
            report.line(f"{label}: not all done: {why}")
    for label, why in stops.items() if not quiet else ():  # stopped before any task (a lock held)
        report.line(f"{label}: nothing done: {why}")
    for line in report.space_lines(run, quiet):  # each export removed; what free pages wait for
        report.line(line)


def stopped(run: Run) -> dict[str, str]:
    """Each profile whose work an error or a held lock ended or cut short, with the first such
    problem's reason (held locks first, as they are said)."""
    stops: dict[str, str] = {}
    for severity in (LOCKED, ERROR):
        for problem in run.problems:
            if problem.severity == severity and problem.profile:
                stops.setdefault(problem.profile, problem.reason)
    return stops


def _nothing_line(results: list, findings: list) -> str:
    """`work: nothing to do (5 tasks, 0.02 s; repair: 2 dangling_parent)`."""
    head = results[0]
    done = [r for r in results if r.status != Status.SKIPPED]
    line = f"{head.label or head.profile}: nothing to do ({len(done)} task(s), {sum(r.seconds for r in results):.2f} s"
    found = findings_summary(findings, head.home)
    why = [r.why for r in results if r.status == Status.SKIPPED and not r.task]  # no store yet
    return line + (f"; repair: {found}" if found else "") + "".join(f"; {w}" for w in why if w) + ")"


SKIPS_SHOWN = 5  # skipped units said without -v (the rest counted)


def _result_lines(result, dry_run: bool, verbose: int, quiet: bool, findings: list) -> None:
    report.line(report.summary_line(result, dry_run))
    if verbose or dry_run:
        for done in result.done:
            more = f" (+{len(done.ids) - 1}: {', '.join(done.ids[1:])})" if len(done.ids) > 1 else ""
            rule = f": {done.rule}" if done.rule else ""
            report.line(f"  {done.session_id}{more}{rule}")
    # A skipped unit makes the exit code 1: the first ones say why, without -v too (a restore of
    # what is already there said only "1 skipped", and exited 1).
    shown = len(result.skipped) if verbose or dry_run else min(len(result.skipped), SKIPS_SHOWN)
    for skip in itertools.islice(result.skipped, shown):  # a Spill: iterated, never sliced
        report.line(f"  skipped {skip['session_id']}: {skip['why']}")
    if shown < len(result.skipped):
        report.line(f"  {len(result.skipped) - shown} more skipped (-v lists them)")
    if result.task == "repair" and not verbose and not len(result.done):
        summary = findings_summary(findings, result.home)  # the same findings every night: counted, not listed
        if summary and not quiet:
            report.line(f"  {summary} (`hermes-admin repair -p {result.label or result.profile}` lists them)")
    else:
        for note in result.said():
            report.line(f"  {note}")
    if verbose:
        for sid, why in result.kept.items():
            report.line(f"  kept {sid}: {why}")


def findings_summary(findings: list, home: str | None) -> str:
    """`3 loose_permissions, 4 dangling_parent`: one profile's repair findings by kind."""
    counts: dict[str, int] = {}
    for finding in findings:
        if finding.home == home:
            counts[finding.kind] = counts.get(finding.kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in counts.items())


def set_lines(origins: dict, policy: dict, home: str) -> list[str]:
    """A line per place values were set in (`set in /etc/hermes-admin/config.yaml, defaults:
    retention_days 30d; max_store_mb 100`), each value as `config show` says it."""
    from hermes_admin.cli.values import shown_value

    by_place: dict[str, list[str]] = {}
    for key, where in origins.items():
        if where == "built-in" or not isinstance(where, str):
            continue
        if where.endswith(f".{key}"):  # `FILE: defaults.KEY`: its file and section
            place = where[:-len(key) - 1]
        elif where.endswith(f": {key}"):  # `FILE: KEY` (a preset): its file
            place = where[:-len(key) - 2]
        else:  # an option, a command, an installation's defaults
            place = where
        by_place.setdefault(place, []).append(f"{key} {shown_value(key, policy.get(key), home)}")
    return [f"  set in {place}: {'; '.join(values)}" for place, values in by_place.items()]


def problems(run: Run) -> None:
    """Warnings and errors on stderr, whatever the output format."""
    for severity, line in report.problems(run):
        (report.error if severity == "error" else report.warn)(line)


def finish(run: Run, as_json: bool, verb: str, verbose: int = 0, quiet: bool = False) -> None:
    if as_json:
        report.emit_json(run.as_dict())
    else:
        _human(run, verbose, quiet)
    problems(run)
    if not quiet:  # as `profiles` says it: Hermes' built-in defaults applied, not an installed release's
        report.installation_notes(policy.get("hermes") for policy in run.policies.values())
    if stopping.requested():
        report.warn("stopped on request: the report above is what was done; the rest waits for the next run "
                    "(`--dry-run` counts what is left)")
    raise click.exceptions.Exit(exitcodes.INTERRUPTED if stopping.requested() else run.exit_code())

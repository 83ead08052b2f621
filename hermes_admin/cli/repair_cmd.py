"""`hermes-admin repair [--apply]`: report what is broken in each profile; fix it with --apply."""

from __future__ import annotations

import click

from hermes_admin import report
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.mutate import NOT_ALL_FOUND
from hermes_admin.protocol import Repair


@click.command("repair")
@click.option("--apply", "apply_fixes", is_flag=True, help="Fix what can be fixed (default: report only).")
@click.option("--check-fts", is_flag=True, help="Also check both full-text indexes (on a private snapshot: slow on big stores).")
@click.option("--move-legacy-main", is_flag=True,
              help="Move rows keyed `agent:main:` found in a named profile's store to the default profile "
                   "(Hermes' `repair-profiles --legacy-main move`). Without it they are reported as ambiguous "
                   "and stay: such a row may be that profile's own older history.")
@profile_option
@mutate.yes_option
@json_option
@pass_app
def repair_cmd(app: App, apply_fixes: bool, check_fts: bool, move_legacy_main: bool, profiles, yes: bool,
               as_json: bool):
    """Find broken profiles: folders, permissions, dangling parents, labels, rows in the wrong store."""
    found = app.discover(profiles)
    if apply_fixes and found.profiles:
        if mutate.asks(yes, False):  # a damaged store's rebuild is said before it is agreed to
            plan = app.work(Repair(apply=False, check_fts=False, move_legacy_main=move_legacy_main), found.profiles)
            for finding in plan.findings:
                if finding.kind == "damaged_store" and finding.fix != "none":
                    report.note(f"{finding.profile}: {finding.subject}: {finding.detail}; --apply: {finding.fix}")
        mutate.confirm(f"Apply repairs to {len(found.profiles)} profile(s)?", yes, False)
    run = app.work(Repair(apply=apply_fixes, check_fts=check_fts, move_legacy_main=move_legacy_main), found.profiles)
    run.dry_run = not apply_fixes
    if app.failed_discovery(found, profiles):
        run.add(NOT_ALL_FOUND)
    if as_json:
        report.emit_json(run.as_dict())
    else:
        for finding in run.findings:
            state = "fixed" if finding.applied else ("NOT fixed: " + finding.error if finding.error else
                                                     ("would " + finding.fix if finding.fix != "none" else "report only"))
            report.line(f"{finding.profile}: {finding.kind}: {finding.subject}: {finding.detail} -> {state}")
        if not run.findings and not run.errors:
            report.line("nothing to repair")
        for result in run.results:
            for done in result.done:
                report.line(f"{result.profile}: deleted {done.session_id} ({done.rule})")
    mutate.problems(run)
    unfixed = [f for f in run.findings if f.fix != "none" and not f.applied]
    code = run.exit_code()
    if code == 0 and unfixed:
        code = 1  # something is broken and was not (or could not be) fixed
    raise click.exceptions.Exit(code)

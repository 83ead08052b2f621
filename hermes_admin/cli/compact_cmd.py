"""`hermes-admin compact`: give each store's free pages back to the file system, on the operator's word
(as `borg compact` does for its repository)."""

from __future__ import annotations

import click

from hermes_admin import exitcodes, report, stopping
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.mutate import NOT_ALL_FOUND
from hermes_admin.protocol import Compact


def given_back(rows: list[dict]) -> int:
    return sum(row.get("given_back_bytes") or 0 for row in rows)


@click.command()
@click.option("--force", is_flag=True, help="VACUUM even a store another process is seen holding: its writers "
                                            "wait for the whole VACUUM (stop that Hermes first where you can).")
@json_option
@mutate.yes_option
@mutate.dry_run_option
@profile_option
@pass_app
def compact(app: App, force, profiles, dry_run, yes, as_json):
    """Give each store's free pages back to the file system.

    A store in incremental auto-vacuum gives them back in short steps while Hermes runs. Any other
    store needs one VACUUM, which also switches it to incremental reclaim (unless the policy says
    `incremental_vacuum: false`); the journal mode is never changed. A process this account cannot
    look into (another user's, `hidepid`, a sandbox's init) does not stop it; one seen holding the
    store does, unless --force. --dry-run says how many bytes would come back."""
    found = app.discover(profiles)
    if found.profiles and mutate.asks(yes, dry_run):
        preview = app.work(Compact(dry_run=True, force=force), found.profiles)
        rows = preview.data.get("compacted", [])
        stores = sum(1 for row in rows if row.get("given_back_bytes"))
        mutate.confirm(f"compact: {report.human_bytes(given_back(rows))} of free pages in {stores} store(s) would "
                       "be given back. Go on?", yes, dry_run)
    run = app.work(Compact(dry_run=dry_run, force=force), found.profiles)
    run.dry_run = dry_run
    if app.failed_discovery(found, profiles):
        run.add(NOT_ALL_FOUND)
    rows = run.data.get("compacted", [])
    if as_json:
        report.emit_json(dict(run.as_dict(), compacted=rows, given_back_bytes=given_back(rows)))
    else:
        _human(app, run, rows, dry_run)
    mutate.problems(run)
    raise click.exceptions.Exit(exitcodes.INTERRUPTED if stopping.requested() else run.exit_code())


def _human(app: App, run, rows: list[dict], dry_run: bool) -> None:
    """A line a store: what came back (or would), how, and the file's size before and after; then
    the notes that say why, under it."""
    labels = app.labels()
    notes = {r.home: r.said() for r in run.results}
    for row in rows:
        name = labels.get(row["home"], row["profile"])
        verb = "would be given back" if dry_run else "given back"
        if row.get("refused"):
            line = f"{name}: not compacted ({report.human_bytes(row['free_bytes'])} of free pages)"
        elif not row.get("free_bytes"):
            line = f"{name}: no free pages: nothing to give back"
        else:
            line = (f"{name}: {report.human_bytes(row['given_back_bytes'])} {verb} ({row['how']}, {row['journal_mode']} "
                    f"journal)")
            if not dry_run:
                line += (f"; state.db {report.human_bytes(row['file_bytes_before'])} -> "
                         f"{report.human_bytes(row['file_bytes_after'])}")
        if not app.quiet or (row.get("given_back_bytes") and not dry_run):
            report.line(line)
        for note in notes.get(row["home"], []) if not app.quiet else []:
            if not note.startswith("no free pages"):
                report.line(f"  {note}")
    if len(rows) > 1 and not app.quiet:
        report.line(f"{report.human_bytes(given_back(rows))} {'would be ' if dry_run else ''}given back in all")

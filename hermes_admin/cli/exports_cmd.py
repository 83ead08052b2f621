"""`restore FILE` and `exports list`: the exports every delete writes first, put back or shown."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import click

from hermes_admin import durations, report, tables
from hermes_admin.tables import Column
from hermes_admin.cli import mutate
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin.cli.maintain_cmd import absolute_dir, export_dir_option
from hermes_admin.cli.params import EXPORT_AGE, SIZE, at_least
from hermes_admin.profile.exports import export_id
from hermes_admin.protocol import ListExports, PruneExports, Restore
from hermes_admin.results import Run
from hermes_admin.shown import clean


def _owner_of(path: Path, profiles):
    """The profile whose default export folder holds `path` (compared as spelled, never resolved)."""
    folder = path.parent
    for profile in profiles:
        if folder == profile.home / ".hermes-admin" / "exports":
            return profile
    return None


def _by_id(app: App, profiles, wanted: str) -> dict:
    """The `exports list` row of the export whose id begins with `wanted` (one, or a usage error
    naming the matches): its file, and the profile whose folder holds it (`home`)."""
    answer = app.work(ListExports(), profiles, with_policy=True)
    matches = [r for r in answer.data.get("exports", []) if short_id(r["file"]).startswith(wanted)]
    if len(matches) != 1:
        raise click.UsageError(f"export id {wanted!r} matches " +  # names from the workers: escaped
                               (", ".join(clean(m["file"], 300) for m in matches[:5]) if matches else "no export"))
    return matches[0]


@click.command()
@click.argument("file", metavar="FILE|ID")
@click.option("--session", "sessions", multiple=True, metavar="ID",
              help="Only the unit holding this session id (repeatable).")
@click.option("--pin", is_flag=True,
              help="Pin the sessions put back, so that retention does not delete them again (unpin in Hermes).")
@click.option("--other-profile", is_flag=True,
              help="Restore an export another profile made (a renamed, moved or copied profile folder).")
@profile_option
@mutate.dry_run_option
@mutate.yes_option
@json_option
@pass_app
def restore(app: App, file, sessions, profiles, dry_run, yes, as_json, pin, other_profile):
    """Put the units of an export back; a session id that exists is left alone and reported.

    FILE is the export's path, or its id from `exports list`. A session past its retention window
    is deleted again by the next run unless put back with --pin. An export another profile made
    is refused unless --other-profile is given."""
    found = app.discover(profiles)
    row = None
    if not os.path.lexists(file) and re.fullmatch(r"[0-9a-f]{4,64}(-[0-9]+){0,2}", file):  # export_id
        row = _by_id(app, found.profiles, file)
        file = row["file"]
    path = Path(os.path.normpath(os.path.abspath(file)))
    owner = next((p for p in found.profiles if row and str(p.home) == row.get("home")), None) \
        or _owner_of(path, found.profiles)
    chosen = found.profiles if profiles else [p for p in [owner] if p]
    if not chosen and not os.path.lexists(path):  # a typo: said as one, not as a missing -p
        raise click.UsageError(f"{clean(path)}: no such file (FILE is an export's path, or its id from "
                               "`exports list`)")
    if len(chosen) != 1:
        raise click.UsageError(
            f"{clean(path)}: name the profile to restore into with -p (the file is not in a profile's "
            "default export folder)" if not chosen else
            f"-p selects {len(chosen)} profiles ({', '.join(clean(p.shown) for p in chosen)}); restore goes into one")
    if row and row.get("made_in"):  # asked for with --other-profile: said, not a warning (exit 0)
        (report.note if other_profile else report.warn)(f"{clean(path.name)} was made in the profile at {clean(row['made_in'])}, not in "
                    f"'{clean(chosen[0].shown)}'" + ("" if other_profile else ": --other-profile restores it there"))
    only = f" holding session(s) {', '.join(clean(s, 80) for s in sessions)}" if sessions else ""  # the limit asked for
    mutate.confirm(f"Restore the units of {path.name}{only} into profile '{chosen[0].shown}'"
                   f"{', pinned' if pin else ''}?", yes, dry_run)
    run = Run(dry_run=dry_run)
    run.merge(app.work(Restore(str(path), dry_run, tuple(sessions) or None, pin, other_profile), chosen))
    mutate.finish(run, as_json, "restore", app.verbose, app.quiet)


# On a narrow terminal the counts go first; profile, id and file stay whole.
COLUMNS = [Column("profile", whole=True), Column("id", whole=True), Column("created", drop=1),
           Column("units", drop=3), Column("sessions", drop=4), Column("messages", drop=5),
           Column("size", drop=2), Column("reasons", drop=6), Column("made in", drop=7), Column("file", whole=True)]

short_id = export_id  # the id at the end of the file's name (exports.export_id)


@click.group(cls=SuggestingGroup)
def exports():
    """The exports every delete writes first (restorable with `restore FILE`)."""


@exports.command("list")
@profile_option
@export_dir_option
@json_option
@pass_app
def list_cmd(app: App, profiles, export_dir, as_json: bool):
    """Every profile's exports, oldest first: id (the end of the file's name), when, what they hold,
    where; one made in another profile folder (renamed, moved or copied) shows that folder (`made in`)."""
    found = app.discover(profiles)
    answer = app.work(ListExports(absolute_dir(export_dir)), found.profiles, with_policy=True)
    rows = answer.data.get("exports", [])
    for row in rows:
        row["id"] = short_id(row["file"])
    labels = app.labels()
    elsewhere = [r for r in rows if r.get("made_in")]
    total = sum(r["bytes"] for r in rows)
    if as_json:
        report.emit_json({"exports": rows, "total_bytes": total, "warnings": answer.warnings, "errors": answer.errors})
    else:
        tables.show(COLUMNS, [
            [labels.get(r["home"], r["profile"]), r["id"], report.local_time(r.get("created")), r["units"],
             r["sessions"], r["messages"], report.human_bytes(r["bytes"]), ", ".join(r["reasons"]),
             r.get("made_in") or "-", r["file"]] for r in rows])
        if not tables.plain():
            report.line(f"{len(rows)} export(s), {report.human_bytes(total)}")
            if elsewhere:
                report.line(f"{len(elsewhere)} of them made in another profile folder ('made in': renamed, moved or "
                            "copied); pruned like the others, restored with `restore ID --other-profile`")
        for line in answer.warnings:
            report.warn(line)
    for message in answer.errors:
        report.error(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))


@exports.command("prune")
@click.option("--older-than", type=EXPORT_AGE, metavar="AGE",
              help="Remove exports made longer ago than AGE: 30 (days), 30d, 2w, 3mo (at least 1 day; 0, all, with --force).")
@click.option("--max-size", type=SIZE, metavar="SIZE",
              help="Remove each owner's oldest exports until hers take at most SIZE on disk (500M, 2G).")
@profile_option
@export_dir_option
@mutate.dry_run_option
@mutate.yes_option
@click.option("--force", is_flag=True, help="Allow --older-than under 1 day, or 0 (every export).")
@json_option
@pass_app
def prune(app: App, older_than, max_size, profiles, export_dir, dry_run, yes, force, as_json):
    """Remove old exports by age or total size, oldest first (each with its manifest), each named with
    why (age or budget)."""
    if older_than is None and max_size is None:
        raise click.UsageError("say what to remove: --older-than AGE and/or --max-size SIZE")
    at_least("export_keep_days", older_than, force, "--older-than",  # `1m` is a minute, not a month
             zero="every export, with --force")
    if older_than == 0 and not (force or dry_run):  # many tools read 0 as "keep forever": here it is "all"
        raise click.BadParameter("0 removes every export (the only restore copies); add --force if you mean it",
                                 param_hint="--older-than")
    found = app.discover(profiles)
    labels = app.labels()
    answer = app.work(ListExports(absolute_dir(export_dir)), found.profiles, with_policy=True)
    doomed = chosen(answer.data.get("exports", []), older_than, max_size, _owners(found), time.time())
    run = Run(dry_run=dry_run)
    run.add(*answer.problems)
    if doomed:
        mutate.confirm(f"Remove {len(doomed)} export(s), {report.human_bytes(sum(r['bytes'] for r in doomed))}?",
                       yes, dry_run)
    files: dict[str, list[str]] = {}
    for row in doomed:
        files.setdefault(row["home"], []).append(row["file"])
    # Every selected profile, even with nothing to remove: the root's run lock is taken as for any change,
    # so a prune never races a run that is writing its export.
    run.merge(app.work(PruneExports(dry_run, {home: tuple(names) for home, names in files.items()},
                                    absolute_dir(export_dir)), found.profiles, with_policy=True))
    removed = run.data.get("removed", [])
    why = {row["file"]: row["why"] for row in doomed}
    for row in removed:
        row["id"], row["why"] = short_id(row["file"]), why.get(row["file"])
    if as_json:
        report.emit_json({"dry_run": dry_run, "removed": removed, "freed_bytes": sum(r["bytes"] for r in removed),
                          "removed_by": {w: sum(1 for r in removed if r["why"] == w) for w in _WHY},
                          "errors": run.errors, "warnings": run.warnings})
    else:
        would = "would be " if dry_run else ""
        for row in removed:  # the limit it went by, then its own size: never one read as the other
            report.line(f"{labels.get(row['home'], row['profile'])}: {row['id']}  {row['file']}: {would}removed "
                        f"({_why(row['why'], older_than, max_size)}; it takes {report.human_bytes(row['bytes'])})")
        if not app.quiet or removed:
            report.line(f"{len(removed)} export(s), {report.human_bytes(sum(r['bytes'] for r in removed))} {would}removed")
    mutate.problems(run)
    raise click.exceptions.Exit(run.exit_code() if not app.failed_discovery(found, profiles) else 2)


_WHY = {"age": "older than --older-than", "budget": "over its owner's --max-size"}


def _why(why: str | None, older_than: float | None, max_size: int | None) -> str:
    """Why an export goes, with the limit given: `older than 30d (--older-than)`."""
    if why == "age" and older_than is not None:
        return f"older than {durations.shown_in('export_keep_days', older_than)} (--older-than)"
    if why == "budget" and max_size is not None:
        return f"its owner's exports take over {report.human_bytes(max_size)} (--max-size)"
    return _WHY.get(why, str(why))


def _owners(found) -> dict[str, int]:
    """home -> the uid whose exports share one --max-size budget (without root: the invoker's)."""
    return {str(home): owner.uid for home, owner in found.owners.items()}


def chosen(rows: list[dict], older_than: float | None, max_size: int | None, owners: dict[str, int],
           now: float) -> list[dict]:
    """The exports `exports prune` removes, oldest first. Each row came from its owner's worker, so
    from her files: a `created` in the future counts as now (and one missing or not a number as
    now too: never "oldest"), a size not a count of bytes as 0, and --max-size is a budget per owner,
    never one across users: nothing one user puts in her home makes another's exports go."""
    def created(row) -> float:
        when = row.get("created")
        if isinstance(when, bool) or not isinstance(when, (int, float)) or when != when:
            return now
        return min(float(when), now)

    def size(row) -> int:
        value = row.get("bytes")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    rows = sorted(rows, key=lambda r: (created(r), str(r.get("file"))))
    doomed = [dict(r, why="age") for r in rows if older_than is not None and created(r) < now - older_than * 86400]
    gone = {r["file"] for r in doomed}
    if max_size is not None:
        budgets: dict[object, list[dict]] = {}
        for row in rows:
            if row.get("file") not in gone:
                budgets.setdefault(owners.get(str(row.get("home")), ("home", row.get("home"))), []).append(row)
        for left in budgets.values():
            total = sum(size(r) for r in left)
            for row in left:  # oldest first
                if total <= max_size:
                    break
                doomed.append(dict(row, why="budget"))
                total -= size(row)
    return sorted(doomed, key=lambda r: (created(r), str(r.get("file"))))

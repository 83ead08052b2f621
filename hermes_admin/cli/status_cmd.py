"""`hermes-admin status`: the last run per profile and the next one scheduled; changes nothing.

The last run is what each profile's worker recorded as its owner (profile/run_record.py). The
next run comes from systemd (the timer's next elapse, system and user managers, as
`systemctl list-timers` shows it) and from the admin config's `schedule:` (the daemon's cron
times; an interval counts from the daemon's start, which is not known here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import click

from hermes_admin import report, tables
from hermes_admin.shown import clean
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.protocol import Status
from hermes_admin.tables import Column

TIMER = "hermes-admin.timer"  # the shipped timer's name (systemd/), asked of systemctl
# On a narrow terminal the command and the changes go first; the profile stays whole.
COLUMNS = [Column("profile", whole=True), Column("last run"), Column("command", drop=3), Column("result"),
           Column("changed", drop=2), Column("took", drop=4), Column("last error", cut=True)]


def changed_text(changed: dict) -> str:
    """`7 rows deleted by purge, 2 archived`: what a run's tasks changed, or `nothing`."""
    parts = []
    for task, counts in (changed or {}).items():
        if not isinstance(counts, dict):
            continue
        rows, files = counts.get("rows") or 0, counts.get("files") or 0
        if rows or files:
            verb = "archived" if task in ("auto_archive", "archive") else "deleted"
            parts.append(f"{report.COMMAND_OF.get(task, task)}: {rows} {verb}" + (f", {files} file(s)" if files else ""))
    return "; ".join(parts) or "nothing"


def timer_next() -> list[dict]:
    """The timer's next and last elapse, from the system manager and (not as root) the user's."""
    if not shutil.which("systemctl"):
        return []
    found = []
    for scope in ([] if os.geteuid() == 0 else ["--user"]) + ["--system"]:
        try:
            done = subprocess.run(["systemctl", scope, "show", TIMER, "-p", "LoadState", "-p", "ActiveState",
                                   "-p", "NextElapseUSecRealtime", "-p", "LastTriggerUSec"],
                                  capture_output=True, text=True, timeout=3)
        except (OSError, subprocess.TimeoutExpired):
            continue
        values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
        if done.returncode != 0 or values.get("LoadState") != "loaded":
            continue
        found.append({"source": f"systemd {scope.lstrip('-')} timer {TIMER}", "active": values.get("ActiveState"),
                      "next": values.get("NextElapseUSecRealtime") or None,
                      "last": values.get("LastTriggerUSec") or None})
    return found


def daemon_next(config, now: float) -> list[dict]:
    """When the daemon would run each task of `schedule:` next (its default: nightly at 03:30)."""
    from datetime import datetime

    from hermes_admin.host.daemon import DEFAULT_SCHEDULE, ScheduleError, trigger_for

    found = []
    for task, spec in (config.schedule or DEFAULT_SCHEDULE).items():
        try:
            trigger = trigger_for(task, spec)
        except ScheduleError as exc:
            found.append({"source": f"daemon schedule.{task}", "next": None, "problem": str(exc)})
            continue
        if isinstance(spec, dict) and "every_seconds" in spec:
            found.append({"source": f"daemon schedule.{task}", "next": None,
                          "every_seconds": spec["every_seconds"]})
            continue
        jitter = spec.get("jitter") if isinstance(spec, dict) else None
        if jitter:  # the time before its random delay (a trigger with jitter draws a new one every call)
            trigger = trigger_for(task, spec["cron"])
        moment = trigger.get_next_fire_time(None, datetime.fromtimestamp(now).astimezone())
        found.append({"source": f"daemon schedule.{task}", "next": moment.timestamp() if moment else None,
                      "jitter_seconds": jitter})
    return found


@click.command()
@profile_option
@json_option
@pass_app
def status(app: App, profiles, as_json: bool):
    """The last run per profile and the next scheduled one; changes nothing.

    Per profile: when the last run ended, its result, what it changed, how long it took and the last
    error; then the timer's or the daemon's next run. Reads what runs recorded."""
    now = time.time()
    found = app.discover(profiles)
    answer = app.work(Status(), found.profiles)
    labels = app.labels()
    rows = sorted(_checked(answer), key=lambda r: labels.get(r["home"], r["profile"]))
    upcoming = timer_next() + daemon_next(app.config, now)
    if as_json:
        report.emit_json({"profiles": rows, "next": upcoming, "errors": answer.errors, "warnings": answer.warnings})
    else:
        table = []
        for row in rows:
            last = row.get("last_run") or {}
            error = last.get("last_error") if isinstance(last.get("last_error"), dict) else {}
            table.append([labels.get(row["home"], row["profile"]),
                          report.local_time(last.get("finished")) or ("no run recorded" if row["store"] else "no store yet"),
                          last.get("command"), last.get("result"),
                          changed_text(last.get("changed")) if last else None,
                          f"{last['seconds']:.1f} s" if isinstance(last.get("seconds"), (int, float)) else None,
                          (f"{report.local_time(error.get('at'))}: {error.get('message')}" if error else None)])
        tables.show(COLUMNS, table)
        for item in upcoming:
            if item.get("problem"):
                text = item["problem"]
            elif item.get("every_seconds"):
                text = f"every {item['every_seconds']} s from the daemon's start (if it runs)"
            elif isinstance(item.get("next"), (int, float)):
                text = report.local_time(item["next"]) + (f" (+ up to {item['jitter_seconds']} s)"
                                                          if item.get("jitter_seconds") else "") + " (if the daemon runs)"
            else:
                text = f"{item.get('next') or 'not scheduled'}" + (f" ({item['active']})" if item.get("active") else "")
            # on stdout beside the table; piped, on stderr: stdout stays one profile a line
            click.echo(clean(f"next: {item['source']}: {text}"), err=tables.plain())
    if not as_json:
        for message in answer.warnings:
            report.warn(message)
    for message in answer.errors:
        report.error(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))


def _checked(answer) -> list[dict]:
    """The workers' rows, checked as the host checks all they say (protocol.py): a row of another
    shape is left out, and a run record of another shape is shown as none, with one line naming it."""
    from hermes_admin.profile.run_record import shape_problem

    rows = []
    for row in answer.data.get("status", []):
        if not (isinstance(row, dict) and isinstance(row.get("home"), str) and isinstance(row.get("profile"), str)):
            answer.warnings.append("a worker's status row of another shape; left out")
            continue
        last = row.get("last_run")
        if last is not None and shape_problem(last):
            answer.warnings.append(f"profile '{row['profile']}': {row['home']}: a run record of another shape "
                                   f"({shape_problem(last)}); not shown")
            row = dict(row, last_run=None)
        rows.append(dict(row, store=row.get("store") is True))
    return rows

"""`hermes-admin status`: per profile, the last run, the last run that changed something and the
newest error; then what runs next, and whether it will; changes nothing.

Modelled on `systemctl status`: a block per profile, each fact on a line of its own (nothing is
cut, however narrow the terminal), everything on stdout, and an exit code that says whether the
last runs went well. The runs are what each profile's worker recorded as its owner
(profile/run_record.py). What runs next comes from systemd (the shipped timer's next elapse, and
whether the shipped daemon's unit is active, system and user managers, each asked within a few
seconds) and from the admin config's `schedule:` (the daemon's cron times; an interval counts
from the daemon's start, which is not known here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import click

from hermes_admin import exitcodes, report
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.problems import WARNING, Problem
from hermes_admin.protocol import Status
from hermes_admin.results import Action

TIMER = "hermes-admin.timer"  # the shipped units' names (systemd/), asked of systemctl
DAEMON = "hermes-admin-daemon.service"
ASK_S = 3  # each question to systemctl: a hung manager never hangs `status`

# A profile's health is its last run's result; `status` exits with the code that run did (README
# "Exit codes"), the worst over the profiles shown, in the order `Run.exit_code` ranks them.
# A run cut short (Ctrl-C, systemd's SIGTERM) is a warning: what it did is done, the rest waits.
HEALTH = {"ok": ("ok", exitcodes.OK), "warnings": ("warnings", exitcodes.WARNINGS),
          "interrupted": ("interrupted", exitcodes.WARNINGS),
          "locked": ("locked", exitcodes.LOCKED), "error": ("failed", exitcodes.PROFILE_FAILED)}
RANK = (exitcodes.OK, exitcodes.WARNINGS, exitcodes.LOCKED, exitcodes.PROFILE_FAILED)

# How a task's rows changed, as a person says it (a task without an action deleted them).
_DONE = {Action.DELETE: "deleted", Action.ARCHIVE: "archived", Action.CLOSE: "closed",
         Action.REPAIR: "deleted by repair", Action.NOTICED: "found deleted outside hermes-admin, announced"}


def changed_text(changed: dict) -> str:
    """`purge: 7 deleted, 2 file(s); close_stale: 4 closed`: what a run's tasks did, or `nothing changed`."""
    from hermes_admin.profile.run_record import ACTIONS

    parts = []
    for task, counts in (changed or {}).items():
        rows, files = counts.get("rows") or 0, counts.get("files") or 0
        if rows or files:
            action = counts.get("action") if counts.get("action") in ACTIONS else Action.DELETE
            parts.append(f"{report.COMMAND_OF.get(task, task)}: {rows} {_DONE[action]}"
                         + (f", {files} file(s)" if files else ""))
    return "; ".join(parts) or "nothing changed"


def _show(scope: str, unit: str, *properties: str) -> dict | None:
    """`systemctl show` of a unit's properties in one manager, or None when it cannot answer in time
    (no systemd, no user manager, a hung bus)."""
    args = ["systemctl", scope, "show", unit, "-p", "LoadState", *(a for p in properties for a in ("-p", p))]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=ASK_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _managers(unit: str, *properties: str) -> tuple[list[tuple[str, dict]], bool]:
    """The managers (system, and the user's when not root) where `unit` is loaded, with its
    properties; and whether any manager answered at all."""
    if not shutil.which("systemctl"):
        return [], False
    loaded, answered = [], False
    for scope in ([] if os.geteuid() == 0 else ["--user"]) + ["--system"]:
        values = _show(scope, unit, *properties)
        answered = answered or values is not None
        if values and values.get("LoadState") == "loaded":
            loaded.append((scope.lstrip("-"), values))
    return loaded, answered


def timer_next() -> list[dict]:
    """The timer's next and last elapse, in each manager where it is loaded; one item saying it is
    nowhere (or that systemd did not answer) otherwise."""
    loaded, answered = _managers(TIMER, "ActiveState", "NextElapseUSecRealtime", "LastTriggerUSec")
    if not loaded:
        return [{"source": f"systemd timer {TIMER}", "next": None,
                 "active": "not loaded" if answered else "systemd did not answer"}]
    return [{"source": f"systemd {scope} timer {TIMER}", "active": values.get("ActiveState"),
             "next": values.get("NextElapseUSecRealtime") or None, "last": values.get("LastTriggerUSec") or None}
            for scope, values in loaded]


def daemon_state() -> dict:
    """Whether the shipped daemon's unit runs: `{"unit": "system"|"user"|None, "active": state}`;
    `active` None when systemd did not answer."""
    loaded, answered = _managers(DAEMON, "ActiveState")
    for scope, values in sorted(loaded, key=lambda found: found[1].get("ActiveState") != "active"):
        return {"unit": scope, "active": values.get("ActiveState")}
    return {"unit": None, "active": "not loaded" if answered else None}


def daemon_next(config, now: float, state: dict | None = None) -> list[dict]:
    """When the daemon would run each task of `schedule:` next (its default: nightly at 03:30), and
    whether it runs (`daemon` as `daemon_state` found it)."""
    from datetime import datetime

    from hermes_admin.host.daemon import DEFAULT_SCHEDULE, ScheduleError, trigger_for

    found = []
    for task, spec in (config.schedule or DEFAULT_SCHEDULE).items():
        item = {"source": f"daemon schedule.{task}", "next": None, "daemon": state}
        try:
            trigger = trigger_for(task, spec)
        except ScheduleError as exc:
            found.append(dict(item, problem=str(exc)))
            continue
        if isinstance(spec, dict) and "every_seconds" in spec:
            found.append(dict(item, every_seconds=spec["every_seconds"]))
            continue
        jitter = spec.get("jitter") if isinstance(spec, dict) else None
        if jitter:  # the time before its random delay (a trigger with jitter draws a new one every call)
            trigger = trigger_for(task, spec["cron"])
        moment = trigger.get_next_fire_time(None, datetime.fromtimestamp(now).astimezone())
        found.append(dict(item, next=moment.timestamp() if moment else None, jitter_seconds=jitter))
    return found


def health(row: dict) -> tuple[str, int]:
    """A profile's state in a word, and the exit code it asks for."""
    last = row.get("last_run")
    if last:
        return HEALTH[last["result"]]
    return ("no store yet" if not row["store"] else "no run recorded"), exitcodes.OK


@click.command()
@profile_option
@json_option
@pass_app
def status(app: App, profiles, as_json: bool):
    """The last run per profile and the next scheduled one; changes nothing.

    Per profile: its last run (when, which command, result, how long, what it changed), the last
    run that changed something, and the newest error (the last run's, or dated as older); then the
    timer's and the daemon's next run, and whether they are active. Exits with the code of the worst
    last run shown (0 when every one went well). Reads what runs recorded."""
    now = time.time()
    found = app.discover(profiles)
    answer = app.work(Status(), found.profiles)
    labels = app.labels()
    found_at = {str(p.home): n for n, p in enumerate(found.profiles)}  # as every command lists them: each root's
    rows = sorted(_checked(answer), key=lambda r: found_at.get(r["home"], len(found_at)))  # default, then by name
    upcoming = timer_next() + daemon_next(app.config, now, daemon_state())
    worst = max((health(row)[1] for row in rows), key=RANK.index, default=exitcodes.OK)
    if as_json:
        report.emit_json({"profiles": [dict(row, health=health(row)[0]) for row in rows], "next": upcoming,
                          "errors": answer.errors, "warnings": answer.warnings})
    else:
        # -q: only what needs a look (for a check from a timer or a monitor): the profiles whose last
        # run did not go well, and a schedule that cannot be read; silence when all is well.
        shown = [row for row in rows if not app.quiet or health(row)[1] != exitcodes.OK]
        for row in shown:
            for text in profile_lines(row, labels.get(row["home"], row["profile"])):
                report.line(text)
        if shown and not app.quiet:
            report.line("")
        for item in upcoming if not app.quiet else [item for item in upcoming if item.get("problem")]:
            report.line(f"next: {item['source']}: {next_text(item)}")
        for message in answer.warnings:
            report.warn(message)
    for message in answer.errors:
        report.error(message)
    own = app.exit_code(answer, found, profiles)
    raise click.exceptions.Exit(own if own != exitcodes.OK else worst)


def profile_lines(row: dict, label: str) -> list[str]:
    """A profile's block: a head line with its state, then one line per fact, never cut (a long
    error goes on its own line, which the terminal wraps)."""
    state, _ = health(row)
    lines = [f"{label} ({row['home']}): {state}"]
    last, change, error = row.get("last_run"), row.get("last_change"), row.get("last_error")
    if last:
        lines.append(f"  last run:    {_run_text(last)}: {changed_text(last['changed'])}")
        lines += [f"    error: {line}" for line in last["errors"]]
        lines += [f"    warning: {line}" for line in last["warnings"]]
    if change is not None and change is not last:
        lines.append(f"  last change: {_run_text(change)}: {changed_text(change['changed'])}")
    elif last and not change:
        lines.append("  last change: none recorded")
    if error and not error["in_last_run"]:
        lines.append(f"  last error:  {report.local_time(error['at'])} {error['command']}, an older run's "
                     "(the runs since had none):")
        lines.append(f"    {error['message']}")
    return lines


def _run_text(run: dict) -> str:
    """`2026-12-03 03:31 run, ok, took 41.2 s`."""
    return f"{report.local_time(run['finished'])} {run['command']}, {run['result']}, took {run['seconds']:.1f} s"


def next_text(item: dict) -> str:
    """When a timer or the daemon runs next, and whether anything will run it."""
    if item.get("problem"):
        return item["problem"]
    if "daemon" not in item:  # a timer, as systemd says it
        if item.get("next"):
            return f"{item['next']} ({item.get('active')})"
        return f"{'unknown' if item.get('active') == 'systemd did not answer' else 'none'} ({item.get('active')})"
    if item.get("every_seconds"):
        when = f"every {item['every_seconds']} s from the daemon's start"
    elif isinstance(item.get("next"), (int, float)):
        when = report.local_time(item["next"]) + (f" (+ up to {item['jitter_seconds']} s)"
                                                  if item.get("jitter_seconds") else "")
    else:
        when = "never"
    state = item.get("daemon") or {}
    if state.get("active") == "active":
        return f"{when} ({state['unit']} unit {DAEMON} active)"
    if state.get("active") is None:
        return f"{when}, if a daemon runs (systemd did not answer)"
    if state.get("unit"):
        return f"none: the {state['unit']} unit {DAEMON} is {state['active']} (it would run {when})"
    return f"none: no {DAEMON} is loaded (a daemon started otherwise would run {when})"


def _checked(answer) -> list[dict]:
    """The workers' rows, checked as the host checks all they say (protocol.py): a row of another
    shape is left out, and runs of another shape are shown as none, with one line naming them."""
    from hermes_admin.profile.run_record import history_problem, overview

    rows = []
    for row in answer.data.get("status", []):
        if not (isinstance(row, dict) and isinstance(row.get("home"), str) and isinstance(row.get("profile"), str)):
            answer.add(Problem(WARNING, "a worker's status row of another shape; left out", kind="status_row"))
            continue
        runs = row.get("runs")
        wrong = history_problem(runs)
        if wrong:
            answer.add(Problem(WARNING, f"a run record of another shape ({wrong}); not shown", profile=row["profile"],
                               home=row["home"], kind="run_record", path=row["home"]))
            runs = []
        rows.append({"profile": row["profile"], "home": row["home"], "store": row.get("store") is True,
                     "runs": runs, **overview(runs)})
    return rows

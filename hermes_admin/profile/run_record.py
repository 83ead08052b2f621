"""What the last runs did in a profile, for `hermes-admin status`.

Written by the profile's worker, as the home's owner, into `<home>/.hermes-admin/last-run.json`
at the end of every maintenance command that was not a dry run. It keeps a short history, not
only the last run: the last `KEEP` runs, and beyond them the newest run that changed something
and the newest that failed, so a big nightly run is still there after a day of idle hourly ones
(`trimmed`). Each run: when it began, how long it took, its result (ok, warnings, interrupted,
locked, error), what each task changed (and
how: deleted, closed, archived), its errors and warnings (a few, bounded). Like the quick-check
record it buys no durability, so it is written without fsync; lost or garbled, it only means
`status` says "no run recorded". Never through a link (O_NOFOLLOW), never by root.

A user may write anything there: `shape_problem` checks a file where the worker reads it, and
`history_problem` the runs again where the host receives them.
"""

from __future__ import annotations

import math
import time

from hermes_admin import exitcodes
from hermes_admin import problems as said
from hermes_admin.model import Profile
from hermes_admin.profile.state_folder import STATE_DIR, read_record, write_record
from hermes_admin.results import Action, Run, Status, warned

RECORD = "last-run.json"  # in <home>/.hermes-admin/, read by `status`
KEEP = 10  # the last runs kept; with the newest changing and failing ones past them, at most KEEP + 2
MAX_RUNS = KEEP + 2
MAX_RECORD = 256 * 1024  # MAX_RUNS runs of a few bounded lines; a larger file is not ours
MAX_LINES = 5  # errors and warnings kept per run: enough to say what went wrong
# what a task's engine call did to its rows
ACTIONS = (Action.DELETE, Action.ARCHIVE, Action.CLOSE, Action.REPAIR, Action.NOTICED)


# A run's result as `status` words it, from the exit code its problems ask for (problems.exit_code).
OUTCOMES = {exitcodes.PROFILE_FAILED: "error", exitcodes.LOCKED: "locked", exitcodes.WARNINGS: "warnings",
            exitcodes.OK: "ok"}


def summarise(run: Run, before: tuple[int, int], profile: Profile, command: str, started: float,
              interrupted: bool = False) -> dict:
    """What `profile`'s part of `run` (results and problems past `before`) did: one run of the history.
    `interrupted`: a stop (Ctrl-C, systemd's SIGTERM) came while it ran, so some of its work waits."""
    results, found = run.results[before[0]:], run.problems[before[1]:]
    errors, warnings, locked = (said.texts(found, said.ERROR), said.texts(found, said.WARNING),
                                said.texts(found, said.LOCKED))
    changed = {}
    for result in results:
        if result.task is None and result.status == Status.SKIPPED:
            continue
        entry = changed.setdefault(result.task or result.action, {"rows": 0, "units": 0, "files": 0})
        if result.action in ACTIONS and result.action != Action.DELETE:  # how status words it ("4 closed")
            entry["action"] = result.action
        entry["rows"] += result.rows
        entry["units"] += len(result.done)
        entry["files"] += len(result.files_removed)
        warnings += [failure.text(profile.shown) for failure in result.hook_failures]
    code = said.exit_code(found, warned=warned(results))
    # A run cut short is no "ok": what it did not reach waits for the next run, and `status` says so.
    outcome = "interrupted" if interrupted and code in (exitcodes.OK, exitcodes.WARNINGS) else OUTCOMES[code]
    finished = time.time()
    return {"command": command, "started": started, "finished": finished,
            "seconds": round(finished - started, 3), "result": outcome, "changed": changed,
            "errors": [e[:500] for e in (errors + locked)[:MAX_LINES]],
            "warnings": [w[:500] for w in warnings[:MAX_LINES]]}


def write(profile: Profile, run: dict) -> None:
    """Add this run to the history (never raises: the worst is a `status` that knows less)."""
    runs = read(profile)[0] or []
    write_record(profile, RECORD, "the runs' record", {"format": 2, "runs": trimmed(runs + [run])})


def read(profile: Profile) -> tuple[list[dict] | None, str | None]:
    """The runs recorded, oldest first, read where they are (never made here, never waited on), or
    None; and why a file that is there could not be used (of any other shape than ours), naming it."""
    record, problem = read_record(profile, RECORD, MAX_RECORD)
    if record is None:
        return None, problem
    wrong = shape_problem(record)
    if wrong:
        return None, f"{profile.home / STATE_DIR / RECORD}: not a record of ours ({wrong}); ignored"
    if record["format"] == 1:  # an earlier version's record: its one run, its kept error left out
        return [{k: v for k, v in record.items() if k not in ("format", "last_error")}], None
    return record["runs"], None


def changed_something(run: dict) -> bool:
    return any(counts.get("rows") or counts.get("files") for counts in run["changed"].values())


def failed(run: dict) -> bool:
    return bool(run["errors"])


def trimmed(runs: list[dict]) -> list[dict]:
    """The last KEEP runs, and the newest that changed something and the newest that failed when
    they are older: what `status` shows stays, whatever ran since. Oldest first."""
    kept, older = runs[-KEEP:], runs[:-KEEP]
    for wanted in (changed_something, failed):
        if not any(wanted(r) for r in kept):
            kept = [r for r in older if wanted(r)][-1:] + kept
    return sorted(kept, key=lambda r: r["finished"])


def overview(runs: list[dict]) -> dict:
    """What `status` shows of a profile's history: the last run, the last one that changed
    something, and the newest error with its time, saying whether the last run is the one that had it."""
    last = runs[-1] if runs else None
    change = next((r for r in reversed(runs) if changed_something(r)), None)
    failure = next((r for r in reversed(runs) if failed(r)), None)
    error = None if failure is None else {
        "at": failure["finished"], "command": failure["command"], "message": failure["errors"][0],
        "in_last_run": failure is last}
    return {"last_run": last, "last_change": change, "last_error": error}


RESULTS = ("ok", "warnings", "interrupted", "locked", "error")
MAX_MOMENT = 253402300800  # 10000-01-01: later is no time a clock can say


def shape_problem(record) -> str | None:
    """What in a file read as a run record is not of the shape `write` writes (or the one run
    an earlier version wrote, format 1)."""
    if not isinstance(record, dict) or record.get("format") not in (1, 2):
        return "format: not 1 or 2"
    if record["format"] == 1:
        last = record.get("last_error")
        if last is not None and not (isinstance(last, dict) and set(last) == {"at", "message"}
                                     and _moment(last["at"]) and _short(last["message"], 500)):
            return "last_error: not a time and a line"
        return run_problem({k: v for k, v in record.items() if k not in ("format", "last_error")})
    if set(record) != {"format", "runs"}:
        return "keys: not format and runs"
    return history_problem(record["runs"])


def history_problem(runs) -> str | None:
    """What in a list of runs is not of the shape `summarise` writes: checked again by the host."""
    if not isinstance(runs, list) or len(runs) > MAX_RUNS:
        return f"runs: not a list of at most {MAX_RUNS}"
    for run in runs:
        wrong = run_problem(run)
        if wrong:
            return wrong
    return None


def run_problem(run) -> str | None:
    if not isinstance(run, dict):
        return "a run: not an object"
    for key in ("started", "finished"):
        if not _moment(run.get(key)):
            return f"{key}: not a time"
    if not _number(run.get("seconds"), 1e9):
        return "seconds: not a duration"
    if run.get("result") not in RESULTS:
        return "result: not one of " + ", ".join(RESULTS)
    if not _short(run.get("command"), 200):
        return "command: not a short text"
    changed = run.get("changed")
    if not isinstance(changed, dict) or len(changed) > 50 or not all(
            _short(task, 64) and isinstance(counts, dict) and set(counts) <= {"rows", "units", "files", "action"}
            and all(_count(counts.get(k, 0)) for k in ("rows", "units", "files"))
            and counts.get("action", Action.DELETE) in ACTIONS for task, counts in changed.items()):
        return "changed: not counts per task"
    for key in ("errors", "warnings"):
        lines = run.get(key)
        if not isinstance(lines, list) or len(lines) > MAX_LINES or not all(_short(line, 500) for line in lines):
            return f"{key}: not a few lines"
    return None


def _number(value, limit: float) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= limit)


def _moment(value) -> bool:
    return _number(value, MAX_MOMENT)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 53


def _short(value, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit

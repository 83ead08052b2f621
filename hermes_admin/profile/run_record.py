"""What the last changing run did in a profile, for `hermes-admin status`.

Written by the profile's worker, as the home's owner, into `<home>/.hermes-admin/last-run.json`
at the end of every maintenance command that was not a dry run: when it began, how long it took,
its result, what each task changed, its errors and warnings (a few, bounded), and the last error
of any run (kept from the record before when this run had none, with its time). Like the
quick-check record it buys no durability, so it is written without fsync; lost or garbled, it
only means `status` says "no run recorded". Never through a link (O_NOFOLLOW), never by root.
"""

from __future__ import annotations

import math
import time

from hermes_admin.profile.engine.state_folder import STATE_DIR, read_record, write_record
from hermes_admin.protocol import Profile
from hermes_admin.results import Run

RECORD = "last-run.json"  # in <home>/.hermes-admin/, read by `status`
MAX_RECORD = 64 * 1024  # a record holds a few bounded lines; a larger one is not ours
MAX_LINES = 5  # errors and warnings kept in the record: enough to say what went wrong


def summarise(run: Run, before: tuple[int, int, int, int], command: str, started: float) -> dict:
    """What this profile's part of `run` (entries past `before`) did."""
    results, errors, warnings, locked = (run.results[before[0]:], run.errors[before[1]:],
                                         run.warnings[before[2]:], run.locked[before[3]:])
    changed = {}
    for result in results:
        if result.task is None and result.status == "skipped":
            continue
        entry = changed.setdefault(result.task or result.action, {"rows": 0, "units": 0, "files": 0})
        entry["rows"] += result.rows
        entry["units"] += len(result.done)
        entry["files"] += len(result.files_removed)
        for failure in result.hook_failures:
            warnings.append(failure)
    outcome = ("error" if errors else "locked" if locked else
               "warnings" if warnings or any(len(r.skipped) or len(r.files_skipped) for r in results) else "ok")
    finished = time.time()
    return {"format": 1, "command": command, "started": started, "finished": finished,
            "seconds": round(finished - started, 3), "result": outcome, "changed": changed,
            "errors": [e[:500] for e in (errors + locked)[:MAX_LINES]],
            "warnings": [w[:500] for w in warnings[:MAX_LINES]]}


def write(profile: Profile, record: dict) -> None:
    """Replace the record (never raises: the worst is a `status` that knows less)."""
    previous = read(profile) or {}
    problems = record["errors"]
    if problems:
        record["last_error"] = {"at": record["finished"], "message": problems[0]}
    elif isinstance(previous.get("last_error"), dict):
        record["last_error"] = previous["last_error"]
    write_record(profile, RECORD, "the last run's record", record)


def read(profile: Profile, problems: list[str] | None = None) -> dict | None:
    """The record, read where it is (never made here, never waited on), or None; a record of any
    other shape than ours is one line in `problems` naming the file."""
    record = read_record(profile, RECORD, MAX_RECORD, problems)
    if record is None:
        return None
    wrong = shape_problem(record)
    if wrong:
        if problems is not None:
            problems.append(f"{profile.home / STATE_DIR / RECORD}: not a record of ours ({wrong}); ignored")
        return None
    return record


RESULTS = ("ok", "warnings", "locked", "error")
MAX_MOMENT = 253402300800  # 10000-01-01: later is no time a clock can say


def shape_problem(record) -> str | None:
    """What in a run record is not of the shape `summarise` writes (a user may write anything
    there): checked where the worker reads it and again where the host receives it."""
    if not isinstance(record, dict) or record.get("format") != 1:
        return "format: not 1"
    for key in ("started", "finished"):
        if not _moment(record.get(key)):
            return f"{key}: not a time"
    if not _number(record.get("seconds"), 1e9):
        return "seconds: not a duration"
    if record.get("result") not in RESULTS:
        return "result: not one of " + ", ".join(RESULTS)
    if not _short(record.get("command"), 200):
        return "command: not a short text"
    changed = record.get("changed")
    if not isinstance(changed, dict) or len(changed) > 50 or not all(
            _short(task, 64) and isinstance(counts, dict) and set(counts) <= {"rows", "units", "files"}
            and all(_count(v) for v in counts.values()) for task, counts in changed.items()):
        return "changed: not counts per task"
    for key in ("errors", "warnings"):
        lines = record.get(key)
        if not isinstance(lines, list) or len(lines) > MAX_LINES or not all(_short(line, 500) for line in lines):
            return f"{key}: not a few lines"
    last = record.get("last_error")
    if last is not None and not (isinstance(last, dict) and set(last) == {"at", "message"}
                                 and _moment(last["at"]) and _short(last["message"], 500)):
        return "last_error: not a time and a line"
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

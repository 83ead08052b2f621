"""Prometheus textfile metrics, written atomically after each run (design §9).

For node_exporter's textfile collector: the file is written beside its final
name and renamed over it, so a scrape never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from hermes_admin.results import Run

HELP = {
    "hermes_admin_sessions": ("gauge", "Session rows in the profile's store after the run."),
    "hermes_admin_messages": ("gauge", "Message rows in the profile's store after the run."),
    "hermes_admin_store_bytes": ("gauge", "Size of state.db in bytes."),
    "hermes_admin_wal_bytes": ("gauge", "Size of state.db-wal in bytes."),
    "hermes_admin_deleted": ("gauge", "Session rows deleted by the last run, by reason."),
    "hermes_admin_archived": ("gauge", "Session rows archived by the last run."),
    "hermes_admin_skipped": ("gauge", "Units left alone by the last run (live, guarded, changed), by task."),
    "hermes_admin_store_detached_holders": ("gauge", "Processes writing into the profile's store files after "
                                            "they were deleted or replaced, or holding its -shm without locks "
                                            "(restart them; the store is not maintained meanwhile)."),
    "hermes_admin_store_unlocked_holders": ("gauge", "Processes holding the profile's store without their SQLite "
                                            "lock on state.db (at risk from any careless SQLite client)."),
    "hermes_admin_run_errors": ("gauge", "Errors of the last run for the profile (store or config unusable)."),
    "hermes_admin_run_seconds": ("gauge", "Wall time of each task in the last run."),
    "hermes_admin_last_run_timestamp_seconds": ("gauge", "When the last run finished (Unix time)."),
}


def _labels(**labels) -> str:
    def esc(v):
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in labels.items()) + "}" if labels else ""


def render(run: Run, summaries: list[dict], finished: float | None = None) -> str:
    """The textfile's content: HELP/TYPE lines, then one sample per line."""
    samples: dict[str, list[str]] = {name: [] for name in HELP}

    def add(name, value, **labels):
        # repr() keeps every digit: `:g` would round a Unix time to minutes.
        samples[name].append(f"{name}{_labels(**labels)} {value!r}")

    # Rows come from workers: only well-formed ones become samples (a number where a number goes).
    summaries = [row for row in summaries if isinstance(row, dict) and isinstance(row.get("name"), str)
                 and isinstance(row.get("home"), str)
                 and all(isinstance(row.get(k), (int, type(None))) and not isinstance(row.get(k), bool)
                         for k in ("sessions", "messages", "store_bytes", "wal_bytes"))]
    for row in summaries:
        if row.get("ok") and row.get("store") and row["sessions"] is not None and row["messages"] is not None:
            profile = row["name"]
            add("hermes_admin_sessions", row["sessions"], profile=profile, home=row["home"])
            add("hermes_admin_messages", row["messages"], profile=profile, home=row["home"])
            add("hermes_admin_store_bytes", row["store_bytes"] or 0, profile=profile, home=row["home"])
            add("hermes_admin_wal_bytes", row["wal_bytes"] or 0, profile=profile, home=row["home"])
    for row in summaries:  # counted by the host from /proc (cli/context.App.work), for every profile
        for name in ("detached_holders", "unlocked_holders"):
            if isinstance(row.get(name), int):
                add(f"hermes_admin_store_{name}", row[name], profile=row["name"], home=row["home"])
    # Every series is keyed by the profile's home as well as its name: two roots' `default`s never
    # merge, and nothing is summed across roots.
    deleted: dict[tuple[str, str, str], int] = {}
    archived: dict[tuple[str, str], int] = {}
    for result in run.results:
        if result.status != "done":
            continue
        home = result.home or ""
        if result.action == "delete":
            key = (result.profile, home, result.reason or "delete")
            deleted[key] = deleted.get(key, 0) + result.rows
        elif result.action == "archive":
            archived[(result.profile, home)] = archived.get((result.profile, home), 0) + result.rows
    per_task: dict[tuple[str, str, str], list] = {}
    for result in run.results:
        if result.task:  # one series per (profile, home, task), whatever the number of engine calls
            entry = per_task.setdefault((result.profile, result.home or "", result.task), [0, 0.0])
            entry[0] += len(result.skipped)
            entry[1] += result.seconds
    for (profile, home, task), (skipped, seconds) in sorted(per_task.items()):
        add("hermes_admin_skipped", skipped, profile=profile, home=home, task=task)
        add("hermes_admin_run_seconds", round(seconds, 3), profile=profile, home=home, task=task)
    for (profile, home, reason), rows in sorted(deleted.items()):
        add("hermes_admin_deleted", rows, profile=profile, home=home, reason=reason)
    for (profile, home), rows in sorted(archived.items()):
        add("hermes_admin_archived", rows, profile=profile, home=home)
    for row in summaries:
        label = row.get("label") or row["name"]
        count = sum(1 for line in run.errors if f"profile '{label}'" in line)
        add("hermes_admin_run_errors", count, profile=row["name"], home=row["home"])
    add("hermes_admin_last_run_timestamp_seconds", round(finished or time.time(), 3))
    lines = []
    for name, (kind, text) in HELP.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"] + samples[name]
    return "\n".join(lines) + "\n"


def write(path: Path, content: str) -> None:
    """Atomically: a temporary file in the same folder, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise

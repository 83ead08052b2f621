"""Prometheus textfile metrics, written after each run (docs/design.md §12), with prometheus_client.

A registry of gauges, filled from the run's report, written by `write_to_textfile` (beside the
target, then renamed over it: a scrape never sees half a file). Gauges, not counters: each file
is the state after one run, and node_exporter's textfile collector serves it as it is; the one
value that must outlive a failing run, each profile's last success, is carried over from the file
the run replaces.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest, write_to_textfile

from hermes_admin.results import Run

LAST_SUCCESS = "hermes_admin_last_success_timestamp_seconds"  # read back from the last file, so a failing run keeps it
_PROFILE = ("profile", "home")  # every series' labels: two roots' profiles of one name never merge


def _well_formed(summaries: list) -> list[dict]:
    """Rows come from workers: only well-formed ones become samples (a number where a number goes)."""
    return [row for row in summaries if isinstance(row, dict) and isinstance(row.get("name"), str)
            and isinstance(row.get("home"), str)
            and all(isinstance(row.get(k), (int, type(None))) and not isinstance(row.get(k), bool)
                    for k in ("sessions", "messages", "store_bytes", "wal_bytes"))]


def registry(run: Run, summaries: list[dict], finished: float | None = None,
             previous: dict[tuple[str, str], float] | None = None) -> CollectorRegistry:
    """The run as metrics. Every series is keyed by the profile's home as well as its name: two
    roots' `default`s never merge, and nothing is summed across roots."""
    finished = finished or time.time()
    reg = CollectorRegistry(auto_describe=True)

    def gauge(name, text, labels=_PROFILE):
        return Gauge(name, text, labels, registry=reg)

    sessions = gauge("hermes_admin_sessions", "Session rows in the profile's store after the run.")
    messages = gauge("hermes_admin_messages", "Message rows in the profile's store after the run.")
    store = gauge("hermes_admin_store_bytes", "Size of state.db in bytes.")
    wal = gauge("hermes_admin_wal_bytes", "Size of state.db-wal in bytes.")
    deleted = gauge("hermes_admin_deleted", "Session rows deleted by the last run, by reason.", (*_PROFILE, "reason"))
    archived = gauge("hermes_admin_archived", "Session rows archived by the last run.")
    skipped = gauge("hermes_admin_skipped", "Units left alone by the last run (live, guarded, changed), by task.",
                    (*_PROFILE, "task"))
    errors = gauge("hermes_admin_run_errors", "Errors of the last run for the profile (store or config unusable).")
    plugin_failures = gauge("hermes_admin_plugin_failures",
                            "Plugin callbacks that failed (raised, timed out, died) in the last run, by plugin.",
                            (*_PROFILE, "plugin"))
    seconds = gauge("hermes_admin_run_seconds", "Wall time of each task in the last run.", (*_PROFILE, "task"))
    detached = gauge("hermes_admin_store_detached_holders",
                     "Processes writing into the profile's store files after they were deleted or replaced, or "
                     "holding its -shm without locks (restart them; the store is not maintained meanwhile).")
    unlocked = gauge("hermes_admin_store_unlocked_holders",
                     "Processes holding the profile's store without their SQLite lock on state.db (at risk from "
                     "any careless SQLite client).")
    last_success = gauge(LAST_SUCCESS, "When a run last finished in the profile without an error (Unix time).")
    last_run = Gauge("hermes_admin_last_run_timestamp_seconds", "When the last run finished (Unix time).",
                     registry=reg)

    rows = _well_formed(summaries)
    for row in rows:
        if row.get("ok") and row.get("store") and row["sessions"] is not None and row["messages"] is not None:
            key = (row["name"], row["home"])
            sessions.labels(*key).set(row["sessions"])
            messages.labels(*key).set(row["messages"])
            store.labels(*key).set(row["store_bytes"] or 0)
            wal.labels(*key).set(row["wal_bytes"] or 0)
    for row in rows:  # counted by the host from /proc (host/runner.Host.work), for every profile
        for name, gauge_of in (("detached_holders", detached), ("unlocked_holders", unlocked)):
            if isinstance(row.get(name), int) and not isinstance(row.get(name), bool):
                gauge_of.labels(row["name"], row["home"]).set(row[name])
    for result in run.results:
        key = (result.profile, result.home or "")
        if result.task:  # one series per (profile, home, task), whatever the number of engine calls
            skipped.labels(*key, result.task).inc(len(result.skipped))
            seconds.labels(*key, result.task).inc(round(result.seconds, 3))
        for line in result.hook_failures:
            plugin = line.split(": plugin ", 1)[1].split(":", 1)[0] if ": plugin " in line else "?"
            plugin_failures.labels(*key, plugin).inc()
        if result.status != "done":
            continue
        if result.action == "delete":
            deleted.labels(*key, result.reason or "delete").inc(result.rows)
        elif result.action == "archive":
            archived.labels(*key).inc(result.rows)
    for row in rows:
        label = row.get("label") or row["name"]
        count = sum(1 for line in run.errors + run.locked if f"profile '{label}'" in line)
        errors.labels(row["name"], row["home"]).set(count)
        before = (previous or {}).get((row["name"], row["home"]))
        if count == 0:
            last_success.labels(row["name"], row["home"]).set(round(finished, 3))
        elif before is not None:
            last_success.labels(row["name"], row["home"]).set(before)
    last_run.set(round(finished, 3))
    return reg


def render(run: Run, summaries: list[dict], finished: float | None = None,
           previous: dict[tuple[str, str], float] | None = None) -> str:
    return generate_latest(registry(run, summaries, finished, previous)).decode()


def last_successes(path: Path) -> dict[tuple[str, str], float]:
    """Each profile's last success as the file this run replaces says it (nothing, if unreadable)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = Path(path).read_text()
        return {(s.labels.get("profile", ""), s.labels.get("home", "")): s.value
                for family in text_string_to_metric_families(text) if family.name == LAST_SUCCESS
                for s in family.samples}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def write(path: Path, run: Run, summaries: list[dict]) -> None:
    """The metrics of `run`, replacing the file at once; readable by the node exporter's user (0644,
    whatever the service's UMask), so the umask is set only around the write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    reg = registry(run, summaries, previous=last_successes(path))
    old = os.umask(0o022)
    try:
        write_to_textfile(str(path), reg)
    finally:
        os.umask(old)

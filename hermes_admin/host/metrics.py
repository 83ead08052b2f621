"""Prometheus textfile metrics, written after each run (docs/design.md §12), with prometheus_client.

A registry filled from the run's report, written by `write_to_textfile` (beside the target, then
renamed over it: a scrape never sees half a file). What a run finds (sessions, bytes, holders, how
long each task took, when it ended) is a gauge. What runs do (rows deleted and archived, units
skipped, errors, plugin failures) is a counter, `_total`, as Prometheus names them: each run adds
to the totals of the file it replaces, so `increase(hermes_admin_deleted_sessions_total[1d])`
says what a day deleted, whatever the number of runs (a lost file is a counter reset, which
Prometheus expects). The one gauge that must outlive a failing run, each profile's last success,
is carried over from that file too.

The file is root's when root writes it, so its folder must be root's alone (trust.not_roots_alone,
the admin config's own rule): in a folder a user may write, she could put a link or a FIFO at the
path, or take the file. A refused path is said, and nothing is written; the run itself was done.
The old file is read without following a link and without blocking (a FIFO), only if it is a plain
file, and only so far (MAX_BYTES); the new one is made beside it (`O_EXCL|O_NOFOLLOW`) and renamed
over the path, which replaces whatever is there without opening it.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily

from hermes_admin.model import Reason
from hermes_admin.problems import WARNING
from hermes_admin.results import Action, Run, Status
from hermes_admin.trust import not_roots_alone

MAX_BYTES = 64 << 20  # of the old file read at most: a textfile of thousands of profiles is a few MB

LAST_SUCCESS = "hermes_admin_last_success_timestamp_seconds"  # read back from the last file, so a failing run keeps it
Carried = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (sample name, its labels) -> value, from the last file
_PROFILE = ("profile", "home")  # every series' labels: two roots' profiles of one name never merge


def _well_formed(summaries: list) -> list[dict]:
    """Rows come from workers: only well-formed ones become samples (a number where a number goes)."""
    return [row for row in summaries if isinstance(row, dict) and isinstance(row.get("name"), str)
            and isinstance(row.get("home"), str)
            and all(isinstance(row.get(k), (int, type(None))) and not isinstance(row.get(k), bool)
                    for k in ("sessions", "messages", "store_bytes", "wal_bytes"))]


class Counters:
    """The run's counters, each series starting from its total in the file the run replaces."""

    def __init__(self, previous: Carried):
        self._previous = previous
        self._families: dict[str, tuple[str, tuple[str, ...]]] = {}  # name (with _total) -> help, labels
        self._values: dict[str, dict[tuple[str, ...], float]] = {}

    def counter(self, name: str, text: str, labels: tuple[str, ...] = _PROFILE):
        assert name.endswith("_total")  # Prometheus' rule for counters, checked where each is named
        self._families[name] = (text, labels)
        values = self._values[name] = {}
        for (sample, pairs), value in self._previous.items():
            if sample == name and tuple(k for k, _ in pairs) == labels:
                values[tuple(v for _, v in pairs)] = value

        def add(*label_values: str, amount: float = 1) -> None:
            values[label_values] = values.get(label_values, 0.0) + amount
        return add

    def collect(self):
        for name, (text, labels) in self._families.items():
            family = CounterMetricFamily(name, text, labels=list(labels))
            for label_values, value in sorted(self._values[name].items()):
                family.add_metric(list(label_values), value)
            yield family


def registry(run: Run, summaries: list[dict], finished: float | None = None,
             previous: Carried | None = None) -> CollectorRegistry:
    """The run as metrics. Every series is keyed by the profile's home as well as its name: two
    roots' `default`s never merge, and nothing is summed across roots."""
    finished = finished or time.time()
    previous = previous or {}
    reg = CollectorRegistry(auto_describe=True)
    counters = Counters(previous)
    reg.register(counters)

    def gauge(name, text, labels=_PROFILE):
        return Gauge(name, text, labels, registry=reg)

    sessions = gauge("hermes_admin_sessions", "Session rows in the profile's store after the run.")
    messages = gauge("hermes_admin_messages", "Message rows in the profile's store after the run.")
    store = gauge("hermes_admin_store_bytes", "Size of state.db in bytes.")
    wal = gauge("hermes_admin_wal_bytes", "Size of state.db-wal in bytes.")
    deleted = counters.counter("hermes_admin_deleted_sessions_total", "Session rows deleted, by reason.",
                               (*_PROFILE, "reason"))
    archived = counters.counter("hermes_admin_archived_sessions_total", "Session rows archived.")
    noticed = counters.counter("hermes_admin_noticed_sessions_total",
                               "Sessions found deleted outside hermes-admin (by Hermes itself) and announced to the "
                               "profile's plugins.")
    skipped = counters.counter("hermes_admin_skipped_units_total",
                               "Units left alone (live, guarded, changed), by task.", (*_PROFILE, "task"))
    errors = counters.counter("hermes_admin_run_errors_total",
                              "Errors of runs in the profile (store or config unusable, a lock held).")
    plugin_failures = counters.counter("hermes_admin_plugin_failures_total",
                                       "Plugin failures (a callback raised, timed out or its plugin process died; a plugin "
                                       "failed to load), by plugin; `*`: none ran.",
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
            skipped(*key, result.task, amount=len(result.skipped))
            seconds.labels(*key, result.task).inc(round(result.seconds, 3))
        for failure in result.hook_failures:
            if failure.plugin is not None:  # deliveries stopped (a stop request, the outbox) is no plugin's failure
                plugin_failures(*key, failure.plugin, amount=failure.occurrences)
        if result.status != Status.DONE:
            continue
        if result.action == Action.DELETE:
            deleted(*key, result.reason or Reason.DELETE, amount=result.rows)
        elif result.action == Action.ARCHIVE:
            archived(*key, amount=result.rows)
        elif result.action == Action.NOTICED and not result.dry_run:
            noticed(*key, amount=result.rows)
    for row in rows:
        count = sum(1 for p in run.problems if p.severity != WARNING and p.home == row["home"])
        errors(row["name"], row["home"], amount=count)
        before = previous.get((LAST_SUCCESS, (("profile", row["name"]), ("home", row["home"]))))
        if count == 0:
            last_success.labels(row["name"], row["home"]).set(round(finished, 3))
        elif before is not None:
            last_success.labels(row["name"], row["home"]).set(before)
    last_run.set(round(finished, 3))
    return reg


def render(run: Run, summaries: list[dict], finished: float | None = None,
           previous: Carried | None = None) -> str:
    return generate_latest(registry(run, summaries, finished, previous)).decode()


def carried(path: Path) -> Carried:
    """What the file this run replaces says of each counter series and of each profile's last
    success (nothing, if it cannot be read, is not a plain file or is too big: the counters start
    again, as after a restart). Opened without following a link and without waiting on a FIFO."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = _plain_text(Path(path))
        if text is None:
            return {}
        return {(s.name, tuple(sorted(s.labels.items(), key=_label_order))): s.value
                for family in text_string_to_metric_families(text)
                if family.type == "counter" or family.name == LAST_SUCCESS
                for s in family.samples if family.type != "counter" or s.name.endswith("_total")}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def _plain_text(path: Path) -> str | None:
    """The file's text, if it is a plain file (checked on the descriptor) of at most MAX_BYTES."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        chunks, left = [], MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return None if left <= 0 else b"".join(chunks).decode()
    finally:
        os.close(fd)


def _label_order(pair: tuple[str, str]) -> tuple[int, str]:
    """The labels in the order the series declare them (profile, home, then the series' own)."""
    return ({"profile": 0, "home": 1}.get(pair[0], 2), pair[0])


def refused(path: Path) -> str | None:
    """As root, why the metrics file may not be written at `path` (None: it may): its folder, or
    the nearest folder above it that exists yet, is not root's alone."""
    return not_roots_alone(Path(os.path.abspath(path)).parent, missing_ok=True)


def write(path: Path, run: Run, summaries: list[dict]) -> str | None:
    """The metrics of `run`, replacing the file at once; readable by the node exporter's user (0644,
    whatever the service's UMask). Returns why the path was refused (nothing written), else None."""
    path = Path(os.path.abspath(path))
    why = refused(path)
    if why:
        return why
    path.parent.mkdir(parents=True, exist_ok=True)
    why = refused(path)  # the folders just made are root's; what was there before, checked again
    if why:
        return why
    text = generate_latest(registry(run, summaries, previous=carried(path)))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.unlink(temporary)  # left by a run of the same pid that died here: the folder is root's alone
    except FileNotFoundError:
        pass
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            os.fchmod(fd, 0o644)  # whatever the umask
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return None

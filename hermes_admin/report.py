"""Output: one JSON document on stdout, tables for people, messages on stderr."""

from __future__ import annotations

import json
import shlex
import sys
from contextlib import contextmanager
from datetime import datetime, timezone

import click

from hermes_admin.model import COMMAND_OF
from hermes_admin.problems import ERROR, LOCKED, WARNING
from hermes_admin.results import Action, Status
from hermes_admin.shown import clean, human_bytes  # noqa: F401 (report.human_bytes: the one figure)
from hermes_admin.spill import Spill, SpillMap


# rich is imported where a table or a bar is drawn: the timer's `run` and `--json` never pay for it.


def iso(ts: float | None) -> str | None:
    """A moment as ISO 8601 in UTC; None for none, and for what no clock can say (a store's or a
    file's `1e300`, NaN, text): a value from a home never ends a command."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc).isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError, TypeError):
        return None


def _plain(value):
    """What JSON cannot write itself: report objects (as their dict), anything else as text."""
    return value.as_dict() if hasattr(value, "as_dict") else str(value)


# With --json, the command's document is gathered and written once, when the command ends
# (cli/main.py): whatever ended it (a missing root, a config that cannot be used, an unknown
# session, a usage error), there is exactly one document, with the errors inside and the exit code.
_gathering: dict | None = None
json_written = False  # a --json document went out (the console script writes one if nothing did)


def gather_json() -> None:
    global _gathering
    _gathering = {"doc": None, "errors": [], "warnings": []}


def finish_json(code: int) -> None:
    """Write the gathered document (or one holding only the errors), with the errors said on stderr."""
    global _gathering
    if _gathering is None:
        return
    gathered, _gathering = _gathering, None
    doc = dict(gathered["doc"] or {})
    said = {str(m) for key in ("errors", "locked") for m in (doc.get(key) or [])}
    extra = [m for m in gathered["errors"] if m not in said]
    if extra or "errors" not in doc:
        doc["errors"] = [*(doc.get("errors") or []), *extra]
    if gathered["warnings"] and "warnings" not in doc:
        doc["warnings"] = gathered["warnings"]
    doc["exit_code"] = code
    _write_json(doc)


def record_error(message: str) -> None:
    """An error said elsewhere (click says usage errors itself), kept for the --json document."""
    if _gathering is not None:
        _gathering["errors"].append(str(message))


def emit_json(document: dict) -> None:
    """Exactly one JSON document on stdout; nothing else is ever printed there with --json."""
    if _gathering is not None:
        _gathering["doc"] = document
        return
    _write_json(document)


def _write_json(document: dict) -> None:
    """Indented for a person at a terminal, compact for the scripts that read it."""
    global json_written
    json_written = True
    out = sys.stdout
    if sys.stdout.isatty():
        json.dump(document, out, indent=2, default=_plain)
    else:
        _write_compact(document, out.write)
    out.write("\n")
    out.flush()


def _write_compact(value, write) -> None:
    """What `json.dump(value)` writes, piece by piece, through the C encoder.

    `json.dump` streams through the pure-Python encoder, slow on a large purge's report.
    Here the lists that grow with the store are Spills, copied out line by line as they
    were encoded; everything else is walked container by container and each leaf goes
    through `json.dumps`, so no call ever builds the whole document in memory.
    """
    if isinstance(value, Spill):  # on disk past its head: copied out, never built whole
        opening, closing = ("{", "}") if isinstance(value, SpillMap) else ("[", "]")
        write(opening)
        for n, text in enumerate(value.encoded()):
            write(text if n == 0 else ", " + text)
        write(closing)
        return
    if hasattr(value, "as_dict"):
        value = value.as_dict()
    if isinstance(value, dict):
        write("{")
        for n, (key, item) in enumerate(value.items()):
            write(("" if n == 0 else ", ") + json.dumps(key if isinstance(key, str) else str(key)) + ": ")
            _write_compact(item, write)
        write("}")
    elif isinstance(value, (list, tuple)):
        write("[")
        for n, item in enumerate(value):
            if n:
                write(", ")
            _write_compact(item, write)
        write("]")
    else:
        write(json.dumps(value, default=_plain))


def stdout_console():
    """Text for people on stdout: as wide as the terminal; piped, never wrapped and never coloured
    (rich also honours NO_COLOR)."""
    from rich.console import Console
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, soft_wrap=False, width=None if tty else 1_000_000, no_color=not tty,
                   highlight=False)


# C0/C1 controls, DEL, and the Unicode line separators and bidirectional overrides: whatever
# could end a line, move the cursor, retitle a terminal or reorder what a person reads.
def line(text: str) -> None:
    """One line of human output on stdout, escaped."""
    click.echo(clean(text))


def note(message: str) -> None:
    """A remark for the person reading (not a problem) on stderr."""
    click.echo(f"hermes-admin: {clean(message, 4000)}", err=True)


def installation_notes(lookups) -> None:
    """What the installation lookups of these profiles said (none found for a root, a configured
    interpreter refused): each distinct line once, as a note on stderr, so a table or a report on
    stdout stays what it is. `lookups`: their `hermes` dicts (installation.Lookup.as_dict)."""
    told = set()
    for lookup in lookups:
        for line in (lookup.get("notes") or []) if isinstance(lookup, dict) else []:
            if isinstance(line, str) and line not in told:
                told.add(line)
                note(line)


def warn(message: str) -> None:
    if _gathering is not None:
        _gathering["warnings"].append(str(message))
    click.echo(f"hermes-admin: warning: {clean(message, 4000)}", err=True)


def error(message: str) -> None:
    if _gathering is not None:
        _gathering["errors"].append(str(message))
    click.echo(f"hermes-admin: error: {clean(message, 4000)}", err=True)


def local_time(value) -> str | None:
    """One way to show a time to people: `2026-12-02 19:16` in the local zone (JSON keeps ISO 8601 in UTC)."""
    if value is None or value == "":
        return None
    try:
        moment = datetime.fromtimestamp(float(value)) if isinstance(value, (int, float)) else \
            datetime.fromisoformat(str(value)).astimezone()
    except (ValueError, OverflowError, OSError, TypeError):
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M")


# How a report line names what a result's action did.
_VERBS = {Action.DELETE: "deleted", Action.ARCHIVE: "archived", Action.UNARCHIVE: "unarchived",
          Action.REPAIR: "deleted by repair", Action.RESTORE: "restored",
          Action.CLOSE: "closed as stale (startup_orphan_reap)"}


# People read a task by the command that runs it alone (JSON and hook reasons keep the task's name):
# model.COMMAND_OF, from the tasks' records.


def summary_line(result, dry_run: bool) -> str:
    """One line per task per profile, with counts: what logs and the journal show."""
    name = result.label or result.profile
    where = f"{name}: {COMMAND_OF.get(result.task, result.task)}" if result.task else name
    if result.status == Status.SKIPPED:
        return f"{where}: skipped ({result.why})"
    if result.action == Action.REPLAY:  # only what an earlier run left in the outbox (its plugin failures: said apart)
        return f"{where}: events an earlier run left in the outbox delivered"
    if result.action == Action.NOTICED:  # deletions made outside hermes-admin, announced (engine/noticed.py)
        if not result.done:
            return f"{where}: {'; '.join(result.notes)}"
        return (f"{where}: {len(result.done)} unit(s), {result.rows} session(s) deleted outside hermes-admin, "
                + ("would be announced to the plugins (dry run)" if dry_run else "announced to the plugins"))
    if result.action == Action.REPAIR and not result.done:
        return f"{where}: {len(result.notes)} finding(s)" + (" (dry run)" if dry_run else "")
    would = "would be " if dry_run else ""
    verb = _VERBS.get(result.action, result.action)
    # A restore puts sessions back one by one (an export's unit, a whole lineage, may come back in part)
    counted = "session(s)" if result.action == Action.RESTORE else "unit(s)"
    line = f"{where}: {len(result.done)} {counted}, {result.rows} row(s) {would}{verb}"
    if result.files_removed:
        line += f"; {len(result.files_removed)} file(s) {would}removed"
    if result.skipped:
        line += f"; {len(result.skipped)} skipped"
    if result.task:
        line += f"; {len(result.kept)} kept"
    if result.seconds:
        line += f" ({result.seconds:.2f} s)"
    return line + (" (dry run)" if dry_run else "")


def changed(result) -> bool:
    """Did (or would) this result change anything, or leave something a person must look at?"""
    return bool(len(result.done) or len(result.files_removed) or len(result.skipped) or len(result.files_skipped)
                or result.hook_failures or result.vacuumed)


def summary_lines(run, only_changes: bool = False) -> list[str]:
    """One line per task per profile; `only_changes`: the tasks that changed something (the daemon's
    journal, like `run -q`); then each export removed and what free pages wait for (space_lines),
    under `only_changes` too: these lines carry no task's notes, where `run -q` says why no VACUUM
    ran, so without it a daemon would delete every night and never say that the space waits for
    `compact`."""
    return [summary_line(result, run.dry_run) for result in run.results
            if not only_changes or changed(result)] + space_lines(run)


def space_lines(run, quiet: bool = False) -> list[str]:
    """Each export the run's retention removed (a dry run: would remove), and how many: they were
    restore copies, so they are named under -q too; then, unless `quiet`, what free pages wait for."""
    names = {r.home: r.label or r.profile for r in run.results}
    would = "would be " if run.dry_run else ""
    removed = run.data.get("exports_removed", [])
    def age(keep_days) -> str:  # export_keep_days 0: not kept past the run that made it
        return "export_keep_days 0" if not keep_days else f"made over {keep_days:g} day(s) ago, export_keep_days"

    lines = [f"{names.get(row.get('home'), row.get('profile'))}: old export {would}removed ({row.get('why')}: "
             f"{age(row.get('keep_days'))}): {row.get('file')} ({human_bytes(row.get('bytes'))})" for row in removed]
    if removed:
        lines.append(f"{len(removed)} old export(s), {human_bytes(sum(r.get('bytes') or 0 for r in removed))} "
                     f"{would}removed")
    for wait in run.data.get("reclaim_waits", []) if not quiet else []:
        name = names.get(wait.get('home'), wait.get('profile'))
        # the profile named, so that the command pasted compacts this store, not every one in view
        compact = f"`hermes-admin compact -p {shlex.quote(str(name))}` gives them back on your word"
        if wait.get("rewrite_bytes") is not None:  # too big to rewrite unasked (space.rewrite_unasked)
            lines.append(f"{name}: {human_bytes(wait.get('bytes'))} of free pages wait for one VACUUM, which "
                         f"would rewrite {human_bytes(wait.get('rewrite_bytes'))} (more than a run does unasked); "
                         f"{compact}, as `--vacuum` or vacuum_after_prune do")
            continue
        lines.append(f"{name}: {human_bytes(wait.get('bytes'))} of free "
                     f"pages wait for one VACUUM while nobody else holds the store (the store is {wait.get('held_by')}); "
                     + (compact if wait.get("compact") else "every run looks again"))
    return lines


class Progress:
    """A progress bar on stderr, only when stderr is a terminal (never under systemd or in pipes)."""

    MIN_UNITS = 200  # shorter work finishes before a bar would help

    def __init__(self):
        self._bar = None
        self._task = None
        self._whole = False  # one bar for a task done in parts: the parts' own bars stay hidden
        self._told = 0  # units the engine said were done (__call__)

    @staticmethod
    def wanted() -> bool:
        return sys.stderr.isatty()

    def start(self, label: str, total: int) -> None:
        if self._whole or total < self.MIN_UNITS or not self.wanted():
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn
        self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=Console(file=sys.stderr), transient=True)
        self._bar.start()
        self._task = self._bar.add_task(label, total=total)

    def advance(self, n: int) -> None:
        if self._bar is not None and not self._whole:
            self._bar.advance(self._task, n)

    def stop(self) -> None:
        if self._bar is not None and not self._whole:
            self._bar.stop()
            self._bar = None

    def __call__(self, label: str, done: int, total: int, ended: bool = False) -> None:
        """The engine's progress callback: the bar starts (nothing done yet), advances, and stops (ended)."""
        if ended:
            self.stop()
        elif done == 0:
            self.start(label, total)
            self._told = 0
        else:
            self.advance(done - self._told)
            self._told = done

    @contextmanager
    def whole(self, label: str, total: int):
        """One bar over a task done in parts (the batched purge); yields the function that advances it."""
        self.start(label, total)
        self._whole = True

        def step(n: int) -> None:
            if self._bar is not None:
                self._bar.advance(self._task, n)
        try:
            yield step
        finally:
            self._whole = False
            self.stop()


def plugin_failures(results) -> list[str]:
    """One line per failing plugin of a profile per run: its first failure, and how many more there
    were (each task of a run delivers its own events, and each would say it again). A failure that is
    no one plugin's (deliveries stopped, Hermes' plugin manager failing at each plugin process start)
    is folded the same way, one line per kind, and said first."""
    return [line for _, line in _plugin_failures(results)]


def _plugin_failures(results) -> list[tuple[tuple, str]]:
    """`plugin_failures`, each line with whose failures it folds (_folded_by)."""
    first: dict[tuple, str] = {}  # who (_folded_by) -> the line of its first failure
    more: dict[tuple, int] = {}
    for result in results:
        profile = result.label or result.profile
        for failure in result.hook_failures:
            who = _folded_by(profile, failure)
            if who not in first and not failure.repeats:
                first[who] = failure.text(profile)
            else:
                more[who] = more.get(who, 0) + failure.occurrences
    said = [(who, line + (f" (and {more[who]} more time(s) this run)" if more.get(who) else ""))
            for who, line in first.items()]
    said += [(who, f"profile '{who[0]}': {_failed(who)} {n} more time(s) this run")
             for who, n in more.items() if who not in first]
    return sorted(said, key=lambda entry: entry[0][1] is not None)  # stable: no one's first


def _folded_by(profile: str, failure) -> tuple[str, str | None, str | None]:
    """What one line stands for: a plugin's failures of every kind, or no one plugin's of one kind."""
    return (profile, failure.plugin, failure.kind if failure.plugin is None else None)


def _failed(who: tuple[str, str | None, str | None]) -> str:
    _, plugin, kind = who
    return kind if plugin is None else f"plugin {plugin}: failed"


def problems(run) -> list[tuple[str, str]]:
    """A run's warnings and errors as they are said, `("warning" | "error", line)`, by `run`'s stderr
    and the daemon's journal alike: a failing plugin is one line per run, not one per task."""
    return [(severity, line) for severity, _, line in keyed_problems(run)]


def keyed_problems(run) -> list[tuple[str, object, str]]:
    """`problems`, each with what it stands for: the same key for the same problem in the next run,
    whatever its counts (`(and N more time(s) this run)`), a new one when what it says changed. The
    daemon says a warning once by it (host/daemon.Told)."""
    said: list[tuple[str, object, str]] = [
        ("warning", ("files_skipped", line), line) for result in run.results for line in result.files_skipped]
    said += [("warning", ("plugin", *who), line) for who, line in _plugin_failures(run.results)]
    said += [("warning", p, p.text()) for p in run.problems if p.severity == WARNING]
    # a held lock is said as an error
    return said + [("error", p, p.text()) for severity in (LOCKED, ERROR) for p in run.problems
                   if p.severity == severity]

"""What one piece of work did in one profile: the report types both sides share.

The worker builds them as it works (`profile/`); they cross to the host as
protocol messages (`protocol.py`) and the host renders them for people, JSON,
metrics and the exit code. Data only: nothing here touches a home.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

from hermes_admin import problems as said
from hermes_admin.hook_failures import HookFailure
from hermes_admin.problems import Problem
from hermes_admin.spill import Spill, SpillMap


class Done:
    """One unit acted on: its head, the ids that went (or changed), the rule that chose it.

    A slotted object, not a dict: a purge of 50 k units keeps 50 k of them (~120
    bytes each instead of ~430); the JSON report turns each into a dict as it writes it.
    """

    __slots__ = ("session_id", "ids", "rule")

    def __init__(self, session_id: str, ids: tuple[str, ...], rule: str):
        self.session_id, self.ids, self.rule = session_id, ids, rule

    def as_dict(self) -> dict:
        return {"session_id": self.session_id, "ids": list(self.ids), "rule": self.rule}

    @classmethod
    def from_dict(cls, entry: dict) -> "Done":
        return cls(entry["session_id"], tuple(entry["ids"]), entry["rule"])


class Action(StrEnum):
    """What an engine call (or a task) did to its units: a str, serialized as its value ("delete")."""

    DELETE = "delete"
    ARCHIVE = "archive"
    UNARCHIVE = "unarchive"
    CLOSE = "close"  # stale rows closed (nothing deleted)
    RESTORE = "restore"
    REPAIR = "repair"  # profile repair's deletes and moves
    COPY = "copy"  # repair's copy of a row into the profile it belongs to
    NOTICED = "noticed"  # deletions made outside hermes-admin, announced
    REPLAY = "replay"  # what an earlier run left in the outbox, delivered
    COMPACT = "compact"
    NONE = "none"  # a task that did nothing (skipped, or before its work)


class Status(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"  # a task disabled by policy, or a profile without a store yet


@dataclass
class Result:
    """What one engine call did (or, in a dry run, would do) in one profile."""

    profile: str
    action: Action  # its value given as text is the same (Action is a str)
    reason: str | None
    dry_run: bool
    task: str | None = None  # the maintenance task, when one asked
    status: Status = Status.DONE  # done | skipped (a task disabled by policy)
    why: str | None = None  # why a task was skipped
    # The lists that grow with the store are Spills: on disk past their first entries (spill.py).
    done: Spill = field(default_factory=lambda: Spill(decode=Done.from_dict))
    skipped: Spill = field(default_factory=Spill)  # {"session_id", "ids", "why"}
    files_removed: Spill = field(default_factory=Spill)
    files_skipped: Spill = field(default_factory=Spill)
    hook_failures: list[HookFailure] = field(default_factory=list)  # each plugin's and kind's, then repeats
    kept: SpillMap = field(default_factory=SpillMap)  # looked at, kept, and why
    transactions: int = 0
    longest_write_ms: float = 0.0
    longest_write: str | None = None  # what that transaction was (a delete of N units, an FTS5 merge step, ...)
    vacuumed: bool = False
    notes: list[str] = field(default_factory=list)
    # What a stop request cut short, said once for the whole call (or task): kept apart from the
    # notes so that a task can say it anew over its parts, said after them (`said`).
    stop: str | None = None
    seconds: float = 0.0  # wall time of the task
    home: str | None = None  # the profile's home: what tells two roots' `default` apart
    export: str | None = None  # the export file its deleted units were written to first (restore FILE)
    label: str | None = field(default=None, compare=False)  # how people read it (ROOT:NAME, several roots)

    def absorb(self, other: "Result") -> None:
        """Fold a second engine call of the same task into this result."""
        self.done += other.done
        self.skipped += other.skipped
        self.files_removed += other.files_removed
        self.files_skipped += other.files_skipped
        self.hook_failures += other.hook_failures
        self.notes += other.notes
        self.stop = other.stop or self.stop
        self.vacuumed = self.vacuumed or other.vacuumed
        self.transactions += other.transactions
        if other.longest_write_ms > self.longest_write_ms:
            self.longest_write_ms, self.longest_write = other.longest_write_ms, other.longest_write

    def said(self) -> list[str]:
        """Its notes as people read them: the notes, then what a stop cut short."""
        return self.notes + ([self.stop] if self.stop else [])

    @property
    def rows(self) -> int:
        return sum(len(d.ids) for d in self.done)

    def as_dict(self) -> dict:
        return {
            "profile": self.profile, "home": self.home, "task": self.task, "status": self.status, "why": self.why,
            "action": self.action, "reason": self.reason, "dry_run": self.dry_run,
            "done": self.done, "skipped": self.skipped, "rows": self.rows, "kept": self.kept,
            "files_removed": self.files_removed, "files_skipped": self.files_skipped,
            "hook_failures": [dict(f.as_dict(), text=f.text(self.label or self.profile)) for f in self.hook_failures],
            "transactions": self.transactions,
            "longest_write_ms": round(self.longest_write_ms, 2), "longest_write": self.longest_write,
            "vacuumed": self.vacuumed, "notes": self.said(),
            "seconds": round(self.seconds, 3), "export": self.export,
        }


def _problems(found) -> list[Problem]:
    """Problems only: a line of text here once crashed the report far from where it was put."""
    wrong = [p for p in found if not isinstance(p, Problem)]
    if wrong:
        raise TypeError(f"a run's problems are Problem values, not {type(wrong[0]).__name__}: {wrong[0]!r:.80}")
    return list(found)


def warned(results) -> bool:
    """Did these results leave something worth a warning besides the problems: units skipped, a
    plugin that failed, files left in place (the exit code's 1, and a recorded run's `warnings`)?"""
    return any(len(r.skipped) or r.hook_failures or len(r.files_skipped) for r in results)


@dataclass
class Run:
    dry_run: bool
    results: list[Result] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # what went wrong, each with its severity
    policies: dict = field(default_factory=dict)  # home -> the policy as a dict (with its profile name)
    data: dict = field(default_factory=dict)  # rows of list-type jobs (profiles, sessions, plugins, ...)
    internal: bool = False  # a bug of ours ended a profile's work (exit 70)
    findings: list["Finding"] = field(default_factory=list)  # profile repair's, `repair` and `run`'s first task

    def add(self, *found: Problem) -> None:
        self.problems.extend(_problems(found))

    # The lines of each severity, as people read them (and the JSON report's lists of text).
    @property
    def errors(self) -> list[str]:  # a profile could not be processed
        return said.texts(self.problems, said.ERROR)

    @property
    def locked(self) -> list[str]:  # another run (ours or Hermes') holds it
        return said.texts(self.problems, said.LOCKED)

    @property
    def warnings(self) -> list[str]:
        return said.texts(self.problems, said.WARNING)

    def exit_code(self) -> int:
        return said.exit_code(self.problems, self.internal, warned=warned(self.results))

    def merge(self, other: "Run") -> None:
        """Fold another owner's report into this one (the host gathers one per worker)."""
        self.results += other.results
        self.problems += _problems(other.problems)
        self.policies.update(other.policies)
        self.internal = self.internal or other.internal
        for key, rows in other.data.items():
            self.data.setdefault(key, []).extend(rows)
        self.findings += other.findings

    def as_dict(self) -> dict:
        return {
            "dry_run": self.dry_run, "results": [r.as_dict() for r in self.results],
            "errors": self.errors, "locked": self.locked, "warnings": self.warnings,
            "problems": [p.as_dict() for p in self.problems], "policies": self.policies,
            "exports_removed": self.data.get("exports_removed", []),  # each old export retention removed, and why
            "reclaim_waits": self.data.get("reclaim_waits", []),  # free pages waiting for a store nobody holds
            "longest_write_ms": round(max((r.longest_write_ms for r in self.results), default=0.0), 2),
            "longest_write": max(self.results, key=lambda r: r.longest_write_ms).longest_write if self.results else None,
        }




@dataclass
class Finding:
    profile: str = field(metadata={"max_len": 256})
    kind: str = field(metadata={"max_len": 64})
    subject: str  # a path or a session id
    detail: str
    fix: str  # what applying does ("none" for report-only kinds)
    target: str | None = field(default=None, metadata={"max_len": 256})  # the profile a row belongs to
    applied: bool = False
    error: str | None = None
    home: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)



@dataclass
class RepairRun(Run):
    """`repair`'s report: its findings listed, and whether they were applied."""

    def as_dict(self) -> dict:
        return dict(super().as_dict(), applied=not self.dry_run,
                    findings=[f.as_dict() for f in self.findings])



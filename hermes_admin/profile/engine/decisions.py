"""What one transaction does to its units, decided from the rows read inside it (docs/design.md §5).

Every decision here is a pure function of what the transaction read (the rows as they are now,
the guards on them, the unit's rule applied again): no statement, no clock. The engine applies a
decision in the write transaction that read its rows; a dry run makes the same decision in a
short read transaction and applies nothing, so what it reports is what the run would do then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from hermes_admin.hook_failures import HookFailure
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store.read import SessionRow
from hermes_admin.profile.store.row_updates import ArchiveState
from hermes_admin.results import Done, Result

# A unit's rule applied again to its rows as the transaction reads them: None, or why it stays.
Recheck = Callable[[Unit, dict[str, SessionRow]], "str | None"]


@dataclass(frozen=True)
class Outcome:
    """What a step or a collaborator did (or a dry run would do): the units it changed and those it
    left, with why; the files it removed and those it left; the plugin failures met delivering its
    events; its notes; whether it ran a VACUUM. Returned, never appended to a report: the engine
    call that owns the report folds it in (`fold_into`), the moment it is done."""
    done: tuple[Done, ...] = ()
    skipped: tuple[dict, ...] = ()
    files_removed: tuple[str, ...] = ()
    files_skipped: tuple[str, ...] = ()
    hook_failures: tuple[HookFailure, ...] = ()
    notes: tuple[str, ...] = ()

    vacuumed: bool = False  # a VACUUM of ours ran (space.py)

    def plus(self, other: "Outcome") -> "Outcome":
        """Both outcomes, this one's first."""
        return Outcome(self.done + other.done, self.skipped + other.skipped,
                       self.files_removed + other.files_removed, self.files_skipped + other.files_skipped,
                       self.hook_failures + other.hook_failures, self.notes + other.notes,
                       self.vacuumed or other.vacuumed)

    def fold_into(self, result: Result) -> None:
        result.done += self.done
        result.skipped += self.skipped
        result.files_removed += self.files_removed
        result.files_skipped += self.files_skipped
        result.hook_failures += self.hook_failures
        result.notes += self.notes
        result.vacuumed = result.vacuumed or self.vacuumed


def noted(*notes: str) -> Outcome:
    """An outcome that only says something."""
    return Outcome(notes=notes)


@dataclass(frozen=True)
class Decision:
    """For the transaction's units (`chunk`): index -> the ids it changes, index -> why a unit stays.
    `claimed`: rows whose `auto_archived` a deliberate archive or unarchive clears, their flag unchanged."""
    chunk: tuple[Unit, ...]
    changes: Mapping[int, tuple[str, ...]]
    kept: Mapping[int, str]
    claimed: tuple[str, ...] = field(default=())

    @property
    def ids(self) -> list[str]:
        return [i for ids in self.changes.values() for i in ids]

    def outcome(self) -> Outcome:
        return Outcome(tuple(Done(self.chunk[i].session_id, ids, self.chunk[i].rule) for i, ids in self.changes.items()),
                       tuple({"session_id": self.chunk[i].session_id, "ids": list(self.chunk[i].ids), "why": why}
                             for i, why in self.kept.items()))


def _decide(chunk: list[Unit], why_kept: Callable[[Unit], "str | None"],
            changing: Callable[[Unit], tuple[str, ...]]) -> Decision:
    changes: dict[int, tuple[str, ...]] = {}
    kept: dict[int, str] = {}
    for index, unit in enumerate(chunk):
        why = why_kept(unit)
        if why:
            kept[index] = why
        else:
            changes[index] = changing(unit)
    return Decision(tuple(chunk), changes, kept)


def to_delete(chunk: list[Unit], fresh: dict[str, SessionRow], blocked: Mapping[str, str],
              recheck: Recheck | None, orphans: bool) -> Decision:
    """Which units go: those still there, unguarded (`blocked`: guards, and rows unlike their export)
    and still chosen by their rule. `orphans`: units whose session rows are gone already (their
    message and usage rows left behind) go whole, unless a session row came back."""
    def why_kept(unit: Unit) -> str | None:
        if orphans:
            return "its session row exists again" if any(i in fresh for i in unit.ids) else None
        if unit.session_id not in fresh:
            return "gone already"
        why = next((blocked[i] for i in unit.ids if i in blocked), None)
        return why if why or recheck is None else recheck(unit, fresh)

    return _decide(chunk, why_kept, lambda unit: unit.ids if orphans else tuple(i for i in unit.ids if i in fresh))


def to_close(chunk: list[Unit], fresh: dict[str, SessionRow], blocked: Mapping[str, str],
             recheck: Recheck) -> Decision:
    """Which stale open rows are closed: unguarded, and still stale by their rule."""
    return _decide(chunk, lambda unit: blocked.get(unit.session_id) or recheck(unit, fresh), lambda unit: unit.ids)


def to_flip(chunk: list[Unit], states: Mapping[str, ArchiveState], held: Mapping[str, str],
            archived: bool, provenance: bool, swept: bool) -> Decision:
    """Which rows an archive (or unarchive) flips: those of each unit not yet so, units with a member a
    live Hermes process holds (`held`) left whole. A deliberate flip (not `swept`) on a store with
    `auto_archived` (`provenance`) also claims the unit's other rows: their flag goes to 0."""
    current = 0 if archived else 1
    decision = _decide(
        chunk, lambda unit: next((held[i] for i in unit.ids if i in held), None),
        lambda unit: tuple(i for i in unit.ids if i in states and states[i].archived == current))
    changes = {index: ids for index, ids in decision.changes.items() if ids}
    claimed: tuple[str, ...] = ()
    if provenance and not swept:
        flipped = set(decision.ids)
        claimed = tuple(i for index in decision.changes for i in chunk[index].ids
                        if i in states and i not in flipped and states[i].auto_archived not in (None, 0))
    return Decision(decision.chunk, changes, decision.kept, claimed)

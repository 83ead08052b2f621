"""A delete's run over its units, step by step (docs/design.md §5): each step exported ahead
(export_ahead.py), then one transaction of whole units (deletes.py) or one unit deleted in steps
(splits.py); each commit settled: the outbox told, the report filled, its files and events handed
on to follow once the commit is durable (aftermath.py)."""

from __future__ import annotations

from typing import Callable

from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.decisions import Decision, Outcome
from hermes_admin.profile.engine.deletes import Ask, Deletes
from hermes_admin.profile.engine.export_ahead import ExportAhead, Step, stop_note
from hermes_admin.profile.engine.group_commit import GroupCommit
from hermes_admin.profile.engine.outbox import Event, Outbox
from hermes_admin.profile.engine.pacer import MERGE_STEPS, MERGE_STEPS_AT_END, Pacer
from hermes_admin.profile.engine.splits import SplitDeletes
from hermes_admin.profile.lineage import Unit
from hermes_admin.results import Action, Result

# A progress callback: (what, units done so far, units in all, ended); the engine draws nothing itself.
Progress = Callable[[str, int, int, bool], None]


class DeleteSteps:
    """The steps of the engine's deletes, over the collaborators of a run that writes."""

    def __init__(self, ahead: ExportAhead, splits: SplitDeletes, deletes: Deletes, pacer: Pacer,
                 commits: GroupCommit, outbox: Outbox, aftermath: Aftermath, progress: Progress):
        self.ahead, self.splits, self.deletes, self.pacer = ahead, splits, deletes, pacer
        self.commits, self.outbox, self.aftermath, self.progress = commits, outbox, aftermath, progress

    def run(self, what: str, units: list[Unit], ask: Ask, synced_last: bool, result: Result) -> None:
        """Every step of `units`, in order, into `result` as each commits; `synced_last`: the last
        commit is synced (else the caller's batch syncs it when it ends). Steps that end early were
        ended by a stop request: the rest waits for the next run, and `result` says so."""
        done = 0
        self.progress(what, done, len(units), False)
        try:
            for step in self.ahead.steps(units, ask):
                Outcome(files_skipped=step.files_left).fold_into(result)
                if step.split:
                    self.splits.split(step.units[0], step.exported[step.units[0].session_id], ask, result)
                else:
                    self._chunk(step, step.last and synced_last, ask, result)
                done += len(step.units)
                self.progress(what, done, len(units), False)
                self.pacer.merge_owed(result, MERGE_STEPS)
            if done < len(units):
                result.stop = stop_note(len(units) - done, len(units))
        finally:
            self.progress(what, done, len(units), True)

    def settle(self, result: Result, merge: bool) -> None:
        """Once every commit so far is durable: its files removed, its events fired, all in `result`;
        `merge`: FTS5 merging owed is done first (not after an error)."""
        try:
            if merge:
                self.pacer.merge_owed(result, MERGE_STEPS_AT_END)
            self.aftermath.after_durable(self.commits.flush()).fold_into(result)
        finally:
            repeats = tuple(self.aftermath.bus.repeats()) if self.aftermath.bus is not None else ()
            self.aftermath.collected().plus(Outcome(hook_failures=repeats)).fold_into(result)

    def _chunk(self, step: Step, last: bool, ask: Ask, result: Result) -> None:
        chunk, listening = step.units, self.aftermath.listening
        event_ids = self.outbox.add_pending(Action.DELETE, ask.reason, chunk) if listening else [None] * len(chunk)
        synced = self.commits.before(last)

        try:
            held = self.pacer.hold(lambda db: self.deletes.in_transaction(db, chunk, step.exported, ask.recheck,
                                                                         ask.orphans))
        except BaseException:
            if listening:
                self.outbox.settle({}, event_ids)  # rolled back: these events must never fire
            raise
        # Committed, `follow` says what follows; it needs no write lock, so it fills the pause we owe.
        def follow(done: tuple[Decision, bool]):  # what committed, in the report the moment it did
            outcome, wrote, after = self._deleted(chunk, event_ids, ask.reason, done)
            outcome.fold_into(result)
            return wrote, after

        self.pacer.settle(held, step.weight, result, f"a delete of {len(chunk)} unit(s)", synced=synced,
                          follow=follow)

    def _deleted(self, chunk: list[Unit], event_ids: list, reason: str, done: tuple[Decision, bool]):
        """What a delete's commit settles: the outbox told; what it did, whether it wrote, and the
        files and events to follow."""
        decision, wrote = done
        went, listening = decision.changes, self.aftermath.listening
        committed = {event_ids[i]: list(ids) for i, ids in went.items()} if listening else {}
        self.outbox.settle(committed, [e for i, e in enumerate(event_ids) if i not in went and e is not None],
                           gone=[] if listening else [i for ids in went.values() for i in ids])  # noticed.py
        paths, left = self.aftermath.paths_of([i for ids in went.values() for i in ids])
        events = [Event(event_ids[i], Action.DELETE, chunk[i].session_id, reason, list(ids))
                  for i, ids in went.items()] if listening else []
        return decision.outcome().plus(Outcome(files_skipped=tuple(left))), wrote, (paths, events)

"""Units too big for one transaction: deleted in steps, re-checked at each, undone or finished.

A collaborator of the Engine (engine.py), given the store, the outbox, the pacer and the delete
statements; here is only what a split adds to them. The order, for one unit already exported:

1. its one event goes pending and the split is recorded in the outbox (synced);
2. its messages go in id order, a step per transaction sized like any other, each step first
   re-checking the unit against its export (`_changed`); then a last step takes its rows;
   a step's transaction is paced like every other (pacer.py);
3. after the last step: the event is committed, the record ends, files and the event follow;
4. a unit that changed, a step that failed, or a stop request with more left than went: what our
   steps took comes back from the export (`_undo_split`, recorded as "undoing" first);
5. a record an earlier run left behind is finished or undone by the next start (`finish_all`).

The outbox (outbox.db) keeps these split records beside the events: one record per unit being
deleted in steps, until it is finished or undone (docs/design.md §5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable


from hermes_admin import stopping
from hermes_admin.profile import exports
from hermes_admin.profile.engine import faults
from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.deletes import Ask, Deletes, Recheck
from hermes_admin.profile.exports import ExportError, Exported
from hermes_admin.profile.engine.outbox import Event, Outbox, OutboxError
from hermes_admin.profile.engine.packing import messages_in_step
from hermes_admin.profile.engine.pacer import MERGE_STEPS, Held, Pacer
from hermes_admin.profile.engine.restore import Restorer
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store
from hermes_admin.profile.store import unit_rows
from hermes_admin.profile.store.read import existing_ids, load_rows
from hermes_admin.results import Done, Result
from hermes_admin.profile.store.errors import SQLITE_ERRORS


def _wrote(value) -> tuple[bool, None]:
    return True, None


class _Taken:
    """What a split's committed steps took: their message ids, and the session rows of the last one
    once it committed (None before)."""

    def __init__(self):
        self.messages: list[int] = []
        self.last: list[str] | None = None

    def add(self, messages: list[int], last: list[str] | None) -> None:
        self.messages += messages
        if last is not None:
            self.last = list(last)


class SplitDeletes:
    """The Engine's split deletes (see the module's docstring). `settle(result)`: the files and
    events of what committed so far (the engine's); `require_tokenizer()`: Hermes' CJK tokenizer."""

    def __init__(self, store: Store, pacer: Pacer, outbox: Outbox, aftermath: Aftermath, deletes: Deletes,
                 settle: Callable[[Result], None], require_tokenizer: Callable[[], None]):
        self.store, self.pacer, self.outbox, self.aftermath = store, pacer, outbox, aftermath
        self.deletes, self.settle, self.require_tokenizer = deletes, settle, require_tokenizer

    def split(self, unit: Unit, exported: Exported, ask: Ask, result: Result) -> None:
        """Delete one big unit in steps of messages, then its rows; it is already exported.

        The split is recorded in the outbox before the first step, so that a crash between steps is
        finished (or undone) by the next start (_finish_splits); its one event is pending from
        then on, committed after the last step, dropped if the unit is restored.
        """
        listening, reason = self.aftermath.listening, ask.reason
        event_id = self.outbox.add_pending("delete", reason, [unit])[0] if listening else None
        record = {"session_id": unit.session_id, "ids": list(unit.ids), "rule": unit.rule, "reason": reason,
                  "event_id": event_id, "exported": exported.as_record()}
        try:
            split_id = self.outbox.begin_split(record)
        except BaseException:
            if listening:
                self.outbox.settle({}, [event_id])
            raise
        self._run_split(split_id, record, unit, exported, ask.recheck, result)

    def _run_split(self, split_id: int, record: dict, unit: Unit, exported: Exported, recheck: Recheck | None,
                   result: Result, resumed: bool = False) -> None:
        """The steps, then what follows the last one. A step that fails (and rolled back), a failure
        after a step committed, or a unit found changed puts back what the earlier steps deleted
        (`resumed`: a run before this one took some too, so every exported message that is missing);
        once the last step has committed, the unit is gone whatever fails after it (its event is
        committed first)."""
        taken = _Taken()
        try:
            outcome, held = self._steps_of_split(unit, exported, recheck, taken, result)
        except Exception as exc:
            if taken.last is not None:  # the last step committed: the unit is gone, its event goes out
                self._after_split(split_id, record, unit, taken.last, result)
                raise
            try:
                self._undo_split(split_id, record, unit, exported, f"a step failed ({exc})",
                                 None if resumed else taken.messages, result)
            except Exception:
                pass  # the record stays in the outbox: the next start finishes or restores the unit
            raise
        if outcome is not None:  # changed since its export, or a stop: what our steps deleted comes back
            self._undo_split(split_id, record, unit, exported, outcome, None if resumed else taken.messages, result)
            return
        self._after_split(split_id, record, unit, taken.last, result)
        self.pacer.turn(held)

    def _steps_of_split(self, unit: Unit, exported: Exported, recheck: Recheck | None, taken: "_Taken",
                        result: Result) -> tuple[str | None, Held | None]:
        """Delete the unit's messages in id order, a step per transaction, then its rows: (None, the
        last step's transaction) once it committed, else (why the unit must stay: a change, or a stop
        request, ...). What each step took is in `taken` from the moment it commits, before anything
        that can fail after the commit (between the pacer's `hold` and its `settle`)."""
        remaining = self._message_weights(unit, exported.max_message_id)
        went = 0  # weight our steps took
        while True:
            # A stop request never leaves Hermes a conversation half gone: what is less work,
            # finishing the unit or putting back what went, is done first.
            if stopping.requested() and sum(w for _, w in remaining) > went:
                return "stopped on request", None
            count = messages_in_step([w for _, w in remaining], self.pacer.budget)
            step, weight = [m for m, _ in remaining[:count]], sum(w for _, w in remaining[:count])
            final = count == len(remaining)
            # the last step's commit synced: the split's record ends and its event is committed
            # right after it (_after_split), which a power cut must not find ahead of the rows
            self.pacer.commits.before(last=final)
            present: list[str] = []
            # A changed unit lost nothing: no step of ours. After the last step, what ends the split
            # follows its commit (_after_split), then its turn.
            held = self.pacer.hold(lambda db: self._step(db, unit, exported, recheck, step, final, len(remaining),
                                                         present))
            if held.value:  # it found the unit changed and deleted nothing: nothing follows
                faults.point("committed")
                return held.value, None
            taken.add(step, present if final else None)  # before anything that can fail after the commit
            self.pacer.settle(held, weight + (exports.UNIT_WEIGHT if final else 0), result,
                              "a step of a unit deleted in steps", follow=None if final else _wrote)
            went += weight
            remaining = remaining[count:]
            if final:
                return None, held
            self.pacer.merge_owed(result, MERGE_STEPS)  # each step adds a segment to each index

    def _step(self, db, unit: Unit, exported: Exported, recheck: Recheck | None, step: list[int], final: bool,
              left: int, present: list[str]) -> str | None:
        """Inside a step's transaction: why the unit changed, or None once the step's rows are deleted
        (the last step: its session rows, named in `present`)."""
        why = self._changed(db, unit, exported, left, recheck)
        if why:
            return why
        if final:
            present[:] = existing_ids(self.store, list(unit.ids))
            self.deletes.delete_rows(db, present)
        else:
            self.deletes.delete_messages(db, step)
            faults.point("split_step_deleted")
        return None

    def _after_split(self, split_id: int, record: dict, unit: Unit, present: list[str], result: Result) -> None:
        """The last step committed: the event is committed, the record ends, files and the event follow."""
        event_id = record.get("event_id")
        if event_id is not None:
            self.outbox.settle({event_id: present}, [])
        else:  # no event; the outbox remembers them if a look at the store is kept (noticed.py)
            self.outbox.settle({}, [], gone=present)
        self.outbox.end_split(split_id)
        result.done.append(Done(unit.session_id, tuple(present), unit.rule))
        events = [Event(event_id, "delete", unit.session_id, record["reason"], present)] if event_id is not None else []
        paths, left = self.aftermath.paths_of(present)
        result.files_skipped += left
        self.pacer.committed(True, True, (paths, events), result)

    def _message_weights(self, unit: Unit, upto: int) -> list[tuple[int, int]]:
        weights = unit_rows.each_message_size(self.store.db, self.store.schema, list(unit.ids), upto)
        return [(i, w + exports.ROW_WEIGHT) for i, w in weights]

    def _changed(self, db, unit: Unit, exported: Exported, left: int, recheck: Recheck | None) -> str | None:
        """Inside a step's transaction: why the unit must not lose more rows, if it changed since its export."""
        ids = list(unit.ids)
        rows = unit_rows.session_rows(db, ids)
        if len(rows) != exported.sessions or exports.fingerprint(self.deletes.columns(db), rows) != exported.fingerprint:
            return "its session rows changed while it was being deleted in steps"
        newer, kept = unit_rows.messages_beside(db, ids, exported.max_message_id)
        if newer:
            return "a new message arrived while it was being deleted in steps"
        if kept != left:
            return "its messages changed while it was being deleted in steps"
        blocked = self.deletes.blocked(db, ids)
        why = next((blocked[i] for i in ids if i in blocked), None)
        if why is None and recheck is not None:
            why = recheck(unit, load_rows(self.store, ids))
        return why

    def _undo_split(self, split_id: int, record: dict, unit: Unit, exported: Exported, why: str,
                    deleted: list[int] | None, result: Result) -> None:
        """The unit changed between steps: what our steps deleted comes back from its export, and it is
        kept. `deleted`: the message ids our steps took (None after a crash: every exported message
        that is missing). The record says "undoing" first, so a crash meanwhile goes on undoing."""
        if not record.get("undoing"):
            record = dict(record, undoing=why, deleted=deleted)
            self.outbox.update_split(split_id, record)
        wanted = set(record["deleted"]) if record.get("deleted") is not None else None
        restorer = Restorer(self.store, self.pacer, result)
        put = 0
        member = {"offset": exported.offset, "length": exported.length}
        for fields, messages in exports.read_member(Path(exported.path), member, check=False):
            if fields.get("id") in unit.ids:
                chosen = (m for m in messages if wanted is None or m.get("id") in wanted)
                put += restorer.session(fields, chosen, missing_only=True)[1]
        if record.get("event_id") is not None:
            self.outbox.settle({}, [record["event_id"]])
        self.outbox.end_split(split_id)
        result.skipped.append({"session_id": unit.session_id, "ids": list(unit.ids),
                               "why": f"{record['undoing']}: kept, {put} deleted message(s) restored from "
                                      f"{exported.path}"})

    def finish_all(self) -> tuple[list[Result], list[str]]:
        """Units an earlier run left half-deleted: finished if unchanged since their export, else restored;
        (their results, a note for each record left for the next run).

        One record that cannot be dealt with (its export unreadable, say) is reported and kept for
        the next run; it never stops the profile's other work.
        """
        recovered, notes = [], []
        for split_id, record in self.outbox.splits():
            result = Result(self.store.profile.name, "delete", record.get("reason"), False, task="resume")
            try:
                self._finish_split(split_id, record, result)
            except (ExportError, OutboxError, *SQLITE_ERRORS, KeyError, TypeError,
                    ValueError) as exc:
                notes.append(f"an interrupted delete in steps ({record.get('session_id')!r}) could not be "
                             f"finished or restored: {exc}; it stays recorded for the next run")
                continue
            result.notes.append(f"an interrupted delete of {record['session_id']} in steps, from an earlier run")
            recovered.append(result)
        return recovered, notes

    def _finish_split(self, split_id: int, record: dict, result: Result) -> None:
        unit = Unit(record["session_id"], record["ids"], record.get("rule", ""))
        exported = Exported.from_record(record["exported"])
        self.require_tokenizer()
        if record.get("undoing"):  # the crash came while it was being put back: go on putting it back
            self._undo_split(split_id, record, unit, exported, record["undoing"], None, result)
            return
        if not existing_ids(self.store, list(unit.ids)):  # its last step committed; what followed it did not
            self._after_split(split_id, record, unit, list(unit.ids), result)
        else:
            # Re-checked against its export at every step, as in the run that began it; the rule that
            # chose it is that run's (the unit was chosen then; it is finished only if unchanged since).
            self._run_split(split_id, record, unit, exported, None, result, resumed=True)
        self.settle(result)

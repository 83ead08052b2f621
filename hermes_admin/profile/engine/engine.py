"""The deletion engine: the one path every deleting or archiving command and task takes.

A facade over its collaborators (docs/design.md §5):
- pacer.py: every write transaction, under the write lock, measured, its commit handed to group
  commit (group_commit.py, checkpointer.py: commits made durable by PASSIVE checkpoints on a
  thread of their own), then the turn a waiting Hermes writer is owed (turns.py); FTS5's merges
  kept out of the deletes, in short transactions of their own (fts_merges.py);
- export_ahead.py, packing.py: each unit exported before its delete commits (exports.py), packed by weight;
- deletes.py, rows.py: inside each transaction, its units' rows read again, a decision made from them
  (decisions.py: the same one a dry run makes in a read transaction), then applied (store/);
- splits.py: a unit too big for one transaction, deleted in steps, finished or undone;
- aftermath.py: once a commit is durable, its files removed (remover.py, unlinker.py), then its
  events fired through the outbox, so a crash right after a commit still delivers them;
- restore.py: exports back in; space.py: (incremental) vacuum; tokenizer.py: Hermes' CJK tokenizer.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from hermes_admin import stopping
from hermes_admin.model import Profile
from hermes_admin.profile import exports
from hermes_admin.profile.engine.aftermath import Aftermath, hook_bus
from hermes_admin.profile.engine.checkpointer import Checkpointer
from hermes_admin.profile.engine.decisions import Decision
from hermes_admin.profile.engine.delete_steps import DeleteSteps, Progress
from hermes_admin.profile.engine.deletes import Ask, Deletes, Recheck
from hermes_admin.profile.engine.export_ahead import ExportAhead, data_version, stop_note
from hermes_admin.profile.engine.noticed import announce
from hermes_admin.profile.engine.outcomes import Closed, Opened, carried
from hermes_admin.profile.exports import ExportFile, Settings
from hermes_admin.profile.engine.fts_merges import FtsMerges
from hermes_admin.profile.engine.group_commit import GroupCommit
from hermes_admin.profile.engine.outbox import Outbox
from hermes_admin.profile.engine.pacer import Pacer, first_budget
from hermes_admin.profile.engine.packing import units_by_count
from hermes_admin.profile.engine.remover import FileRemover
from hermes_admin.profile.engine.restore import restore_file
from hermes_admin.profile.engine.rows import Flip, close_stale_rows, decide_close, flip_archived
from hermes_admin.profile.engine.space import Space
from hermes_admin.profile.engine.splits import SplitDeletes
from hermes_admin.profile.engine.tokenizer import CJK_FTS_TABLE, Tokenizer
from hermes_admin.profile.engine.turns import Turns
from hermes_admin.profile.state_folder import ProfileLocks
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.hermes_config import HermesConfig, load as load_hermes_config
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store, sql
from hermes_admin.profile.store.connect import read_transaction, write_transaction
from hermes_admin.profile.store.read import journal_mode
from hermes_admin.hook_failures import HookFailure
from hermes_admin.results import Action, Result

FTS_TABLES = ("messages_fts", "messages_fts_trigram")  # Hermes' FTS5 indexes (its CJK one: tokenizer.py)


class Engine:
    """One profile's store, opened for maintenance: locks held, outbox replayed."""

    def __init__(self, profile: Profile, dry_run: bool = False, now: Callable[[], float] = time.time,
                 progress: Progress | None = None, exports: Settings | None = None,
                 config: HermesConfig | None = None, incremental: bool = True, env: Environment | None = None):
        self.profile, self.dry_run, self.now = profile, dry_run, now
        self.env = env if env is not None else Environment()  # the job's: -v, lock wait, installations
        self.incremental = incremental  # a VACUUM of ours switches the store to incremental auto-vacuum
        self.export_settings = exports or Settings()
        self._prunes = exports is not None  # only a command that knows the policy prunes old exports
        self.progress = progress or (lambda what, done, total, ended: None)
        self.config = config  # the profile's config.yaml, when the caller has read it already
        self._left: list[str] = []  # units of an interrupted split delete still left for the next run
        self._closed: Closed | None = None  # what closing did, once it has (close() says it again)
        self.space: Space | None = None  # free pages given back (space.py)
        self.locks: ProfileLocks | None = None
        self.store: Store | None = None
        self.outbox, self.bus, self.checkpointer = None, None, None  # Outbox, HookBus, Checkpointer
        self.remover: FileRemover | None = None  # committed sessions' files, removed by the remover process
        self.commits, self.turns = None, None  # GroupCommit; Turns: pauses for Hermes' writers (turns.py)
        self.fts: FtsMerges | None = None  # the FTS5 indexes' merging, out of the deletes
        self.pacer: Pacer | None = None  # every write transaction of ours
        self.export: ExportFile | None = None  # this run's export, made on the first unit deleted
        self.aftermath: Aftermath | None = None
        self._ahead, self._splits, self._steps = None, None, None  # ExportAhead, SplitDeletes, DeleteSteps
        self._references: list[tuple[str, str]] | None = None  # unknown tables pointing at sessions
        self._batched = False  # a caller's batch is under way: its files and events are settled when it ends

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> "Engine":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> Opened:
        """Locks taken, store opened, what an earlier run left finished; returns what that did. A
        failure closes what was opened, then is raised."""
        try:
            return self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> Opened:
        """The collaborators, each built once, after those it is given."""
        if self.config is None:
            self.config = load_hermes_config(self.profile.home, (), self.env.installations.managed_for(self.profile))
        if not self.dry_run:  # a dry run writes nothing anywhere: no lock file, no outbox
            self.locks = ProfileLocks(self.profile)  # kept before taken: what it set aside is said if it is held
            self.locks.__enter__()
        self.store = Store.open(self.profile, writable=not self.dry_run, lock_wait_s=self.env.lock_wait)
        self.tokenizer = Tokenizer(self.store, self.dry_run, self._tokenizer_loaded)
        self.deletes = Deletes(self.store, lambda: self.references, self.now, lambda: data_version(self.store))
        if self.dry_run:  # (its bus says who would listen: noticed.py; it starts no plugin process)
            self.aftermath = Aftermath(self.profile, True, bus=hook_bus(self.profile, self.config, self.env))
        else:
            self._open_writing()
        self.space = Space(self.store, self.pacer, self.incremental, self.dry_run)
        if self.dry_run:
            return Opened(tuple(self.config.warnings))
        recovered, self._left = self._splits.finish_all()  # before the replay: its events are committed
        replayed = self.aftermath.replay(self.store.db)
        return Opened(tuple(self.config.warnings), tuple(recovered), tuple(replayed))

    def _open_writing(self) -> None:
        """The collaborators of a run that writes."""
        db = self.store.db
        if journal_mode(self.store) == "wal":
            self.checkpointer = Checkpointer(self.profile.store_path)
        self.commits = GroupCommit(db, self.checkpointer)
        self.turns = Turns.of_store(db, self.profile.store_path, journal_mode(self.store) == "wal")
        self.fts = FtsMerges(db, [t for t in FTS_TABLES if self._has_index(t)])
        self.outbox = Outbox(self.profile)
        self.remover = FileRemover(str(self.profile.sessions_dir))
        self.bus = hook_bus(self.profile, self.config, self.env)
        self.aftermath = Aftermath(self.profile, False, self.outbox, self.bus, self.remover)
        self.pacer = Pacer(db, self.turns, self.commits, self.fts,
                           lambda work, result: self.aftermath.after_durable(work).fold_into(result))
        self.export = ExportFile(self.profile, self.export_settings, self.now, files=lambda: self.aftermath.files)
        self._ahead = ExportAhead(self.store, self.export, self.export_settings, self.pacer)
        self._splits = SplitDeletes(self.store, self.pacer, self.outbox, self.aftermath, self.deletes,
                                    lambda result: self._steps.settle(result, merge=True), self.require_tokenizer)
        self._steps = DeleteSteps(self._ahead, self._splits, self.deletes, self.pacer, self.commits, self.outbox,
                                  self.aftermath, self.progress)

    def _has_index(self, table: str) -> bool:
        """Is the FTS5 index there whole (the table and the shadow tables FtsMerges reads and writes)?"""
        return all(self.store.schema.has_table(table + part) for part in ("", "_config", "_data"))

    def close(self) -> Closed:
        """Everything closed, the locks last; returns what closing did. Called again (after a close
        that failed too), it closes nothing more and says the same."""
        if self._closed is not None:
            return self._closed
        pruned: list[str] = []
        removed: list[dict] = []
        export = self.export.path if self.export is not None else None
        try:
            for part in (self._ahead, self.export, self.bus, self.checkpointer, self.remover):
                if part is not None:  # an export under way finishes (a member is whole or not listed)
                    part.close()
            if self.store is not None:
                if self.store.writable and self.space is not None:  # (not built if opening failed before it)
                    self.space.passive_checkpoint()
                self.store.close()
            removed, pruned = self._prune_exports()
            if self.outbox is not None:
                self.outbox.forget_old()
                self.outbox.close()
            if self.locks is not None:
                self.locks.__exit__(None, None, None)
        finally:  # each collaborator's notes, in the order met: said even when closing failed, gathered once
            notes = [note for part in (self.locks, self.outbox, self.aftermath) if part is not None
                     for note in part.notes] + self._left + pruned
            self._closed = Closed(tuple(notes), tuple(removed), tuple(self.space.waits if self.space else ()),
                                  str(export) if export is not None and os.path.exists(export) else None)
            self.bus = self.store = self.outbox = self.locks = self.checkpointer = self.remover = None
            self.commits = self.turns = self.pacer = self._ahead = self._steps = None
        return self._closed

    def _prune_exports(self) -> tuple[list[dict], list[str]]:
        """Exports past `export_keep_days` go, each reported (a dry run names them); with what could not go."""
        if not (self._prunes and (self.outbox is not None or self.dry_run)):  # opened: this profile's run is ours
            return [], []
        return exports.at_run_end(self.profile, self.export_settings, self.now(), self.outbox, self.dry_run)

    # -- what callers read -------------------------------------------------------

    @property
    def references(self) -> list[tuple[str, str]]:
        if self._references is None:  # the schema does not change during a run: look once
            self._references = sql.foreign_references(self.store.db, self.store.schema)
        return self._references

    files = property(lambda self: self.aftermath.files)  # the aftermath's, for callers that list or remove
    listening = property(lambda self: self.aftermath.listening)  # is any plugin listening for events?

    def held_by_others(self) -> str | None:
        return self.space.held_by_others()

    def read(self, work: Callable):
        """`work(db)` on the engine's connection, for a caller's reads: between calls no transaction is open."""
        return work(self.store.db)

    def live_ids(self, now: float) -> dict[str, str]:
        """Sessions a live Hermes process is at work on (store/guards.py) -> why."""
        return sql.live_ids(self.store.db, self.store.schema, now)

    def blocked(self, ids: list[str]) -> dict[str, str]:
        """Ids a live Hermes is at work on, or a table we do not know points at -> why."""
        return self.deletes.blocked(self.store.db, ids)

    def as_left(self, rows: dict) -> dict:
        """A selection's rows as this run has left them (a dry run's closes: deletes.py)."""
        return self.deletes.as_left(rows)

    def write(self, work: Callable, weight: int | None, what: str, quiet: bool = True):
        """A caller's `work(db)` (a repair's) in one transaction paced like ours, not in the report."""
        return self.pacer.write(work, weight, Result(self.profile.name, Action.REPAIR, None, False), what, quiet=quiet).value

    def transaction(self, work: Callable):
        """`work(db)` in one write transaction, whole, neither paced nor quieted (an index rebuild)."""
        return write_transaction(self.store.db, work)

    def announce_noticed(self, now: float, retention_days: float, why_not: str | None) -> Result | None:
        """The sessions deleted outside hermes-admin since the last look, announced (noticed.py)."""
        return announce(self.profile, self.store, self.outbox, self.aftermath, now, retention_days, why_not)

    def announce_lost(self, ids: list[str], reason: str) -> list[HookFailure]:
        """Sessions a repair could not bring back, one event each (aftermath.py)."""
        return self.aftermath.announce_lost(ids, reason)

    def _call(self, action: Action, reason: str | None = None):  # a call's outcome; a failure carries it
        return carried(Result(self.profile.name, action, reason, self.dry_run))

    def reclaim(self) -> Result:
        """Free pages back to the file system, on a store in incremental auto-vacuum (space.py)."""
        with self._call(Action.COMPACT) as outcome:  # free pages back, as compact gives them
            self.space.reclaim(outcome)[1].fold_into(outcome)
        return outcome

    def vacuum_if_worth(self, asked: bool = True) -> Result:
        """A VACUUM when it is worth it and nobody holds the store (space.py); `vacuumed`: it ran (one
        statement: a failure has nothing done before it to carry)."""
        vacuumed, notes = self.space.vacuum_if_worth(asked)
        return Result(self.profile.name, Action.COMPACT, None, self.dry_run, vacuumed=vacuumed, notes=notes)

    def compact(self, force: bool) -> tuple[Result, dict]:
        """The operator's word (space.py): what it did, and the report's row of what it gave back."""
        with self._call(Action.COMPACT) as outcome:
            row, did = self.space.compact(force, outcome)
            did.fold_into(outcome)
        return outcome, row

    def remove_orphan_files(self, paths: list[str]) -> Result:
        """Per-session files whose session row is gone (no event: no rows went)."""
        with self._call(Action.DELETE) as outcome:
            self.aftermath.remove_orphan_files(paths).fold_into(outcome)
        return outcome

    def require_tokenizer(self, doing: str = "delete from") -> None:
        """Deleting (or restoring) messages fires the CJK FTS triggers, which need Hermes' tokenizer."""
        self.tokenizer.require(doing)

    def _tokenizer_loaded(self, conn) -> None:
        """From now on the CJK index is quieted and merged like the others."""
        if self.fts is not None and self._has_index(CJK_FTS_TABLE):
            self.fts.add(CJK_FTS_TABLE)

    # -- deletion --------------------------------------------------------------

    def coming(self, units: list[Unit]) -> None:
        """The units the next `delete` takes (a task's next part): their first export begins while
        this one's last deletes run (export_ahead.py)."""
        if self._ahead is not None:
            self._ahead.coming = units

    def delete(self, units: list[Unit], reason: str, recheck: Recheck | None = None,
               orphans: bool = False) -> Result:
        """Delete whole units, asked as one `Ask` (deletes.py): `recheck` re-applies the selection rule
        inside each transaction; `orphans=True` for units whose session rows are gone already.

        Returns what it did, filled as each transaction commits: after a failure, what committed
        before it is carried by the error (Interrupted.partial). Inside a caller's `batched` (a purge
        in parts) its files and events are left to the batch; else they are settled before it
        returns (after an error too).
        """
        ask = Ask(reason, recheck, orphans)
        with self._call(Action.DELETE, reason) as result:
            if not units:
                return result
            self.require_tokenizer()
            units = self.deletes.in_store_order(units)
            if self.dry_run:  # the same decision, each chunk in a read transaction; nothing exported or applied
                for decision in self._dry(units, result, lambda db, chunk: self.deletes.decide(db, chunk, {}, recheck,
                                                                                            orphans)):
                    self.aftermath.remove_files(decision.ids).fold_into(result)  # lists them: a dry run unlinks nothing
                return result
            synced_last = not self._batched  # settled here, its last commit synced; else when the batch ends
            with self._batch(result):
                self._steps.run(f"{self.profile.name}: {reason}", units, ask, synced_last, result)
        return result

    def batched(self, work: Callable[[], None]) -> Result:
        """`work()`: engine calls whose files and events are settled together when it ends (after an
        error too: what did commit gets its files removed and its events, with no merging on top of
        the error). Returns what settling did; a failure carries it (Interrupted)."""
        with self._call(Action.NONE) as outcome, self._batch(outcome):  # no unit of its own
            work()
        return outcome

    @contextmanager
    def _batch(self, result: Result) -> Iterator[Result]:
        """What `batched` settles, into `result`, when the `with` ends. Inside another batch, that
        one settles."""
        if self._batched or self.dry_run:
            yield result
            return
        self._batched = True
        failed = True
        try:
            yield result
            failed = False
        finally:
            self._batched = False
            self._steps.settle(result, merge=not failed)

    # -- row updates: archive, stale rows closed ---------------------------------------

    def set_archived(self, units: list[Unit], archived: bool, reason: str | None, swept: bool = False) -> Result:
        """Archive (or unarchive) whole units; an event fires only for a real unarchived -> archived change.
        `swept`: the inactivity sweep's (live units stay: rows.Flip), not a deliberate one. Returns what
        it did, filled as each transaction commits (a failure carries it, as `delete`'s)."""
        flip = Flip(archived, provenance=self.store.schema.has_column("sessions", "auto_archived"), swept=swept)
        with self._call(Action.ARCHIVE if archived else Action.UNARCHIVE, reason) as result:
            if self.dry_run:
                self._dry(units, result, lambda db, chunk: flip.decide(db, self.deletes, chunk))
                return result
            for chunk, weight in self._by_count(units, result):
                flip_archived(self.pacer, self.aftermath, self.deletes, flip, chunk, weight, reason,
                              result).fold_into(result)
        return result

    def close_stale(self, units: list[Unit], recheck: Recheck, now: float) -> Result:
        """Close open rows a dead process left (tasks/stale.py): `ended_at` the run's `now`, `end_reason`
        'startup_orphan_reap', as Hermes does; silent (nothing is deleted: no event, no file). Returns
        what it did, filled as each transaction commits (a failure carries it, as `delete`'s)."""
        with self._call(Action.CLOSE) as result:
            if self.dry_run:
                for decision in self._dry(units, result, lambda db, chunk: decide_close(db, self.deletes, chunk,
                                                                                      recheck)):
                    self.deletes.closed_in_dry_run.update(dict.fromkeys(decision.ids, now))  # for the later tasks
                return result
            for chunk, weight in self._by_count(units, result):
                close_stale_rows(self.pacer, self.deletes, chunk, weight, recheck, now, result).fold_into(result)
        return result

    def _dry(self, units: list[Unit], result: Result,
             decide: Callable[[object, list[Unit]], Decision]) -> list[Decision]:
        """A dry run: each chunk's decision, as its transaction would make it, in a short read transaction
        of its own (in a rollback journal a reader holds off Hermes' commits); nothing applied."""
        made = []
        for chunk, _ in self._by_count(units, result):
            made.append(read_transaction(self.store.db, lambda db: decide(db, chunk)))
            made[-1].outcome().fold_into(result)
        return made

    def _by_count(self, units: list[Unit], result: Result) -> Iterator[tuple[list[Unit], int]]:
        """Row updates (and a dry run's chunks): units by count, sized like the deletes; with their weight."""
        position = 0
        while position < len(units):
            if stopping.requested():
                result.stop = stop_note(len(units) - position, len(units))
                return
            budget = self.pacer.budget if self.pacer is not None else first_budget()  # as last measured
            chunk = units[position:position + units_by_count(budget, exports.UNIT_WEIGHT)]
            position += len(chunk)
            yield chunk, len(chunk) * exports.UNIT_WEIGHT

    # -- restore ---------------------------------------------------------------

    def restore(self, path: Path, wanted: set[str] | None, **how) -> tuple[Result, str | None]:
        """`hermes-admin restore`: an export's units back (restore.py; `how`: pin, other_profile).
        Returns what it did (a failure carries it) and the other profile's home it was made in, if any."""
        self.require_tokenizer("restore into")  # the messages put back fire the CJK triggers too
        with self._call(Action.RESTORE) as result:
            try:
                return result, restore_file(self.store, self.pacer, path, wanted, self.dry_run, result, **how)
            finally:  # what is back is no longer gone by our hand (noticed.py); after a failure too
                if self.outbox is not None:
                    self.outbox.back([i for done in result.done for i in done.ids])


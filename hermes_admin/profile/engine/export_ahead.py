"""Every unit exported before its delete commits, the next batches exported ahead on a thread.

Each batch of units is exported (and so weighed) before any of it is deleted; the next batches'
exports run on a thread of their own meanwhile (reading, JSON and compression are lock-free work:
they need not wait for the deletes, nor the deletes for them). The thread reads through a
read-only connection of its own, and is given the pacing as a value (pacer.Pace): it never reads
what the deleting thread changes. Once a delete's last batch is queued, the first batch of the
units said to come next (`coming`: a task's next part, which no delete of this one touches) are
queued too, sized as that delete would size them: its first batches are the ones it would otherwise
wait for, while the thread is idle here.
(docs/design.md §5)
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, NamedTuple

from hermes_admin import stopping
from hermes_admin.profile import exports
from hermes_admin.profile.engine import faults
from hermes_admin.profile.engine.deletes import Ask
from hermes_admin.profile.exports import ExportError, ExportFile, Exported, Settings
from hermes_admin.profile.engine.packing import next_transaction
from hermes_admin.profile.engine.pacer import Pace, Pacer
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.connect import open_readonly
from hermes_admin.profile.store import pragmas, unit_rows

EXPORT_UNITS = 500  # units per export member: one fsync and manifest write each
FIRST_EXPORT_UNITS = 8  # the first batch, small: the deletes wait for it, and start at once
# Each batch is exported while the one before it (half its size) is deleted, which takes longer:
# growing faster made the deletes wait for the big batch at each part of the store.
EXPORT_GROWTH = 2
EXPORTS_AHEAD = 2  # batches exported ahead of the deletes: a batch of big sessions is absorbed by the next


STOPPED = "stopped on request"  # how every stop note begins (a result's `stop`)
REST_WAITS = f"{STOPPED}: the rest of the store waits for the next run"  # a stop between two parts


def _grown(size: int) -> int:
    """The size of the batch queued after one of `size`."""
    return min(EXPORT_UNITS, EXPORT_GROWTH * size)


def stop_note(left: int, selected: int) -> str:
    """What a stop request between transactions says of the task it ends. Not "N left for the next
    run": the next run selects again, over every task (those after this one did not run), so only a
    dry run then can say how many are left."""
    return (f"{STOPPED}: {left} of the {selected} unit(s) this task selected not reached "
            "(the next run selects again; `--dry-run` counts what is left)")


class Step(NamedTuple):
    """One transaction of whole units, or one unit too big for one (`split`: deleted in steps)."""
    units: list[Unit]
    exported: dict[str, Exported]  # their exports, by session id
    split: bool
    last: bool  # nothing follows it in this call
    weight: int  # what it carries (exports.ROW_WEIGHT, UNIT_WEIGHT)
    files_left: tuple[str, ...] = ()  # files the delete removes that the export could not carry


class Primed(NamedTuple):
    """The first batches of the units said to come next, queued on the thread: each batch's units'
    ids and its export, and what they were asked as (a delete of the same reason and kind takes
    them, with those of their units it holds first; a unit it does not hold was exported and stays,
    as after a stop)."""
    batches: list[tuple[set[tuple[str, ...]], Future]]
    ask: tuple[str, bool]


class ExportAhead:
    """The export of the units a delete takes, a batch ahead of it. `export`: this run's export file.
    `coming`: the units the next delete will take (set by the engine, or empty)."""

    def __init__(self, store: Store, export: ExportFile, settings: Settings, pacer: Pacer):
        self.store, self.export, self.settings, self.pacer = store, export, settings, pacer
        self._thread: ThreadPoolExecutor | None = None  # made on first use
        self._reads = None  # its read-only connection, shared with this thread
        self.coming: list[Unit] = []
        self._primed: Primed | None = None

    def close(self) -> None:
        if self._thread is not None:  # an export under way finishes (a member is whole or not listed)
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._thread = None
        if self._reads is not None:
            self._reads.close()
            self._reads = None

    def steps(self, units: list[Unit], ask: Ask) -> Iterator[Step]:
        """The transactions of a delete, in order (packing.py), each batch exported first (`ask`: its
        reason goes into the export's manifest; orphans have nothing to export). A stop request ends
        them between transactions (what is left waits for the next run: the steps end early)."""
        position, weights, exported = 0, {}, {}
        units, ahead = self._with_primed(units, ask)  # (where a batch starts, its size, its export)
        queued_to = ahead[-1][0] + ahead[-1][1] if ahead else 0  # where the batches made so far end
        while position < len(units):
            if stopping.requested():
                return
            if units[position].session_id not in weights:
                weights, exported, queued_to = self._batch_at(units, position, ask, ahead, queued_to)
                if queued_to >= len(units) and self.coming and not stopping.requested():
                    self._prime(ask)
            pace = self.pacer.pace()
            packed = next_transaction([weights.get(u.session_id) for u in units[position:]], pace.budget,
                                      pace.too_big, ask.orphans)
            chunk = units[position:position + packed.count]
            position += packed.count
            found = {u.session_id: exported[u.session_id] for u in chunk if u.session_id in exported}
            if packed.split:
                found = found or self._export_now(chunk[0], ask.reason)
            left = tuple(line for done in found.values() for line in done.files_left)  # said in the report
            if packed.split:  # its rows gone (nothing exported): a transaction of its own says so
                yield Step(chunk, found, bool(found), position >= len(units), packed.weight, left)
            else:
                yield Step(chunk, found, False, position >= len(units) or stopping.requested(), packed.weight, left)

    def _batch_at(self, units: list[Unit], position: int, ask: Ask, ahead: deque,
                  queued_to: int) -> tuple[dict, dict, int]:
        """The weights and exports of the batch starting at `position`, and the next ones queued."""
        if ahead and ahead[0][0] == position:
            _, size, export = ahead.popleft()
            weights, exported = export.result()
        else:  # the first batch, small: its export is the one the deletes wait for
            ahead.clear()
            size = FIRST_EXPORT_UNITS
            weights, exported = self._prepare(units[position:position + size], ask, self._data_version(),
                                              self.pacer.pace())
            queued_to = position + size
        while len(ahead) < EXPORTS_AHEAD and queued_to < len(units):
            size = _grown(ahead[-1][1] if ahead else size)
            ahead.append((queued_to, size, self._queue(units[queued_to:queued_to + size], ask)))
            queued_to += size
        return weights, exported, queued_to

    def _prime(self, ask: Ask) -> None:
        """The first batches of `coming` queued on the thread, behind this delete's last ones: as many
        as a delete has made by its first transaction (its first and those it queues ahead)."""
        coming, self.coming = self.coming, []
        batches, at, size = [], 0, FIRST_EXPORT_UNITS
        while at < len(coming) and len(batches) <= EXPORTS_AHEAD:
            batch = coming[at:at + size]
            batches.append(({u.ids for u in batch}, self._queue(batch, ask)))
            at, size = at + len(batch), _grown(size)
        self._primed = Primed(batches, (ask.reason, ask.orphans))

    def _queue(self, batch: list[Unit], ask: Ask) -> Future:
        """`batch`'s export on the thread, given the store's version and the pacing as this thread
        sees them now (both are read on the deleting thread only)."""
        return self._exporter().submit(self._prepare, batch, ask, self._data_version(), self.pacer.pace())

    def _with_primed(self, units: list[Unit], ask: Ask) -> tuple[list[Unit], deque]:
        """`units` with those of the primed batches first, batch by batch (the order is only for
        locality), and those batches as the batches ahead of this delete; or as they are, and none,
        where this delete is asked otherwise. A batch holding none of them is let go (cancelled if
        not begun, its failure raised if it failed, as this delete's own would be)."""
        primed, self._primed = self._primed, None
        ahead: deque = deque()
        if primed is None:
            return units, ahead
        first: list[Unit] = []
        for ids, export in primed.batches:
            held = [u for u in units if u.ids in ids] if primed.ask == (ask.reason, ask.orphans) else []
            if held:
                ahead.append((len(first), len(held), export))
                first += held
            elif not export.cancel():
                export.result()
        taken = {u.ids for u in first}
        return first + [u for u in units if u.ids not in taken], ahead

    def _exporter(self) -> ThreadPoolExecutor:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="hermes-admin-export")
        return self._thread

    def _reader(self):
        """The exports' own read-only connection, one for both threads (each unit read in one snapshot)."""
        if self._reads is None:
            self._reads = open_readonly(self.store.profile.store_path, shared=True,  # waits as the engine's does
                                        lock_wait_s=getattr(self.store.db, "lock_wait_s", None))
        return self._reads

    def _prepare(self, batch: list[Unit], ask: Ask, version: int | None, pace: Pace) -> tuple[dict[str, int], dict[str, Exported]]:
        """Weights of a batch of units, and the export of those that must have one, on disk and verified.

        Every unit is exported unless `export_keep_days` is 0; then only those too big for one
        transaction. Orphan rows (no session row) have nothing to export in Hermes' shape.
        `version`: the store's data_version as the deleting connection saw it before this began;
        `pace`: the pacing as the deleting thread measured it then (which units are too big for one).
        """
        db = self._reader()
        if ask.orphans or self.settings.keep_days <= 0:
            weights = self._weigh(batch, db)
            big = [] if ask.orphans else [u for u in batch if pace.too_big(weights[u.session_id])]
            written = self._write_export(big, ask.reason, db, version) if big else {}
        else:
            written = self._write_export(batch, ask.reason, db, version)
            weights = {u.session_id: written[u.session_id].weight if u.session_id in written
                       else exports.UNIT_WEIGHT for u in batch}
        faults.point("batch_exported", units=batch)
        return weights, written

    def _export_now(self, unit: Unit, reason: str) -> dict[str, Exported]:
        found = self._write_export([unit], reason, self._reader(), self._data_version()).get(unit.session_id)
        return {unit.session_id: found} if found is not None else {}

    def _write_export(self, units: list[Unit], reason: str, db, version: int | None) -> dict[str, Exported]:
        try:
            written = self.export.write(db, self.store.schema, units, reason)
        except ExportError as exc:
            raise self.store.error(f"{exc}; no session of this profile was deleted after it") from None
        for item in written.values():
            item.store_version = version
        return written

    def _data_version(self) -> int:
        """SQLite's count of other connections' commits, as the deleting connection sees them (on the
        engine's own thread only: peewee keeps a connection per thread, and another would count its own)."""
        return data_version(self.store)

    def _weigh(self, units: list[Unit], db) -> dict[str, int]:
        """Each unit's weight from the store (as an export would have measured it, near enough)."""
        ids = [i for unit in units for i in unit.ids]
        of_session = {sid: int(chars) + count * exports.ROW_WEIGHT for sid, (count, chars)
                      in unit_rows.message_sizes(db, self.store.schema, ids).items()}
        return {u.session_id: exports.UNIT_WEIGHT + sum(of_session.get(i, 0) for i in u.ids) for u in units}


def data_version(store: Store) -> int:
    """SQLite's count of other connections' commits, as the store's connection on this thread sees them."""
    return pragmas.data_version(store.db)

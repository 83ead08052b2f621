"""The deletion engine: the one path every deleting or archiving command and task takes.

Order inside each transaction (Hermes' own, required by its foreign keys and
FTS triggers): orphan surviving children, delete the doomed sessions'
messages (while their rows still exist: v30's trigram trigger looks them up),
delete usage rows and the sessions, drop system prompts nobody references.
Then commit, then remove the units' files, then fire the events.

Transactions are `BEGIN IMMEDIATE`, sized by time: ~20 ms while another
writer is seen, ~40 ms while none is (FTS5 merges of a big doclist make a few longer).
Units are weighed by the bytes of their messages; one too big for a
transaction is exported first and deleted in steps (splits.py). Every unit is
exported before its delete commits (exports.py; a thread exports the next
batch while the current one is deleted). Beside them:
- checkpointer.py and group_commit.py: commits without an fsync, made
  durable by PASSIVE checkpoints on a thread of their own; files and events
  wait until a checkpoint (or the last, synced, commit) covers their rows;
- remover.py and unlinker.py: file removal in a worker process;
- turns.py: after each commit the lock is left free until a waiting Hermes
  writer has had its turn;
- fts_merges.py: FTS5's segment merges kept out of the deletes, done in
  short transactions of their own.
Events go through the outbox, so a crash right after a commit still delivers
them on the next start.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from collections import deque

from pathlib import Path

import peewee
from typing import Callable

from hermes_admin import stopping
from hermes_admin.profile import guards
from hermes_admin.profile.engine.checkpointer import Checkpointer
from hermes_admin.profile.engine.group_commit import GroupCommit
from hermes_admin.profile.engine import exports
from hermes_admin.profile.engine.exports import ExportError, ExportFile, Exported, Settings
from hermes_admin.profile.engine.files import FileIndex, removable, unsafe_id
from hermes_admin.profile.engine.fts_merges import FtsMerges
from hermes_admin.profile.guards import chunks, marks
from hermes_admin.profile.hermes_config import HermesConfig
from hermes_admin.profile.hermes_config import load as load_hermes_config
from hermes_admin.profile.engine.holders import held_by_its_owner, store_holders
from hermes_admin.protocol import Profile
from hermes_admin.profile.hooks.bus import DeliveryStopped, HookBus
from hermes_admin.profile.hooks.discovery import discover as discover_plugins
from hermes_admin.profile.hooks.discovery import safe_mode
from hermes_admin.profile import installation
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.engine.locks import ProfileLocks
from hermes_admin.profile.engine.outbox import Event, Outbox, OutboxError
from hermes_admin.results import Done, Result
from hermes_admin.profile.engine.remover import FileRemover
from hermes_admin.profile.engine.splits import Recheck, SplitDeletes
from hermes_admin.report import Progress
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.connect import is_lock_error, write_transaction
from hermes_admin.profile.store.read import journal_mode, load_rows
from hermes_admin.profile.tasks.retention import REAPED
from hermes_admin.profile.engine.turns import Turns

VACUUM_FREE_RATIO = 0.25
INCREMENTAL = 2  # PRAGMA auto_vacuum's value for incremental auto-vacuum
RECLAIM_FIRST_PAGES = 256  # the first incremental-vacuum step; later ones sized by the time it took
CHECKPOINT_SETTLE_S = 1.0  # how long a reclaim tries for the checkpoint that shrinks the file
FTS_TABLES = ("messages_fts", "messages_fts_trigram")
# Hermes' CJK index: its tokenizer is a library of Hermes' own, loaded before anything is deleted
# or restored where its triggers are (without them our deletes never write to it). The index
# joins the others once the library is loaded: before, FTS5 cannot so much as open it.
CJK_FTS_TABLE = "messages_fts_cjk"
# Typical BEGIN-to-COMMIT while another writer is about. A Hermes writer that waits polls the lock
# at 18, 33 and 53 ms of waiting: so what sets its wait is our longest transactions, not the
# typical one. Kept under ~30 ms (SPLIT_MARGIN_S, and merge steps sized by their slowest rate),
# 20 ms ones keep it at 33 ms. Measured on R under the writer, one in-process run each, less
# Hermes' optimize: at 12 ms (units split only past 50 ms, merges sized by their median rate),
# 54.7 s, p99 wait 33.8 ms; at 20 ms so, 39.8 s but p99 53.9 ms; at 20 ms with the tail cut,
# 41.6 s and p99 33.7 ms (max 53.8), in two more runs 42.3 and 45.3 s, 33.8 ms (max 36.0 and 68.5);
# at 25 ms, 40.1 s and 33.9 ms (max 59.7).
TARGET_HOLD_S = 0.020
# With no other writer seen for a second nobody waits on the lock, and each transaction costs a
# flush of both FTS indexes and a pause: fewer, longer ones. A writer that comes meanwhile waits
# for one of them and the turn after it (where a process holds the store open: turns.py), and
# from its first commit on the transactions are short again.
IDLE_HOLD_S = 0.040
MAX_UNITS_PER_TXN = 1024
# The cost model: a unit's weight is the bytes of its messages plus a fixed cost per row and unit
# (exports.ROW_WEIGHT, UNIT_WEIGHT); the lock time per weight is measured on every transaction.
# Before the first measurement: Hermes' own stores (both FTS indexes tokenize every byte) take
# ~0.4-0.5 us per byte here; a little more, to be on the safe side.
FIRST_S_PER_WEIGHT = 0.6e-6
MIN_WEIGHT = 4096  # the least a transaction is given, whatever the measurement says
# A unit goes in several transactions when one would hold the lock longer than this, or longer
# than SPLIT_MARGIN_S past the time aimed at (while another writer is about: 30 ms); units that
# fit are packed by the time aimed at, and a split unit's steps too.
SPLIT_AT_S = 0.050
SPLIT_MARGIN_S = 0.010
RATE_WINDOW = 15
EXPORT_UNITS = 500  # units per export member: one fsync and manifest write each
FIRST_EXPORT_UNITS = 8  # then twice as many each time, up to 500: the deletes start at once
# Each batch is exported while the one before it (half its size) is deleted, which takes longer:
# growing 8 times (8, 64, 500) made W1's and W10's deletes wait for the 500 at each part of the store.
EXPORT_GROWTH = 2
EXPORTS_AHEAD = 2  # batches exported ahead of the deletes
# FTS5's merging (fts_merges.py), in transactions of its own: at most this many between two deletes
MERGE_STEPS = 64
MERGE_STEPS_AT_END = 400  # and after the last one: what automerge would have left, no more



def _sessions_folder_notes(profile: Profile) -> list[str]:
    """A missing or odd `sessions/` is worth a warning: no transcript file can be removed there."""
    try:
        st = os.lstat(profile.sessions_dir)
    except FileNotFoundError:
        return [f"{profile.sessions_dir}: missing; no transcript files to remove"]
    except OSError as exc:
        return [f"{profile.sessions_dir}: {exc.strerror}; transcript files are left alone"]
    if stat.S_ISLNK(st.st_mode):
        return []  # the owner's own choice: followed as the owner, never as anyone else
    if not stat.S_ISDIR(st.st_mode):
        return [f"{profile.sessions_dir}: not a folder; transcript files are left alone"]
    return []


class _Reads:
    """A read-only connection for the export thread, with the one method exports.py calls."""

    def __init__(self, path: Path):
        from hermes_admin.profile.store.connect import readonly_uri
        from hermes_admin.profile.store.keep_wal import connect

        self.conn = connect(readonly_uri(path), uri=True, isolation_level=None, check_same_thread=False,
                                    timeout=5.0)
        self.conn.execute("PRAGMA query_only=1")

    def execute_sql(self, sql: str, params=()):
        return self.conn.execute(sql, params)

    def snapshot(self):
        """One read transaction: a unit's rows, usage and messages as of one moment."""
        from contextlib import contextmanager

        @contextmanager
        def reading():
            self.conn.execute("BEGIN")
            try:
                yield
            finally:
                self.conn.execute("COMMIT")
        return reading()

    def close(self) -> None:
        self.conn.close()


class Engine(SplitDeletes):
    """One profile's store, opened for maintenance: locks held, outbox replayed."""

    def __init__(self, profile: Profile, dry_run: bool = False, now: Callable[[], float] = time.time,
                 progress: Progress | None = None, exports: Settings | None = None,
                 config: HermesConfig | None = None, lock_wait_s: float | None = None, incremental: bool = True):
        self.profile = profile
        self.incremental = incremental  # a VACUUM of ours switches the store to incremental auto-vacuum
        self.lock_wait_s = lock_wait_s  # how long another writer may hold the lock without progress
        self.export_settings = exports or Settings()
        self._prunes = exports is not None  # only a command that knows the policy prunes old exports
        self._session_columns: list[str] | None = None
        self._split_done: tuple | None = None  # (rows, committed at, held) of a split's last step
        self.export: ExportFile | None = None  # this run's export, made on the first unit deleted
        self.recovered: list[Result] = []  # units of an interrupted split delete, finished or restored
        self._ahead = None  # the export thread (_steps), made on first use
        self._reads: _Reads | None = None  # its read-only connection
        self.progress = progress or Progress()
        self.dry_run = dry_run
        self.now = now
        self.locks: ProfileLocks | None = None
        self.store: Store | None = None
        self.outbox: Outbox | None = None
        self.bus: HookBus | None = None
        self.checkpointer: Checkpointer | None = None
        self.remover: FileRemover | None = None  # committed sessions' files, removed by a worker
        self.commits: GroupCommit | None = None
        self.turns: Turns | None = None  # pauses between our transactions, for Hermes' writers
        self.fts: FtsMerges | None = None  # the FTS5 indexes' merging, out of the deletes
        self.config = config  # the profile's config.yaml, when the caller has read it already
        self._files: FileIndex | None = None
        self._references: list[tuple[str, str]] | None = None  # unknown tables pointing at sessions
        self.replayed: list[str] = []  # hook failures while replaying the outbox
        self.notes: list[str] = []  # leftovers set aside while opening (locks.py)
        self._s_per_weight = FIRST_S_PER_WEIGHT  # seconds of write lock per unit of weight (smoothed)
        self._rates: list[float] = []  # the last transactions' seconds per weight
        self._tokenizer_on = None  # the connection Hermes' CJK tokenizer was loaded on
        self._budget = int(TARGET_HOLD_S / FIRST_S_PER_WEIGHT)  # the weight the next transaction may carry
        self._last_weight = 0

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> "Engine":
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _open(self) -> None:
        if self.config is None:
            self.config = load_hermes_config(self.profile.home)
        if self.dry_run:  # a dry run writes nothing anywhere: no lock file, no outbox
            self.store = Store.open(self.profile)
            return
        self.locks = ProfileLocks(self.profile, self.notes).__enter__()
        self.store = Store.open(self.profile, writable=True, lock_wait_s=self.lock_wait_s)
        if self.in_wal_mode():
            self.checkpointer = Checkpointer(self.profile.store_path)
        self.commits = GroupCommit(self.store.db, self.checkpointer)
        self.turns = Turns(self.store.db, held=lambda: held_by_its_owner(self.profile.store_path))
        self.fts = FtsMerges(self.store.db, [t for t in FTS_TABLES if self._has_index(t)])
        self.outbox = Outbox(self.profile, self.notes)
        self.remover = FileRemover(str(self.profile.sessions_dir))
        self.bus = self._bus()
        self.export = ExportFile(self.profile, self.export_settings, self.now)
        self._finish_splits()  # before the replay: a finished split's event is then committed
        self.replayed = self._replay()

    def _bus(self) -> HookBus:
        # Opt-in: with nothing in plugins.enabled, no plugin Hermes loads that way hears anything,
        # so no installation is looked for, no folder scanned, no worker started.
        if not self.config.plugins_enabled or safe_mode():
            return HookBus(self.profile, [], self.config.hook_timeout)
        lookup = installation.for_profile(self.profile)
        timeout, _ = installation.hook_timeout(self.config, lookup)
        if lookup.installation is not None:
            return HookBus(self.profile, [], timeout, installation=lookup.installation, notes=lookup.notes)
        return HookBus(self.profile, discover_plugins(self.profile.home, self.config), timeout, notes=lookup.notes)

    def _has_index(self, table: str) -> bool:
        """Is the FTS5 index there whole (the table and the shadow tables FtsMerges reads and writes)?"""
        return all(self.store.schema.has_table(table + part) for part in ("", "_config", "_data"))

    def close(self) -> None:
        if self._ahead is not None:  # an export under way finishes (a member is whole or not listed)
            self._ahead.shutdown(wait=True, cancel_futures=True)
            self._ahead = None
        if self._reads is not None:
            self._reads.close()
            self._reads = None
        if self.export is not None:
            self.export.close()
        if self.bus is not None:
            self.bus.close()
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.remover is not None:
            self.remover.close()
        if self.store is not None:
            if self.store.writable:
                self._passive_checkpoint()
            self.store.close()
        if self.outbox is not None:
            self._prune_exports()
            self.outbox.forget_old()
            self.outbox.close()
        if self.locks is not None:
            self.locks.__exit__(None, None, None)
        self.bus = self.store = self.outbox = self.locks = self.checkpointer = self.remover = None
        self.commits = self.turns = None

    @property
    def references(self) -> list[tuple[str, str]]:
        if self._references is None:  # the schema does not change during a run: look once
            self._references = guards.foreign_references(self.store.db, self.store.schema)
        return self._references

    @property
    def files(self) -> FileIndex:
        if self._files is None:  # one scan of sessions/ per run; the first need of it says if it is odd
            self.notes += _sessions_folder_notes(self.profile)
            self._files = FileIndex.scan(self.profile.sessions_dir)
        return self._files

    def in_wal_mode(self) -> bool:
        return journal_mode(self.store) == "wal"

    def _passive_checkpoint(self) -> None:
        try:
            if self.in_wal_mode():
                self.store.db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception:
            pass  # a checkpoint is a courtesy; Hermes' own writers checkpoint too

    # -- shared checks ---------------------------------------------------------

    def require_tokenizer(self, doing: str = "delete from") -> None:
        """Deleting (or restoring) messages fires the CJK FTS triggers, which need Hermes' tokenizer."""
        conn = self.store.db.connection()
        if not self.store.schema.has_cjk_triggers or self._tokenizer_on is conn:
            return
        candidates = [os.environ.get("HERMES_FTS5_CJK_SO"), str(self.profile.home / "lib" / "libfts5_cjk.so")]
        library = next((c for c in candidates if c and os.path.isfile(c)), None)
        if library is None:
            raise self.store.error(
                "CJK full-text triggers need the cjk_unicode61 tokenizer: set HERMES_FTS5_CJK_SO or install "
                f"{self.profile.home / 'lib' / 'libfts5_cjk.so'}; refusing to {doing} this store")
        if not hasattr(conn, "enable_load_extension"):
            raise self.store.error(
                f"CJK full-text triggers need {library}, but this Python's sqlite3 cannot load "
                f"extensions; refusing to {doing} this store")
        if self.dry_run:
            return
        try:
            conn.enable_load_extension(True)
            conn.load_extension(library)
            conn.enable_load_extension(False)
        except sqlite3.Error as exc:
            raise self.store.error(f"cannot load the CJK tokenizer {library}: {exc}; refusing to {doing} this store") from exc
        self._tokenizer_loaded(conn)

    def _tokenizer_loaded(self, conn) -> None:
        """The CJK tokenizer is there for this connection's life: once is enough, and the CJK
        index can be quieted and merged like the others from now on."""
        self._tokenizer_on = conn
        if self.fts is not None and self._has_index(CJK_FTS_TABLE):
            self.fts.add(CJK_FTS_TABLE)

    def _screen(self, units: list[Unit], result: Result) -> list[Unit]:
        """Drop units with a guarded member (a dry run's stand-in for the check each transaction makes)."""
        ids = [i for unit in units for i in unit.ids]
        blocked = guards.blocked(self.store.db, self.store.schema, ids, self.now(), self.references)
        fit = []
        for unit in units:
            why = next((blocked[i] for i in unit.ids if i in blocked), None)
            if why:
                result.skipped.append({"session_id": unit.session_id, "ids": list(unit.ids), "why": why})
            else:
                fit.append(unit)
        return fit

    # -- deletion --------------------------------------------------------------

    def delete(self, units: list[Unit], reason: str, recheck: Recheck | None = None,
               orphans: bool = False, more: bool = False) -> Result:
        """Delete whole units. `recheck` re-applies the selection rule inside each transaction.

        `orphans=True` is for units whose session rows are already gone (message
        and usage rows left behind): they go without the existence check.
        `more=True` when another call follows at once (a purge in batches): its files
        and events are left to that call, and the caller ends with `settle()`.
        """
        result = Result(self.profile.name, "delete", reason, self.dry_run)
        if not units:
            return result
        self.require_tokenizer()
        units = self._in_store_order(units)
        if self.dry_run:
            for unit in (units if orphans else self._screen(units, result)):
                result.done.append(self._unit_report(unit, list(unit.ids)))
                self._remove_files(list(unit.ids), result)  # lists them: a dry run unlinks nothing
            return result
        self.progress.start(f"{self.profile.name}: {reason}", len(units))
        try:
            for chunk, exported, split, last in self._steps(units, reason, orphans, result):
                if split:
                    self._split(chunk[0], exported[chunk[0].session_id], reason, recheck, result)
                else:
                    self._delete_chunk(chunk, exported, last and not more, reason, recheck, orphans, result)
                self.progress.advance(len(chunk))
                self._merge_owed(result, MERGE_STEPS)
        except BaseException as exc:
            exc.partial_result = result  # what committed before the failure (actions/common.act_in_parts)
            raise
        finally:
            self.progress.stop()
            if not more:  # also after an error: what did commit gets its files removed and its events
                self.settle(result)
        return result

    def settle(self, result: Result) -> None:
        """Once every commit so far is durable: its files removed, its events fired, all in `result`."""
        if self.dry_run:
            return
        try:
            if sys.exc_info()[1] is None:  # settling after an error: no merging on top of it
                self._merge_owed(result, MERGE_STEPS_AT_END)
            self._after_durable(self.commits.flush(), result)
        finally:
            self._collect_files(result)
            if self.bus is not None:
                result.hook_failures += self.bus.repeats()

    @property
    def budget(self) -> int:
        """The weight the next transaction may carry (see _account)."""
        return self._budget

    def _too_big(self, weight: int) -> bool:
        """Would one transaction of this weight hold the lock too long (as measured so far)?"""
        split_at = min(SPLIT_AT_S, self._hold_target() + SPLIT_MARGIN_S)
        return weight > self._budget and weight * self._s_per_weight > split_at

    def _steps(self, units: list[Unit], reason: str, orphans: bool, result: Result):
        """(units, their exports, False, last) for one transaction of whole units, as many as the time
        allows, or ([unit], its export, True, last) for a unit too big for one, deleted in steps (_split).

        Each batch of units is exported (and so weighed) before any of it is deleted; the next
        batches' exports run on a thread of their own meanwhile (reading, JSON and compression are
        lock-free work: they need not wait for the deletes, nor the deletes for them). A stop
        request ends the run between transactions (what is left waits for the next run).
        """
        position, weights, exported = 0, {}, {}
        ahead: deque = deque()  # (where a batch starts, its size, its export queued or running on the thread)
        queued_to = 0  # where the batches made so far end
        while position < len(units):
            if stopping.requested():
                result.notes.append(f"stopped on request: {len(units) - position} unit(s) left for the next run")
                return
            if units[position].session_id not in weights:
                if ahead and ahead[0][0] == position:
                    _, size, export = ahead.popleft()
                    weights, exported = export.result()
                else:  # the first batch, small: its export is the one the deletes wait for
                    ahead.clear()
                    size = FIRST_EXPORT_UNITS
                    weights, exported = self._prepare(units[position:position + size], reason, orphans,
                                                      self._data_version())
                    queued_to = position + size
                # Batches grow to EXPORT_UNITS, and two wait ahead: the thread exports while the
                # deletes go on, a batch of big sessions is absorbed by the next one's lead.
                while len(ahead) < EXPORTS_AHEAD and queued_to < len(units):
                    size = min(EXPORT_UNITS, EXPORT_GROWTH * (ahead[-1][1] if ahead else size))
                    ahead.append((queued_to, size, self._exporter().submit(
                        self._prepare, units[queued_to:queued_to + size], reason, orphans, self._data_version())))
                    queued_to += size
            first = units[position]
            if not orphans and self._too_big(weights[first.session_id]):
                position += 1
                found = exported.get(first.session_id) or self._export_now(first, reason)
                if found is None:  # its rows are gone: the transaction says so
                    yield [first], {}, False, position >= len(units)
                else:
                    yield [first], {first.session_id: found}, True, position >= len(units)
                continue
            chunk, weight = [], 0
            while position < len(units) and len(chunk) < MAX_UNITS_PER_TXN:
                unit = units[position]
                w = weights.get(unit.session_id)
                if w is None or (chunk and (weight + w > self._budget or (not orphans and self._too_big(w)))):
                    break
                chunk.append(unit)
                weight += w
                position += 1
            self._last_weight = max(weight, 1)
            found = {u.session_id: exported[u.session_id] for u in chunk if u.session_id in exported}
            yield chunk, found, False, position >= len(units) or stopping.requested()

    def _exporter(self):
        """The thread that exports the next batch, with a read-only connection of its own."""
        if self._ahead is None:
            from concurrent.futures import ThreadPoolExecutor

            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="hermes-admin-export")
        return self._ahead

    def _reader(self):
        if self._reads is None:
            self._reads = _Reads(self.profile.store_path)
        return self._reads

    def _prepare(self, batch: list[Unit], reason: str, orphans: bool,
                 version: int | None = None) -> tuple[dict[str, int], dict[str, Exported]]:
        """Weights of a batch of units, and the export of those that must have one, on disk and verified.

        Every unit is exported unless `export_keep_days` is 0; then only those too big for one
        transaction. Orphan rows (no session row) have nothing to export in Hermes' shape.
        On the export thread or not, it reads through the export's own read-only connection.
        `version`: the store's data_version as the deleting connection saw it before this began.
        """
        db = self._reader()  # its own connection, whichever thread: each unit read in one snapshot
        if orphans or self.export_settings.keep_days <= 0:
            weights = self._weigh(batch, db)
            if orphans:
                return weights, {}
            big = [u for u in batch if self._too_big(weights[u.session_id])]
            return weights, self._write_export(big, reason, db, version) if big else {}
        written = self._write_export(batch, reason, db, version)
        weights = {u.session_id: written[u.session_id].weight if u.session_id in written else exports.UNIT_WEIGHT
                   for u in batch}
        return weights, written

    def _export_now(self, unit: Unit, reason: str) -> Exported | None:
        return self._write_export([unit], reason, version=self._data_version()).get(unit.session_id)

    def _write_export(self, units: list[Unit], reason: str, db=None, version: int | None = None) -> dict[str, Exported]:
        try:
            written = self.export.write(db or self._reader(), self.store.schema, units, reason)
        except ExportError as exc:
            raise self.store.error(f"{exc}; no session of this profile was deleted after it") from None
        for item in written.values():
            item.store_version = version
        return written

    def _data_version(self) -> int:
        """SQLite's count of other connections' commits, as this engine's connection sees them (on the
        engine's own thread only: peewee keeps a connection per thread, and another would count its own)."""
        return self.store.db.execute_sql("PRAGMA data_version").fetchone()[0]

    def _text_size(self, each: str) -> str:
        """SQL for the bytes of a message's text columns (what FTS5 tokenizes, near enough)."""
        texts = [c for c in ("content", "tool_calls", "reasoning", "reasoning_content", "api_content")
                 if self.store.schema.has_column("messages", c)]
        return " + ".join(each.format(c) for c in texts) or "0"

    def _weigh(self, units: list[Unit], db) -> dict[str, int]:
        """Each unit's weight from the store (as an export would have measured it, near enough)."""
        size = self._text_size("TOTAL(LENGTH({}))")
        of_session: dict[str, int] = {}
        ids = [i for unit in units for i in unit.ids]
        for part in chunks(ids):
            for sid, count, chars in db.execute_sql(
                    f"SELECT session_id, COUNT(*), {size} FROM messages WHERE session_id IN ({marks(part)}) "
                    f"GROUP BY session_id", part).fetchall():
                of_session[sid] = int(chars or 0) + count * exports.ROW_WEIGHT
        return {u.session_id: exports.UNIT_WEIGHT + sum(of_session.get(i, 0) for i in u.ids) for u in units}

    @property
    def listening(self) -> bool:
        """Events are kept (outbox) and delivered only when a plugin of this profile listens."""
        return self.bus is not None and self.bus.active

    def _in_store_order(self, units: list[Unit]) -> list[Unit]:
        """Units in the order their rows were written: neighbouring pages, fewer page reads."""
        heads = [u.session_id for u in units]
        position: dict[str, int] = {}
        for part in chunks(heads):
            position.update(self.store.db.execute_sql(
                f"SELECT id, rowid FROM sessions WHERE id IN ({marks(part)})", part).fetchall())
        return sorted(units, key=lambda u: position.get(u.session_id, -1))

    def _delete_chunk(self, chunk: list[Unit], exported: dict[str, Exported], last: bool, reason: str,
                      recheck: Recheck | None, orphans: bool, result: Result) -> None:
        listening = self.listening
        event_ids = self.outbox.add_pending("delete", reason, chunk) if listening else [None] * len(chunk)
        synced = self.commits.before(last)
        began = [0.0]

        def work(db):
            began[0] = time.monotonic()  # the write lock is ours from here to the end of COMMIT
            return self._delete_in_transaction(db, chunk, exported, recheck, orphans)

        try:
            went, skipped, wrote = write_transaction(self.store.db, self.fts.quiet(work), on_busy=self.turns.busy)
        except BaseException:
            if listening:
                self.outbox.settle({}, event_ids)  # rolled back: these events must never fire
            raise
        # Committed. What follows needs no write lock, so it fills the pause we owe other writers.
        committed_at = self._account(began[0], result, f"a delete of {len(chunk)} unit(s)")
        if listening:
            committed = {event_ids[i]: ids for i, ids in went.items()}
            self.outbox.settle(committed, [e for i, e in enumerate(event_ids) if i not in went])
        for index, why in skipped.items():
            unit = chunk[index]
            result.skipped.append({"session_id": unit.session_id, "ids": list(unit.ids), "why": why})
        paths: list[str] = []
        for index, ids in went.items():
            result.done.append(self._unit_report(chunk[index], ids))
            paths += self._paths_of(ids, result)
        events = [Event(event_ids[i], "delete", chunk[i].session_id, reason, ids)
                  for i, ids in went.items()] if listening else []
        self._after_durable(self.commits.committed(synced, wrote, (paths, events)), result)
        self.turns.after_commit(committed_at, committed_at - began[0])

    def _after_durable(self, work: list[tuple[list[str], list[Event]]], result: Result) -> None:
        """Files, then events, of transactions whose commit is now on disk (see group_commit.py)."""
        events = []
        for item in work:
            if item is None:  # a commit with nothing to follow it (a step of a split delete)
                continue
            paths, fired = item
            self.remover.remove(paths)
            events += fired
        self._collect_files(result, wait=False)  # into the report (on disk past its head) as they come
        if events:
            self.remover.drain()  # files before events: a plugin sees the files gone
            self._deliver(events, result.hook_failures)

    def _delete_in_transaction(self, db, chunk: list[Unit], exported: dict[str, Exported], recheck: Recheck | None,
                               orphans: bool):
        schema = self.store.schema
        all_ids = [i for unit in chunk for i in unit.ids]
        fresh = load_rows(self.store, all_ids)  # inside the transaction: what exists now, as it is now
        existing = set(fresh)
        blocked = {} if orphans else guards.blocked(db, schema, all_ids, self.now(), self.references)
        blocked.update(self._unlike_exports(db, [u for u in chunk if u.session_id in exported], exported))
        went: dict[int, list[str]] = {}
        skipped: dict[int, str] = {}
        for index, unit in enumerate(chunk):
            if orphans:
                if any(i in existing for i in unit.ids):
                    skipped[index] = "its session row exists again"
                else:
                    went[index] = list(unit.ids)
                continue
            if unit.session_id not in existing:
                skipped[index] = "gone already"
                continue
            why = next((blocked[i] for i in unit.ids if i in blocked), None)
            if why is None and recheck is not None:
                why = recheck(unit, fresh)
            if why:
                skipped[index] = why
            else:
                went[index] = [i for i in unit.ids if i in existing]
        doomed = [i for ids in went.values() for i in ids]
        wrote = False
        if doomed:
            wrote = self._delete_rows(db, doomed) > 0
        return went, skipped, wrote

    def _columns(self, db) -> list[str]:
        if self._session_columns is None:  # the schema does not change during a run
            self._session_columns = exports.session_columns(db)
        return self._session_columns

    def _unlike_exports(self, db, units: list[Unit], exported: dict[str, Exported]) -> dict[str, str]:
        """Inside the transaction: units whose rows are not those exported (a message came, went or
        grew since), each id -> why. They stay, exported or not, until a run exports them as they are."""
        # No other connection committed since the export began: the rows are as exported (our own
        # deletes meanwhile touched other units only, and a cut parent link is not compared).
        version = self._data_version() if units else None
        units = [u for u in units if exported[u.session_id].store_version != version]
        if not units:
            return {}
        ids = [i for unit in units for i in unit.ids]
        counts: dict[str, tuple[int, int]] = {}
        for part in chunks(ids):
            for sid, count, newest in db.execute_sql(
                    f"SELECT session_id, COUNT(*), MAX(id) FROM messages WHERE session_id IN ({marks(part)}) "
                    f"GROUP BY session_id", part).fetchall():
                counts[sid] = (count, newest or 0)
        rows: dict[str, tuple] = {r[0]: r for r in exports.session_rows(db, ids)}
        columns = self._columns(db)
        why = {}
        for unit in units:
            found = exported[unit.session_id]
            present = [rows[i] for i in unit.ids if i in rows]
            messages = sum(counts.get(i, (0, 0))[0] for i in unit.ids)
            newest = max((counts.get(i, (0, 0))[1] for i in unit.ids), default=0)
            if not present:
                continue  # gone already: the caller says so
            if (messages != found.messages or newest > found.max_message_id
                    or exports.fingerprint(columns, present) != found.fingerprint):
                why.update({i: "changed since it was exported (left for the next run)" for i in unit.ids})
        return why

    @staticmethod
    def _delete_messages(db, message_ids: list[int]) -> None:
        """One step of a split delete: these messages only (their session rows stay until the last step)."""
        for part in chunks(message_ids):
            db.execute_sql(f"DELETE FROM messages WHERE id IN ({marks(part)})", part)

    def _delete_rows(self, db, doomed: list[str]) -> int:
        """Returns how many rows of the store it changed."""
        schema = self.store.schema
        db.execute_sql("CREATE TEMP TABLE IF NOT EXISTS hermes_admin_doomed (id TEXT PRIMARY KEY)")
        db.execute_sql("DELETE FROM temp.hermes_admin_doomed")
        for part in chunks(doomed):
            db.execute_sql(f"INSERT OR IGNORE INTO temp.hermes_admin_doomed(id) VALUES {','.join(['(?)'] * len(part))}",
                           part)
        doomed_set = "(SELECT id FROM temp.hermes_admin_doomed)"
        prompt_hashes: set[str] = set()
        if schema.has_table("system_prompts"):
            refs = [c for c in ("system_prompt_hash", "tool_names") if schema.has_column("sessions", c)]
            for column in refs:
                prompt_hashes.update(r[0] for r in db.execute_sql(
                    f"SELECT DISTINCT {column} FROM sessions WHERE id IN {doomed_set} AND {column} IS NOT NULL"
                ).fetchall())
        # 1. survivors whose parent goes keep living, without a parent
        changed = db.execute_sql(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN "
                                 f"{doomed_set} AND id NOT IN {doomed_set}").rowcount
        # 2. messages while their session rows still exist (the trigram trigger reads them)
        changed += db.execute_sql(f"DELETE FROM messages WHERE session_id IN {doomed_set}").rowcount
        # 3. usage rows (they cascade, but say so), then the sessions
        if schema.has_table("session_model_usage"):
            changed += db.execute_sql(f"DELETE FROM session_model_usage WHERE session_id IN {doomed_set}").rowcount
        changed += db.execute_sql(f"DELETE FROM sessions WHERE id IN {doomed_set}").rowcount
        # 4. system prompts nobody references any more
        if prompt_hashes:
            refs = " AND ".join(f"NOT EXISTS (SELECT 1 FROM sessions WHERE {c} = system_prompts.hash)"
                                for c in ("system_prompt_hash", "tool_names") if schema.has_column("sessions", c))
            for part in chunks(sorted(prompt_hashes)):
                db.execute_sql(f"DELETE FROM system_prompts WHERE hash IN ({marks(part)}) AND {refs}", part)
        db.execute_sql("DELETE FROM temp.hermes_admin_doomed")
        return changed

    # -- archive ---------------------------------------------------------------

    def set_archived(self, units: list[Unit], archived: bool, reason: str | None) -> Result:
        """Archive (or unarchive) whole units; an event fires only for a real unarchived -> archived change."""
        result = Result(self.profile.name, "archive" if archived else "unarchive", reason, self.dry_run)
        target, current = (1, 0) if archived else (0, 1)
        if self.dry_run:
            rows = load_rows(self.store, [i for unit in units for i in unit.ids])
            for unit in units:
                changing = [i for i in unit.ids if i in rows and rows[i].archived != bool(target)]
                if changing:
                    result.done.append(self._unit_report(unit, changing))
            return result
        for chunk in self._by_count(units, result):
            self.commits.before(last=True)  # archive commits stay synced: rare, and their events go at once
            fires = archived and reason is not None and self.listening
            event_ids = self.outbox.add_pending("archive", reason, chunk) if fires else []
            began = [0.0]

            def work(db, chunk=chunk):
                began[0] = time.monotonic()
                changed: dict[int, list[str]] = {}
                for index, unit in enumerate(chunk):
                    ids = list(unit.ids)
                    flip = [r[0] for r in db.execute_sql(
                        f"SELECT id FROM sessions WHERE id IN ({marks(ids)}) AND archived = ?", [*ids, current]
                    ).fetchall()]
                    if flip:
                        db.execute_sql(f"UPDATE sessions SET archived = ? WHERE id IN ({marks(flip)})", [target, *flip])
                        changed[index] = flip
                return changed

            try:
                changed = write_transaction(self.store.db, work, on_busy=self.turns.busy)
            except BaseException:
                if fires:
                    self.outbox.settle({}, event_ids)
                raise
            committed_at = self._account(began[0], result, f"an archive flip of {len(chunk)} unit(s)")
            self.commits.committed(synced=True, wrote=bool(changed), work=None)  # asks for a checkpoint
            self.turns.after_commit(committed_at, committed_at - began[0])
            for index, ids in changed.items():
                result.done.append(self._unit_report(chunk[index], ids))
            if fires:
                self.outbox.settle({event_ids[i]: ids for i, ids in changed.items()},
                                   [e for i, e in enumerate(event_ids) if i not in changed])
                self._deliver([Event(event_ids[i], "archive", chunk[i].session_id, reason, ids)
                               for i, ids in changed.items()], result.hook_failures)
        return result

    # -- structural ------------------------------------------------------------

    def held_by_others(self) -> str | None:
        """Who else holds the store open, for structural work (VACUUM, an index rebuild) that runs
        only while nobody does; None when nobody does. Unknown counts as held (holders.py)."""
        holders = store_holders(self.profile.store_path, wal=self.in_wal_mode())
        if holders is None:
            return "a process this scan cannot see into (another user's, or outside this pid namespace)"
        return f"pid {', '.join(map(str, holders))}" if holders else None

    def reclaim(self, result: Result) -> int:
        """Give the store's free pages back to the file system, in short steps that wait for other
        writers like every write of ours: SQLite's incremental auto-vacuum, on a store switched to it
        (by a VACUUM of ours while nobody held it, `vacuum_if_worth`). Returns the pages freed, and
        says so in `result`; the file shrinks when a checkpoint copies the last of them back."""
        if self.dry_run or self.store.db.execute_sql("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL:
            return 0
        pages, freed = RECLAIM_FIRST_PAGES, 0
        while not stopping.requested():
            free = self.store.db.execute_sql("PRAGMA freelist_count").fetchone()[0]
            if free == 0:
                break
            step = min(pages, free)
            if step == free:  # the last step: the WAL copied back first, so that its commit is the first
                self._copied_back()  # since the WAL started over, and cuts the file back (WAL_SIZE_LIMIT)

            def work(db, step=step):
                # One page a statement: Python's sqlite3 steps a statement once, and this pragma frees a
                # page per step, reporting each as a row without columns that Python never steps past.
                for _ in range(int(step)):
                    db.execute_sql("PRAGMA incremental_vacuum(1)").close()

            _, held_s = self._paced_write(work, result, f"an incremental vacuum step ({step} pages)", sized=False)
            left = self.store.db.execute_sql("PRAGMA freelist_count").fetchone()[0]
            freed += free - left
            if left >= free:  # nothing moved (another writer's pages at the end?): the next run goes on
                break
            # the next step sized by this one's time, to the hold we allow ourselves, at most doubling
            pages = max(16, min(2 * pages, int(step * self._hold_target() / max(held_s, 1e-4))))
        if freed:
            self._copied_back()
            result.notes.append(f"{freed} free page(s) given back to the file system (incremental vacuum)")
        return freed

    def _paced_write(self, work, result: Result, what: str, synced: bool = False,
                     sized: bool = True) -> tuple[object, float]:
        """`work` in one write transaction, paced like the deletes: measured (`sized`: into the
        budget the next deletes are sized by), its commit handed to group commit, then the turn
        other writers are owed. Returns what `work` returned and how long it held the lock. (The
        delete, archive and split paths still pace themselves each its own way.)"""
        began = [0.0]

        def timed(db):
            began[0] = time.monotonic()  # the write lock is ours from here to the end of COMMIT
            return work(db)

        value = write_transaction(self.store.db, timed, on_busy=self.turns.busy)
        if sized:
            committed_at = self._account(began[0], result, what)
        else:
            committed_at = time.monotonic()
            self._count(result, committed_at - began[0], what)
        self._after_durable(self.commits.committed(synced=synced, wrote=True, work=None), result)
        self.turns.after_commit(committed_at, committed_at - began[0])
        return value, committed_at - began[0]

    def _copied_back(self) -> None:
        """The file shrinks when a checkpoint copies the WAL's last frames back: PASSIVE ones (they
        never wait, nor make anyone wait) until one gets to the end, for up to a second."""
        deadline = time.monotonic() + CHECKPOINT_SETTLE_S
        while time.monotonic() < deadline:
            try:
                busy, frames, copied = self.store.db.execute_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except peewee.OperationalError:
                return
            if frames <= 0 or copied >= frames:
                return
            time.sleep(0.05)

    def vacuum_if_worth(self, result: Result) -> bool:
        """VACUUM after a purge: over 25 % free pages, and only while nobody else holds the store.
        Unless the policy says not to (`incremental_vacuum: false`), the same VACUUM switches the store
        to incremental auto-vacuum, so that later purges give space back while Hermes runs (reclaim)."""
        if self.dry_run:
            return False
        db = self.store.db
        pages = db.execute_sql("PRAGMA page_count").fetchone()[0]
        free = db.execute_sql("PRAGMA freelist_count").fetchone()[0]
        switching = self.incremental and db.execute_sql("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL
        if not pages or (free / pages <= VACUUM_FREE_RATIO and not switching):
            result.notes.append(f"no VACUUM: {free}/{pages} pages free (needs over 25 %)")
            return False
        who = self.held_by_others()
        if who:
            result.notes.append(f"no VACUUM: the store is held by {who}")
            return False
        try:
            if switching:  # once: from then on, purges give space back while Hermes runs (reclaim)
                db.execute_sql("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with this VACUUM
                result.notes.append("the store is now in incremental auto-vacuum: later purges give space "
                                    "back in short steps while Hermes runs")
            db.execute_sql("VACUUM")
        except peewee.OperationalError as exc:  # a writer came meanwhile: the VACUUM waits for another run
            if not is_lock_error(exc):
                raise
            result.notes.append("no VACUUM: another process took the write lock first")
            return False
        self._after_vacuum()
        return True

    def _after_vacuum(self) -> None:
        """A VACUUM writes the whole database into the WAL. Nobody else holds the store (we just looked):
        the one place where a checkpoint of ours may TRUNCATE the WAL, through SQLite's own locks,
        rather than leave a WAL as large as the store on disk until Hermes next closes it last."""
        try:
            self.store.db.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)" if self.held_by_others() is None
                                      else "PRAGMA wal_checkpoint(PASSIVE)")
        except peewee.OperationalError:
            pass  # a checkpoint is a courtesy; the next writer's reuse the WAL

    # -- closing stale open rows --------------------------------------------------

    def close_stale(self, units: list[Unit], recheck: Recheck, now: float) -> Result:
        """Close open rows a dead process left (tasks/stale.py): `ended_at` the run's `now`, `end_reason`
        'startup_orphan_reap', as Hermes does; silent (nothing is deleted: no event, no file)."""
        result = Result(self.profile.name, "close", None, self.dry_run)
        if self.dry_run:
            fresh = load_rows(self.store, [u.session_id for u in units])
            for unit in units:
                why = recheck(unit, fresh)
                if why is None:
                    result.done.append(self._unit_report(unit, list(unit.ids)))
            return result
        for chunk in self._by_count(units, result):
            self.commits.before(last=True)

            def work(db, chunk=chunk):
                ids = [u.session_id for u in chunk]
                fresh = load_rows(self.store, ids)
                blocked = guards.blocked(db, self.store.schema, ids, self.now(), self.references)
                closing = [u for u in chunk if u.session_id not in blocked and recheck(u, fresh) is None]
                if closing:
                    closed = [u.session_id for u in closing]
                    db.execute_sql(f"UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id IN ({marks(closed)}) "
                                   "AND ended_at IS NULL", [now, REAPED, *closed])
                return closing, {u.session_id: blocked.get(u.session_id) or recheck(u, fresh)
                                 for u in chunk if u not in closing}

            (closing, kept), _ = self._paced_write(work, result, f"closing {len(chunk)} stale open row(s)",
                                                   synced=True)
            result.done += [self._unit_report(unit, list(unit.ids)) for unit in closing]
            result.skipped += [{"session_id": sid, "ids": [sid], "why": why} for sid, why in kept.items()]
        return result

    # -- after the commit --------------------------------------------------------

    def _account(self, began: float, result: Result, what: str) -> float:
        """Record a transaction just committed (`what` it was) and size the next; returns when it committed."""
        committed_at = time.monotonic()
        held_s = committed_at - began
        self._count(result, held_s, what)
        # The time per weight: the estimate rises at once when a transaction ran slow (FTS5
        # merges make some twice as slow) and falls back slowly; the budget at most doubles
        # from one transaction to the next.
        measured = held_s / max(1, self._last_weight)
        # The median of the last transactions: an FTS5 merge makes a few of them several times
        # slower whatever their size, and must not shrink the next ones to nothing.
        self._rates.append(measured)
        del self._rates[:-RATE_WINDOW]
        self._s_per_weight = max(sorted(self._rates)[len(self._rates) // 2], 1e-9)  # a stopped clock: tests
        fits = int(self._hold_target() / self._s_per_weight)
        self._budget = max(MIN_WEIGHT, min(fits, 2 * max(self._budget, self._last_weight)))
        return committed_at

    def _hold_target(self) -> float:
        """How long the next transaction may hold the lock: short while another writer is seen."""
        return TARGET_HOLD_S if self.turns is None or self.turns.others_writing else IDLE_HOLD_S

    def paced(self, began: float, weight: int, result: Result | None = None) -> None:
        """After a commit of work outside the delete path (a restore step): measured, then the turn."""
        result = result or Result(self.profile.name, "restore", None, False)
        self._last_weight = max(weight, 1)
        committed_at = self._account(began, result, "a restore step")
        # what earlier transactions' commits released meanwhile (their files, their events)
        self._after_durable(self.commits.committed(synced=False, wrote=True, work=None), result)
        self.turns.after_commit(committed_at, committed_at - began)
        self._merge_owed(result, MERGE_STEPS)

    def _merge_owed(self, result: Result, steps: int = MERGE_STEPS) -> None:
        """FTS5 merging the deletes left (fts_merges.py), in short transactions paced like the deletes.

        A merge under way is finished before the deletes go on, up to `steps` (Hermes' own writes
        would otherwise take it up, inside their appends). A stop request ends it at once, and a
        merge that fails ends our merging of that index for the run (one note; the deletes go on
        with FTS5's own merging there): what is left, Hermes' writes merge as they always have.
        """
        try:
            for _ in range(steps):
                owed = self.fts.owed() if self.fts is not None else None
                if owed is None or stopping.requested():
                    return
                try:
                    if not self._merge_step(owed, result):
                        return
                except (peewee.DatabaseError, sqlite3.Error) as exc:
                    result.notes.append(f"FTS5 merging of {owed[0]} left to Hermes for this run: {exc}")
                    self.fts.tables.remove(owed[0])
        finally:
            self.turns.end_chain()  # whatever follows the merge steps gets no chained start

    def _merge_step(self, owed: tuple[str, int], result: Result) -> bool:
        """One merge transaction; False when FTS5 found nothing to merge."""
        pages = self.fts.pages(self._hold_target(), owed)
        began = [0.0]

        def work(db):
            began[0] = time.monotonic()
            return self.fts.merge(db, owed[0], pages)

        written = write_transaction(self.store.db, work, on_busy=self.turns.busy)
        committed_at = time.monotonic()
        held_s = committed_at - began[0]
        self._count(result, held_s, f"an FTS5 merge step of {owed[0]} ({pages} pages)")
        self.fts.measured(owed, pages, written, held_s)
        worked = written >= 2  # fewer: FTS5 merged nothing (its 'usermerge' asks for more segments)
        self._after_durable(self.commits.committed(synced=False, wrote=worked, work=None), result)
        self.turns.after_step(committed_at, held_s)
        return worked

    def _by_count(self, units: list[Unit], result: Result):
        """Archive flips: a row update each, so units by count, sized like the deletes."""
        position = 0
        while position < len(units):
            if stopping.requested():
                result.notes.append(f"stopped on request: {len(units) - position} unit(s) left for the next run")
                return
            count = max(1, min(MAX_UNITS_PER_TXN, self._budget // exports.UNIT_WEIGHT))
            chunk = units[position:position + count]
            position += len(chunk)
            self._last_weight = len(chunk) * exports.UNIT_WEIGHT
            yield chunk

    def remove_orphan_files(self, paths: list[str], result: Result) -> None:
        """Per-session files whose session row is gone (no event: no rows went)."""
        names = [os.path.basename(path) for path in paths]
        self._remove_paths([self.files.path_of(name) for name in names if self.files.is_session_file(name)], result)
        self._collect_files(result)

    def _paths_of(self, ids: list[str], result: Result) -> list[str]:
        paths = []
        for sid in ids:
            if unsafe_id(sid):
                result.files_skipped.append(f"session id {sid!r} cannot name a file in sessions/: files left alone")
            else:
                paths += self.files.paths_of(sid)
        return paths

    def _remove_files(self, ids: list[str], result: Result) -> None:
        self._remove_paths(self._paths_of(ids, result), result)

    def _remove_paths(self, paths: list[str], result: Result) -> None:
        """Paths inside sessions/ only: built from safe ids, or from names checked by the index."""
        if self.dry_run:
            result.files_removed += [path for path in paths if removable(path)]  # a dry run lists them
        else:
            self.remover.remove(paths)

    def _collect_files(self, result: Result, wait: bool = True) -> None:
        """Record in `result` the removals answered so far; with `wait`, all those queued."""
        if self.remover is not None:
            removed, skipped = self.remover.take() if wait else self.remover.answered()
            result.files_removed += removed
            result.files_skipped += skipped

    def _deliver(self, events: list[Event], failures: list[str]) -> None:
        if not self.listening:
            if events:  # replayed events whose plugins were disabled since: nothing to call
                self.outbox.delivered([e.id for e in events])
            return
        for n, event in enumerate(events):  # each marked as soon as its plugins ran: a crash repeats one
            if stopping.requested():  # a stop request: no new event is sent; the rest wait in the outbox
                failures.append(f"profile '{self.profile.shown}': stopped on request; "
                                f"{len(events) - n} event(s) left in the outbox for the next run")
                return
            try:
                failures += self.bus.fire(event.payload(self.profile))
                self.outbox.delivered([event.id])
            except DeliveryStopped:  # a stop request: this event and the rest wait for the next run
                failures.append(f"profile '{self.profile.shown}': stopped on request; "
                                f"{len(events) - n} event(s) left in the outbox for the next run")
                return
            except OutboxError as exc:  # disk full, read-only: no more deliveries (no repeats) this run
                failures.append(f"profile '{self.profile.shown}': {exc}; deliveries stopped, "
                                f"{len(events) - n} event(s) left for the next run (the first may repeat)")
                return

    def _replay(self) -> list[str]:
        """Finish what a previous run left: verify pending events, deliver committed ones."""
        failures: list[str] = []
        db = self.store.db
        committed: dict[int, list[str]] = {}
        dropped: list[int] = []
        for event in self.outbox.pending():
            ids = event.ids
            if event.kind == "delete":
                left = db.execute_sql(
                    f"SELECT (SELECT COUNT(*) FROM sessions WHERE id IN ({marks(ids)})) + "
                    f"(SELECT COUNT(*) FROM messages WHERE session_id IN ({marks(ids)}))", [*ids, *ids]
                ).fetchone()[0]
                done = left == 0
            else:
                left = db.execute_sql(
                    f"SELECT COUNT(*) FROM sessions WHERE id IN ({marks(ids)}) AND archived = 0", ids
                ).fetchone()[0]
                done = left == 0
            if done:
                committed[event.id] = ids
            else:
                dropped.append(event.id)
        if committed or dropped:
            self.outbox.settle(committed, dropped)
        undelivered = self.outbox.undelivered()
        scratch = Result(self.profile.name, "replay", None, False)
        for event in undelivered:
            if event.kind == "delete":
                self._remove_files(event.ids, scratch)
        self._collect_files(scratch)
        self._deliver(undelivered, failures)
        return failures

    def _prune_exports(self) -> None:
        """Exports past `export_keep_days` go, except those an unfinished split delete still needs."""
        if not self._prunes or self.dry_run:
            return
        try:
            keep = {record["exported"]["path"] for _, record in self.outbox.splits()}
            self.notes += exports.prune(self.profile, self.export_settings, self.now(), keep)
        except (OSError, KeyError, TypeError) as exc:  # housekeeping: the next run tries again
            self.notes.append(f"old exports not pruned: {exc}")

    def restore(self, path: Path, wanted: set[str] | None, result: Result) -> None:
        """`hermes-admin restore`: units of an export back into this store (restore.py)."""
        from hermes_admin.profile.engine.restore import restore_file

        self.require_tokenizer("restore into")  # the messages put back fire the CJK triggers too
        restore_file(self, path, wanted, self.dry_run, result)

    @staticmethod
    def _count(result: Result, held_s: float, what: str) -> None:
        """One more write transaction of ours in the report, and the longest so far with what it was."""
        result.transactions += 1
        if held_s * 1000 > result.longest_write_ms:
            result.longest_write_ms, result.longest_write = held_s * 1000, what

    @staticmethod
    def _unit_report(unit: Unit, ids: list[str]) -> Done:
        return Done(unit.session_id, tuple(ids), unit.rule)

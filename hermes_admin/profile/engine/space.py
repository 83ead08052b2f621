"""Space given back to the file system: VACUUM while nobody else holds the store, else SQLite's
incremental auto-vacuum in short paced steps, and the checkpoints that shrink the file
(docs/design.md §9).

A store not yet in incremental auto-vacuum gives nothing back until one VACUUM, which runs only
while nobody else holds it (a gateway may hold it for weeks). So every run that purges looks for
that moment, whatever it purged (`switch_pending`): the holders are looked at once (for up to
FREE_MOMENT_S when a VACUUM was asked for), the VACUUM runs as soon as nobody holds the store, and otherwise what waits and for
whom is said (`waits`: the run report's `reclaim_waits`, and `usage`). The journal mode and the
application id are never changed; Hermes' maintenance lock is held for the whole run (engine.py).
"""

from __future__ import annotations

import os
import time

import peewee

from hermes_admin import stopping
from hermes_admin.holders import store_holders
from hermes_admin.profile.engine.pacer import Pacer
from hermes_admin.profile.store import Store, pragmas
from hermes_admin.profile.store.pragmas import INCREMENTAL
from hermes_admin.profile.store.connect import WAL_SIZE_LIMIT, WriteLockHeld, is_lock_error
from hermes_admin.profile.store.read import journal_mode
from hermes_admin.results import Result

VACUUM_FREE_RATIO = 0.25  # a VACUUM rewrites the whole store: worth it past a quarter of it free
RECLAIM_FIRST_PAGES = 256  # the first incremental-vacuum step; later ones sized by the time it took
CHECKPOINT_SETTLE_S = 1.0  # how long a reclaim tries for the checkpoint that shrinks the file
CUT_TRIES = 4  # pages kept for the last steps, each a try at cutting the WAL back (a Hermes commit may win)
SWITCH_MIN_BYTES = 4 << 20  # free pages worth the one VACUUM that switches a store to incremental reclaim
FREE_MOMENT_S = 2.0  # how long a run asked to VACUUM looks for a moment nobody else holds the store
FREE_MOMENT_POLL_S = 0.5  # between two looks (each a bounded /proc scan: holders.py)


def held_by(store: Store) -> str | None:
    """Who else holds the store open, for structural work (VACUUM, an index rebuild) that runs only
    while nobody does; None when nobody does. Unknown counts as held (holders.py)."""
    return held_by_path(store.profile.store_path, wal=journal_mode(store) == "wal")


def held_by_path(path, wal: bool) -> str | None:
    """`held_by` for a store known by its path alone (one SQLite cannot read: repair of damage);
    `wal`: its journal is a WAL (where every open connection holds the -shm)."""
    why: list[str] = []
    holders = store_holders(path, wal=wal, why=why)
    if holders is None:  # unknown: structural work waits for a run that can tell
        return f"whoever it is ({why[0]})" if why else "a process this scan cannot see into (another user's, or outside this pid namespace)"
    return f"pid {', '.join(map(str, holders))}" if holders else None


class Space:
    """`incremental`: a VACUUM of ours switches the store to incremental auto-vacuum."""

    def __init__(self, store: Store, pacer: Pacer | None, incremental: bool, dry_run: bool):
        self.store, self.pacer, self.incremental, self.dry_run = store, pacer, incremental, dry_run
        self.waits: list[dict] = []  # free pages left for a moment nobody holds the store: {bytes, held_by}

    def in_wal_mode(self) -> bool:
        return journal_mode(self.store) == "wal"

    def passive_checkpoint(self) -> None:
        try:
            if self.in_wal_mode():
                pragmas.checkpoint(self.store.db)
        except Exception:
            pass  # a checkpoint is a courtesy; Hermes' own writers checkpoint too

    def held_by_others(self) -> str | None:
        return held_by(self.store)

    def switch_pending(self) -> bool:
        return not self.dry_run and self._pending_bytes() > 0

    def _pending_bytes(self) -> int:
        """The free pages, in bytes, that only the switching VACUUM would give back (0: none worth it)."""
        db = self.store.db
        if not self.incremental or pragmas.auto_vacuum(db) == INCREMENTAL:
            return 0
        free = pragmas.free_pages(db) * pragmas.page_size(db)
        return free if free >= SWITCH_MIN_BYTES else 0

    def _free_moment(self, patience: float) -> str | None:
        """None as soon as nobody else holds the store, looking for up to `patience` seconds; else
        who held it at the last look."""
        deadline = time.monotonic() + patience
        while True:
            who = self.held_by_others()
            if who is None or time.monotonic() + FREE_MOMENT_POLL_S > deadline or stopping.requested():
                return who
            time.sleep(FREE_MOMENT_POLL_S)

    def reclaim(self, result: Result) -> int:
        """Give the store's free pages back to the file system, in short steps that wait for other
        writers like every write of ours: SQLite's incremental auto-vacuum, on a store switched to it
        (by a VACUUM of ours while nobody held it, `vacuum_if_worth`). Returns the pages freed, and
        says so in `result`; the file shrinks when a checkpoint copies the last of them back."""
        if self.dry_run or pragmas.auto_vacuum(self.store.db) != INCREMENTAL:
            return 0
        pages, freed = RECLAIM_FIRST_PAGES, 0
        while not stopping.requested():
            free = pragmas.free_pages(self.store.db)
            if free == 0:
                break
            step = self._next_step(pages, free)

            def work(db, step=step):
                for _ in range(int(step)):
                    pragmas.free_one_page(db)

            try:
                held_s = self.pacer.write(work, None, result, f"an incremental vacuum step ({step} pages)",
                                          quiet=False).held_s
            except WriteLockHeld as exc:  # the purge before it committed: the pages wait for the next run
                result.notes.append(f"free pages left for the next run: {exc}")
                break
            left = pragmas.free_pages(self.store.db)
            freed += free - left
            if left >= free:  # nothing moved (another writer's pages at the end?): the next run goes on
                break
            # the next step sized by this one's time, to the hold we allow ourselves, at most doubling
            pages = max(16, min(2 * pages, int(step * self.pacer.hold_target() / max(held_s, 1e-4))))
        if freed:
            self._copied_back()
            result.notes.append(f"{freed} free page(s) given back to the file system (incremental vacuum)")
        return freed

    def _next_step(self, pages: int, free: int) -> int:
        """How many pages the next step frees. The last CUT_TRIES go one a step, each once the WAL is
        copied back, so that its commit is the first since the WAL started over and cuts the file
        back (store/connect.py, WAL_SIZE_LIMIT), as long as the WAL is bigger than that."""
        if free > CUT_TRIES:
            return min(pages, free - CUT_TRIES)
        try:
            big = os.stat(f"{self.store.profile.store_path}-wal").st_size > WAL_SIZE_LIMIT
        except OSError:
            big = False
        if not big:
            return free
        self._copied_back()
        return 1

    def _copied_back(self) -> None:
        """The file shrinks when a checkpoint copies the WAL's last frames back: PASSIVE ones (they
        never wait, nor make anyone wait) until one gets to the end, for up to a second. One that
        finds another checkpoint running (ours after each commit, or a Hermes writer's) says busy
        and copies nothing (frames -1): it is tried again, not taken for done."""
        deadline = time.monotonic() + CHECKPOINT_SETTLE_S
        while time.monotonic() < deadline:
            try:
                busy, frames, copied = pragmas.checkpoint(self.store.db)
            except peewee.OperationalError:
                return
            if not busy and copied >= frames:
                return
            time.sleep(0.01 if busy else 0.05)

    def vacuum_if_worth(self, result: Result, asked: bool = True) -> bool:
        """VACUUM after a purge: over 25 % free pages, and only while nobody else holds the store.
        Unless the policy says not to (`incremental_vacuum: false`), the same VACUUM switches the store
        to incremental auto-vacuum, so that later purges give space back while Hermes runs (reclaim).
        Not `asked` (no --vacuum, nothing purged): only that switch, when it is pending."""
        pending = self._pending_bytes() if self.dry_run else 0
        if pending:  # what the run will try, said by the dry run
            result.notes.append(f"would VACUUM once nobody else holds the store ({pending >> 20} MiB "
                                "of free pages; it switches the store to incremental reclaim)")
        if self.dry_run or not (asked or self.switch_pending()):
            return False
        db = self.store.db
        pages, free = pragmas.page_count(db), pragmas.free_pages(db)
        switching = self.incremental and pragmas.auto_vacuum(db) != INCREMENTAL
        if not pages or (free / pages <= VACUUM_FREE_RATIO and not switching):
            result.notes.append(f"no VACUUM: {free}/{pages} pages free (needs over 25 %)")
            return False
        # Asked for (--vacuum, vacuum_after_prune), the switch may wait a little for its moment; unasked,
        # one look: a gateway holds its store for days, and 2 s more per held profile per run would add
        # up over a host's profiles while rarely finding the moment a single look misses.
        who = self._free_moment(FREE_MOMENT_S if switching and asked else 0)
        if who:
            result.notes.append(f"no VACUUM: the store is held by {who}")
            if switching and free:
                size = free * pragmas.page_size(db)
                self.waits.append({"bytes": size, "held_by": who})
                result.notes.append(f"{size >> 20} MiB of free pages wait for one VACUUM while nobody else holds "
                                    "the store (it switches the store to incremental reclaim); every run looks again")
            return False
        try:
            if switching:  # once: from then on, purges give space back while Hermes runs (reclaim)
                pragmas.switch_to_incremental(db)  # takes effect with this VACUUM
                result.notes.append("the store is now in incremental auto-vacuum: later purges give space "
                                    "back in short steps while Hermes runs")
            pragmas.vacuum(db)
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
            pragmas.checkpoint(self.store.db, "TRUNCATE" if self.held_by_others() is None else "PASSIVE")
        except peewee.OperationalError:
            pass  # a checkpoint is a courtesy; the next writer's reuse the WAL

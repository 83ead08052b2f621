"""Space given back to the file system: VACUUM while nobody else holds the store, else SQLite's
incremental auto-vacuum in short paced steps, and the checkpoints that shrink the file
(docs/design.md §9).

A store not yet in incremental auto-vacuum gives nothing back until one VACUUM, which runs only
while nobody else holds it (a gateway may hold it for weeks). So every run that purges looks for
that moment, whatever it purged (`switch_pending`): the holders are looked at once (for up to
FREE_MOMENT_S when a VACUUM was asked for), the VACUUM runs as soon as nobody holds the store, and otherwise what waits and for
whom is said (`waits`: the run report's `reclaim_waits`, and `usage`). Unasked, only a store small
enough to rewrite in about a second (`rewrite_unasked`); a bigger one waits for the operator's word.
The journal mode and the application id are never changed; Hermes' maintenance lock is held for
the whole run (engine.py).
"""

from __future__ import annotations

import os
import time
from typing import Callable

import peewee

from hermes_admin import holders, lockrecord, stopping
from hermes_admin.holders import write_lock_holder
from hermes_admin.profile.engine.decisions import Outcome, noted
from hermes_admin.profile.engine.pacer import Pacer
from hermes_admin.profile.store import Store, page_accounting, pragmas
from hermes_admin.shown import human_bytes
from hermes_admin.profile.store.pragmas import INCREMENTAL
from hermes_admin.profile.store.connect import WAL_SIZE_LIMIT, WriteLockHeld, is_lock_error
from hermes_admin.profile.store.read import journal_mode
from hermes_admin.results import Result

VACUUM_FREE_RATIO = 0.25  # a VACUUM rewrites the whole store: worth it past a quarter of it free
RECLAIM_FIRST_PAGES = 256  # the first incremental-vacuum step; later ones sized by the time it took
CHECKPOINT_SETTLE_S = 1.0  # how long a reclaim tries for the checkpoint that shrinks the file
CUT_TRIES = 4  # pages kept for the last steps, each a try at cutting the WAL back (a Hermes commit may win)
SWITCH_MIN_BYTES = 4 << 20  # free pages worth the one VACUUM that switches a store to incremental reclaim
# The most a VACUUM nobody asked for may rewrite (the pages in use: what it copies). A VACUUM holds
# the write lock from its start to its end, so a Hermes that starts meanwhile waits for all of it
# (its activity heartbeats give up after 0.5 s, its appends after 16-20 s), and it needs as much
# free disk again as it rewrites. 54 MB took 0.37 s on a small 2-core machine, and the ~800 MB
# left of a 1.3 GB store 11-13 s, half as long again as the purge before it (BENCHMARKS.md). A
# bigger store switches on the operator's word: `--vacuum`, `vacuum_after_prune`, `compact`.
UNASKED_REWRITE_MAX_BYTES = 64 << 20
FREE_MOMENT_S = 2.0  # how long a run asked to VACUUM looks for a moment nobody else holds the store
FREE_MOMENT_POLL_S = 0.5  # between two looks (each a bounded /proc scan: holders.py)


def rewrite_unasked(used_bytes: int) -> bool:
    """May a run VACUUM a store whose pages in use are `used_bytes` without being asked (to switch it
    to incremental reclaim)? Only one short to rewrite (UNASKED_REWRITE_MAX_BYTES)."""
    return used_bytes <= UNASKED_REWRITE_MAX_BYTES


def held_by(store: Store, lock_free: Callable[[], bool | None] | None = None) -> str | None:
    """Whether another process holds the store open, for structural work (VACUUM, an index rebuild)
    that runs only while nobody does: None when nobody does, else the clause that says so, naming
    the real reason (`holding`). Unknown counts as held (holders.py). `lock_free`: whether the
    store's write lock could be taken now (SQLite's own answer: Space.lock_free), when known."""
    found = holders.look(holders.store_files(store.profile.store_path), wal=journal_mode(store) == "wal")
    return None if found.holders == [] else holding(found, store.profile.store_path, lock_free)


def held_by_path(path, wal: bool, on_word: bool = False) -> str | None:
    """`held_by` for a store known by its path alone (one SQLite cannot read: repair of damage);
    `wal`: its journal is a WAL (where every open connection holds the -shm). `on_word`: the
    operator's explicit command (`repair --apply`), read as `compact` reads it: a process that could
    not be looked into does not stop it, one seen holding the store (a descriptor, a lock) does."""
    found = holders.look(holders.store_files(path), wal=wal)
    if found.holders == [] or (on_word and found.holders is None and not found.holding()):
        return None
    return holding(found, path)


def holding(found: holders.Look, path, lock_free: Callable[[], bool | None] | None = None) -> str:
    """`held by pid 4242 (hermes gateway)`, or why nobody can say the store is free: which processes
    could not be looked into and why, what the kernel's lock table says of the store's files, and
    whether the store's write lock can be taken now (`lock_free`, else the kernel's lock table)."""
    if found.holders:
        return "held by " + ", ".join(_process(pid) for pid in found.holders[:MAX_NAMED]) + _more(found.holders)
    said = []
    if found.seen:
        said.append("has descriptors held by " + ", ".join(map(_process, found.seen[:MAX_NAMED])) + _more(found.seen))
    if found.own_namespace:
        said.append("this scan runs in a pid namespace of its own: a process outside it is seen by no scan here")
    said += found.why
    if found.unseen:
        said.append("not looked into: " + "; ".join(u.said() for u in found.unseen[:MAX_NAMED]) + _more(found.unseen))
    if found.locking is not None:  # read: what the kernel's lock table says
        said.append("/proc/locks: " + ("a lock on the store's files held by " + ", ".join(map(_process, sorted(found.locking)))
                                       if found.locking else "no lock on the store's files"))
    free = lock_free() if lock_free is not None else None
    if free is None:
        writer = write_lock_holder(path)
        said.append(f"its write lock held by {_process(writer)}" if writer else "its write lock free by /proc/locks")
    else:
        said.append("its write lock could be taken now" if free else "its write lock is taken by another connection now")
    return f"{NOT_KNOWN} (" + "; ".join(said) + ")"


NOT_KNOWN = "not known to be free"  # how `holding` begins where nobody can say
COMPACT_HINT = "`hermes-admin compact` gives the free pages back on your word"


def hint(who: str | None) -> str:
    """`; hermes-admin compact …` after a clause of `holding` that could not say (else nothing)."""
    return f"; {COMPACT_HINT}" if who and who.startswith(NOT_KNOWN) else ""


MAX_NAMED = 3  # processes named in one line
COMMAND_CHARS = 48  # of each one's command line


def _process(pid: int) -> str:
    command = lockrecord.command_of(pid, COMMAND_CHARS) if pid > 0 else None
    return f"pid {pid}" + (f" ({command})" if command else "")


def _more(items: list) -> str:
    return f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""


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
        return held_by(self.store, self.lock_free)

    def lock_free(self) -> bool | None:
        """Could the store's write lock be taken now? SQLite's own answer, through our write
        connection, within its short busy timeout; None from a dry run's read-only one."""
        return None if self.dry_run else pragmas.lock_free(self.store.db)

    def switch_pending(self) -> bool:
        return not self.dry_run and self._pending_bytes() > 0

    def _pending_bytes(self) -> int:
        """The free pages, in bytes, that only the switching VACUUM would give back (0: none worth it)."""
        db = self.store.db
        if not self.incremental or pragmas.auto_vacuum(db) == INCREMENTAL:
            return 0
        free = page_accounting.free_bytes(db)
        return free if free >= SWITCH_MIN_BYTES else 0

    def _too_big_unasked(self, counted: page_accounting.Pages, asked: bool, notes: list[str]) -> bool:
        """Whether an unasked switch leaves this store for the operator's word (`rewrite_unasked`):
        said in `notes`, and in `waits` (a dry run too: what the run would leave)."""
        if asked or rewrite_unasked(counted.used_bytes):
            return False
        notes.append(f"no VACUUM: {human_bytes(counted.free_bytes)} of free pages wait for one on your word "
                     f"(`--vacuum`, vacuum_after_prune, `compact`): it would rewrite {human_bytes(counted.used_bytes)}, "
                     f"more than a run does unasked ({human_bytes(UNASKED_REWRITE_MAX_BYTES)})")
        self.waits.append({"bytes": counted.free_bytes, "rewrite_bytes": counted.used_bytes, "compact": True})
        return True

    def _free_moment(self, patience: float) -> str | None:
        """None as soon as nobody else holds the store, looking for up to `patience` seconds; else
        who held it at the last look."""
        deadline = time.monotonic() + patience
        while True:
            who = self.held_by_others()
            if who is None or time.monotonic() + FREE_MOMENT_POLL_S > deadline or stopping.requested():
                return who
            time.sleep(FREE_MOMENT_POLL_S)

    def reclaim(self, result: Result) -> tuple[int, Outcome]:
        """Give the store's free pages back to the file system, in short steps that wait for other
        writers like every write of ours: SQLite's incremental auto-vacuum, on a store switched to it
        (by a VACUUM of ours while nobody held it, `vacuum_if_worth`). Returns the pages freed, and
        what it says of them; the file shrinks when a checkpoint copies the last of them back.
        `result`: where its write transactions are counted (the pacer's)."""
        if self.dry_run or pragmas.auto_vacuum(self.store.db) != INCREMENTAL:
            return 0, Outcome()
        pages, freed, notes = RECLAIM_FIRST_PAGES, 0, []
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
                notes.append(f"free pages left for the next run: {exc}")
                break
            left = pragmas.free_pages(self.store.db)
            freed += free - left
            if left >= free:  # nothing moved (another writer's pages at the end?): the next run goes on
                break
            # the next step sized by this one's time, to the hold we allow ourselves, at most doubling
            pages = max(16, min(2 * pages, int(step * self.pacer.hold_target() / max(held_s, 1e-4))))
        if freed:
            self._copied_back()
            notes.append(f"{freed} free page(s) given back to the file system (incremental vacuum)")
        return freed, noted(*notes)

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

    def vacuum_if_worth(self, asked: bool = True) -> tuple[bool, list[str]]:
        """VACUUM after a purge: over 25 % free pages, and only while nobody else holds the store.
        Unless the policy says not to (`incremental_vacuum: false`), the same VACUUM switches the store
        to incremental auto-vacuum, so that later purges give space back while Hermes runs (reclaim).
        Not `asked` (no --vacuum, nothing purged): only that switch, when it is pending, of a store
        short to rewrite (`rewrite_unasked`). Returns whether it ran, and what it says of it."""
        notes: list[str] = []
        pending = self._pending_bytes() if self.dry_run else 0
        if pending and not self._too_big_unasked(page_accounting.pages(self.store.db), asked, notes):
            notes.append(f"would VACUUM once nobody else holds the store ({human_bytes(pending)} "
                                "of free pages; it switches the store to incremental reclaim)")  # what the run will try
        if self.dry_run or not (asked or self.switch_pending()):
            return False, notes
        db = self.store.db
        counted = page_accounting.pages(db)
        if self._too_big_unasked(counted, asked, notes):
            return False, notes
        pages, free = counted.count, counted.free
        switching = self.incremental and pragmas.auto_vacuum(db) != INCREMENTAL
        if not pages or (free / pages <= VACUUM_FREE_RATIO and not switching):
            notes.append(f"no VACUUM: {human_bytes(counted.free_bytes)} of free pages, {free / max(pages, 1):.0%} "
                                "of the store (needs over 25 %)")
            return False, notes
        # Asked for (--vacuum, vacuum_after_prune), the switch may wait a little for its moment; unasked,
        # one look: a gateway holds its store for days, and 2 s more per held profile per run would add
        # up over a host's profiles while rarely finding the moment a single look misses.
        who = self._free_moment(FREE_MOMENT_S if switching and asked else 0)
        if who:
            notes.append(f"no VACUUM: the store is {who}{hint(who)}")
            if switching and free:  # said once, at the end of the report (report.space_lines)
                self.waits.append({"bytes": counted.free_bytes, "held_by": who, "compact": bool(hint(who))})
            return False, notes
        try:
            if switching:  # once: from then on, purges give space back while Hermes runs (reclaim)
                pragmas.switch_to_incremental(db)  # takes effect with this VACUUM
                notes.append("the store is now in incremental auto-vacuum: later purges give space "
                                    "back in short steps while Hermes runs")
            pragmas.vacuum(db)
        except peewee.OperationalError as exc:  # a writer came meanwhile: the VACUUM waits for another run
            if not is_lock_error(exc):
                raise
            notes.append("no VACUUM: another process took the write lock first")
            return False, notes
        self._after_vacuum()
        return True, notes

    def _after_vacuum(self) -> None:
        """A VACUUM writes the whole database into the WAL. Nobody else holds the store (we just looked):
        the one place where a checkpoint of ours may TRUNCATE the WAL, through SQLite's own locks,
        rather than leave a WAL as large as the store on disk until Hermes next closes it last."""
        try:
            pragmas.checkpoint(self.store.db, "TRUNCATE" if self.held_by_others() is None else "PASSIVE")
        except peewee.OperationalError:
            pass  # a checkpoint is a courtesy; the next writer's reuse the WAL

    # -- `hermes-admin compact`: the operator's word ------------------------------------------

    def compact(self, force: bool, result: Result) -> tuple[dict, Outcome]:
        """Give the store's free pages back to the file system on the operator's word (`compact`),
        as `borg compact` does for its repository; returns what was (a dry run: would be) given
        back, as the report's row, and what it did (`result`: where its steps are counted).

        A store in incremental auto-vacuum gives them back in short paced steps (`reclaim`), the
        write lock let go between them, whoever holds it. Any other store needs one VACUUM (which
        also switches it to incremental reclaim, unless the policy says `incremental_vacuum: false`):
        a process that could not be looked into does not stop it (the operator vouches for it), one
        seen holding the store does unless `force`. The journal mode is never changed."""
        db, path = self.store.db, self.store.profile.store_path
        before = page_accounting.pages(db)
        incremental = pragmas.auto_vacuum(db) == INCREMENTAL
        row = {"journal_mode": journal_mode(self.store), "incremental_before": incremental,
               "free_bytes": before.free_bytes, "given_back_bytes": 0, "file_bytes_before": _file_size(path),
               "how": "incremental vacuum" if incremental else "full vacuum", "refused": None,
               "not_looked_into": []}
        if not before.free:
            did = noted("no free pages: nothing to give back")
            row["how"] = None
        elif incremental:
            did = self._compact_in_steps(before, row, result)
        else:
            did = self._compact_whole(before, force, row)
        return self._compacted(row, path), did

    def _compact_in_steps(self, before, row: dict, result: Result) -> Outcome:
        """An incremental store: short paced steps, whoever holds it."""
        if self.dry_run:
            row["given_back_bytes"] = before.free_bytes
            return noted(f"would give back {human_bytes(before.free_bytes)} of free pages (incremental "
                         "vacuum, in short steps while Hermes runs)")
        freed, did = self.reclaim(result)
        row["given_back_bytes"] = freed * before.size
        return did

    def _compact_whole(self, before, force: bool, row: dict) -> Outcome:
        """Any other store: one VACUUM, unless a process is seen holding it (and not `force`)."""
        db, path = self.store.db, self.store.profile.store_path
        found = holders.look(holders.store_files(path), wal=row["journal_mode"] == "wal")
        row["not_looked_into"] = [u.said() for u in found.unseen]
        seen = found.holding()
        if seen and not force:
            row["refused"] = holding(holders.Look(seen), path)
            return noted(f"not compacted: the store is {row['refused']}; a VACUUM holds its write lock "
                         "from start to end (--force runs it all the same)")
        notes = []
        if found.unseen and not seen:
            notes.append("could not be looked into, taken on your word as not Hermes: "
                         + "; ".join(row["not_looked_into"][:MAX_NAMED]) + _more(found.unseen))
        switching = self.incremental
        if self.dry_run:
            row["given_back_bytes"] = before.free_bytes
            return noted(*notes, f"would VACUUM: {human_bytes(before.free_bytes)} of free pages back"
                         + ("; it switches the store to incremental reclaim" if switching else ""))
        try:
            if switching:
                pragmas.switch_to_incremental(db)  # takes effect with this VACUUM
            pragmas.vacuum(db)
        except peewee.OperationalError as exc:  # a writer kept the lock past --lock-wait: nothing changed
            if not is_lock_error(exc):
                raise
            row["refused"] = "its write lock taken by another connection"
            return noted(*notes, "not compacted: another connection kept the write lock (--lock-wait waits longer)")
        self._after_vacuum()
        self._copied_back()
        after = page_accounting.pages(db)
        row["given_back_bytes"] = max(0, (before.count - after.count) * before.size)
        if switching and pragmas.auto_vacuum(db) == INCREMENTAL:
            notes.append("the store is now in incremental auto-vacuum: later runs give space back in "
                         "short steps while Hermes runs")
        return Outcome(notes=tuple(notes), vacuumed=True)

    def _compacted(self, row: dict, path) -> dict:
        row["file_bytes_after"] = _file_size(path)
        row["incremental_after"] = pragmas.auto_vacuum(self.store.db) == INCREMENTAL
        return row


def _file_size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


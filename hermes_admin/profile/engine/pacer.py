"""The paced write: every transaction of the engine, one way (docs/design.md §6).

A unit of work runs under the write lock (`BEGIN IMMEDIATE`, retried whole on lock, with the
FTS5 indexes' automerge quieted for writes that touch messages while anybody else is about); the time it held the lock is
measured against the weight the caller says it carried, and sizes the next transaction; its
commit is handed to group commit, which releases the files and events of commits now durable;
then the lock is left free for a waiting Hermes writer's turn (turns.py). What was held comes
back as a value (`Held`). FTS5's segment merges, kept out of the deletes (fts_merges.py), are
paced here too, as transactions of their own, whenever another writer or holder has been seen;
with nobody else about since we began (turns.alone), FTS5 merges inside our writes as it does in
Hermes' own, and nobody is there to wait for the longer transactions that makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


from hermes_admin import stopping
from hermes_admin.profile.engine import faults
from hermes_admin.profile.store.connect import write_transaction
from hermes_admin.results import Result
from hermes_admin.profile.store.errors import SQLITE_ERRORS

# A Hermes writer that waits polls the lock at 18, 33 and 53 ms of waiting: what sets its wait is
# our longest transactions, so the typical one aims at 20 ms while another writer is seen.
TARGET_HOLD_S = 0.020
# With no other writer seen for a second nobody waits on the lock: fewer, longer transactions
# (each costs a flush of both FTS indexes and a pause); a writer that comes makes them short again.
IDLE_HOLD_S = 0.040
# With nobody else seen at all since we began (turns.alone), only a Hermes that starts meanwhile
# can wait on us, and it is seen before our next transaction in a WAL store (its lock on the shared
# memory), else at its first commit or within turns.ALONE_HELD_EVERY_S: longer transactions still,
# with FTS5 merging inside them as in Hermes' own writes.
# A real store's purge then took 12.9 s against 17.1 s at 0ac9e84, within a tenth of its plain SQL
# (BENCHMARKS.md); the longest transactions, with a deep merge step inside, held the lock
# 190-270 ms there, which is what such a newcomer's first write may wait.
ALONE_HOLD_S = 0.080
# Lock time per unit of weight before the first measurement: Hermes' stores take ~0.4-0.5 us per
# byte (both FTS indexes tokenize every byte); a little more, to be on the safe side.
FIRST_S_PER_WEIGHT = 0.6e-6
MIN_WEIGHT = 4096  # the least a transaction is given, whatever the measurement says
# A unit goes in several transactions when one would hold the lock longer than this, or longer
# than SPLIT_MARGIN_S past the time aimed at: a waiting writer's 53 ms poll is not to be missed.
SPLIT_AT_S = 0.050
SPLIT_MARGIN_S = 0.010  # (see SPLIT_AT_S) 30 ms while another writer is about: under its 33 ms poll
RATE_WINDOW = 15  # transactions whose median rate is the estimate: one slow FTS5 merge never rules it
MERGE_STEPS = 64  # FTS5 merge transactions at most between two deletes: the deletes keep going
MERGE_STEPS_AT_END = 400  # and after the last one, while the merging budget lasts (fts_merges.Budget)

Follow = Callable[[Any], "tuple[bool, Any]"]  # the value work returned -> (it wrote, its after-commit work)


@dataclass(frozen=True)
class Held:
    """One transaction of ours: what its work returned, and when it held the write lock."""
    value: Any
    began: float
    committed_at: float

    @property
    def held_s(self) -> float:
        return self.committed_at - self.began


@dataclass(frozen=True)
class Pace:
    """The pacing as the main thread last measured it: a value the export thread may read."""
    budget: int
    s_per_weight: float
    hold_target: float

    def too_big(self, weight: int) -> bool:
        """Would one transaction of this weight hold the lock too long (as measured so far)?"""
        split_at = min(SPLIT_AT_S, self.hold_target + SPLIT_MARGIN_S)
        return weight > self.budget and weight * self.s_per_weight > split_at


def _wrote_nothing_more(value: Any) -> tuple[bool, Any]:
    return True, None


class Pacer:
    """The engine's write transactions. `release(work, result)`: the files and events of commits
    now durable (aftermath.py); `turns`, `commits`, `fts`: turns.py, group_commit.py, fts_merges.py."""

    def __init__(self, db, turns, commits, fts, release: Callable[[list, Result], None]):
        self.db, self.turns, self.commits, self.fts, self.release = db, turns, commits, fts, release
        self.s_per_weight = FIRST_S_PER_WEIGHT  # seconds of write lock per unit of weight (smoothed)
        self._rates: list[float] = []  # the last transactions' seconds per weight
        self.budget = first_budget()  # the weight the next transaction may carry

    def hold_target(self) -> float:
        """How long the next transaction may hold the lock: short while another writer is seen,
        longest while nobody else has been since we began."""
        if self.turns is None or self.turns.others_writing:
            return TARGET_HOLD_S
        return ALONE_HOLD_S if self.turns.alone else IDLE_HOLD_S

    def pace(self) -> Pace:
        return Pace(self.budget, self.s_per_weight, self.hold_target())

    def write(self, work: Callable, weight: int | None, result: Result, what: str, *, synced: bool = False,
              quiet: bool = True, follow: Follow | None = _wrote_nothing_more) -> Held:
        """`work(db)` in one write transaction (`hold`), then what follows its commit (`settle`)."""
        return self.settle(self.hold(work, quiet), weight, result, what, synced=synced, follow=follow)

    def settle(self, held: Held, weight: int | None, result: Result, what: str, *, synced: bool = False,
               follow: Follow | None = _wrote_nothing_more) -> Held:
        """A committed transaction: measured (`weight`: what it carried, sizing the next ones; None:
        counted, never measured), `follow(value)` (the caller's bookkeeping of what committed: whether
        it wrote, and the work to do once it is durable), its commit handed to group commit, the turn
        other writers are owed. `follow=None`: the caller does the last two itself (`committed`,
        `turn`). A caller with a record to keep of what committed, or something to undo when it did
        not, calls `hold` and then this: what it does between them comes before anything that can
        fail after the commit (the measuring, the release of earlier work, the turn)."""
        faults.point("committed")
        self.account(held, weight, result, what)
        if follow is not None:
            wrote, after = follow(held.value)
            self.committed(synced, wrote, after, result)
            self.turn(held)
        return held

    def hold(self, work: Callable, quiet: bool = True) -> Held:
        """`work(db)` under the write lock, timed from the moment the lock is ours to the end of COMMIT.

        Timed on the turns' clock: the pause after a commit is measured from its `committed_at`, so
        both are read on one clock (a test's own, ticking with no wall time, sizes every
        transaction the same on any machine)."""
        clock = self.turns.clock
        began = [0.0]

        def timed(db):
            began[0] = clock()
            return work(db)

        careful = self.fts.quiet(timed) if quiet else timed
        alone = self.turns.alone  # looked at here, outside the lock

        def attempt(db):  # alone, FTS5 merges inside our writes as in Hermes' own; a busy retry is careful
            return timed(db) if alone and self.turns.nobody_seen else careful(db)

        value = write_transaction(self.db, attempt, on_busy=self.turns.busy)
        return Held(value, began[0], clock())

    def account(self, held: Held, weight: int | None, result: Result, what: str) -> None:
        """One more write transaction in the report; with a weight, the next one sized by this one."""
        count(result, held.held_s, what)
        if weight is None:
            return
        weight = max(weight, 1)
        # The median of the last transactions' time per weight: an FTS5 merge makes a few of them
        # several times slower whatever their size, and must not shrink the next ones to nothing.
        self._rates.append(held.held_s / weight)
        del self._rates[:-RATE_WINDOW]
        self.s_per_weight = max(sorted(self._rates)[len(self._rates) // 2], 1e-9)  # a stopped clock: tests
        fits = int(self.hold_target() / self.s_per_weight)
        self.budget = max(MIN_WEIGHT, min(fits, 2 * max(self.budget, weight)))  # at most doubling
        faults.point("after_commit")

    def committed(self, synced: bool, wrote: bool, after: Any, result: Result) -> None:
        """A commit handed to group commit; what earlier commits released meanwhile is done now."""
        self.release(self.commits.committed(synced=synced, wrote=wrote, work=after), result)

    def turn(self, held: Held) -> None:
        """The lock left free after a commit, for a waiting writer (lock-free work since counts)."""
        faults.point("before_turn")
        self.turns.after_commit(held.committed_at, held.held_s)

    # -- FTS5 merging ----------------------------------------------------------------

    def merge_owed(self, result: Result, steps: int = MERGE_STEPS) -> None:
        """FTS5 merging the deletes left (fts_merges.py), in short transactions paced like the deletes.

        A merge under way goes on before the deletes do, up to `steps` and as far as the index's
        budget (what automerge would have merged for our writes) allows; none while we are alone, when
        our writes merge as they go. A stop request ends it at once, and a
        merge that fails ends our merging of that index for the run (one note; the deletes go on
        with FTS5's own merging there): what is left, Hermes' writes merge as they always have.
        """
        if self.turns.alone:
            return  # nothing is owed: FTS5's automerge ran inside our writes (hold)
        try:
            for _ in range(steps):
                owed = self.fts.owed() if self.fts is not None else None
                if owed is None or stopping.requested():
                    return
                try:
                    if not self._merge_step(owed, result):
                        return
                except SQLITE_ERRORS as exc:
                    result.notes.append(f"FTS5 merging of {owed[0]} left to Hermes for this run: {exc}")
                    self.fts.tables.remove(owed[0])
        finally:
            self.turns.end_chain()  # whatever follows the merge steps gets no chained start

    def _merge_step(self, owed: tuple[str, int], result: Result) -> bool:
        """One merge transaction; False when FTS5 found nothing to merge."""
        pages = self.fts.pages(self.hold_target(), owed)
        held = self.write(lambda db: self.fts.merge(db, owed[0], pages), None, result,
                          f"an FTS5 merge step of {owed[0]} ({pages} pages)", quiet=False, follow=None)
        self.fts.measured(owed, pages, held.value, held.held_s)
        worked = held.value >= 2  # fewer: FTS5 merged nothing (its 'usermerge' asks for more segments)
        self.committed(False, worked, None, result)
        self.turns.after_step(held.committed_at, held.held_s)
        return worked


def first_budget() -> int:
    """The weight the first transaction may carry, before any was measured."""
    return int(TARGET_HOLD_S / FIRST_S_PER_WEIGHT)


def count(result: Result, held_s: float, what: str) -> None:
    """One more write transaction of ours in the report, and the longest so far with what it was."""
    result.transactions += 1
    if held_s * 1000 > result.longest_write_ms:
        result.longest_write_ms, result.longest_write = held_s * 1000, what

"""FTS5's segment merges on the engine's terms: while anybody else is about, never inside a
delete, in short steps of their own (with nobody else about since the engine began, the pacer
leaves FTS5 to merge inside the deletes, as in Hermes' own writes: pacer.py).

Each of Hermes' FTS5 indexes gains a segment with every transaction that writes
to it, and merges them incrementally: once a transaction's writes have added 64
leaf pages, it merges 64 pages for every level of the index before it commits
(the `automerge` setting names how many segments a level must hold to be
merged). A big store's trigram index has many levels, so a delete that crosses
that line does hundreds of pages of merging: the transactions that ran several
times their estimate, and the writer's worst waits.

So a delete transaction turns `automerge` off when it begins, makes FTS5
write out what it has pending (a savepoint), and puts the stored value back
before it commits. No committed state ever shows another
setting: a row that was absent is absent again, and the change moves the
index's cookie, so every other connection reloads the same configuration. The
merging is then done apart, by FTS5's own 'merge' command, in transactions
sized like the deletes, whenever a level holds as many segments as automerge would merge
or a merge is under way. Small merges (most of them of Hermes' own one-page segments) are left to
automerge, as they always were.

How much: what automerge would have done inside the same deletes, no more (`Budget`). FTS5
earns a merge of 64 pages for every level of the index (its work unit) with every 64 leaf pages
a transaction writes; so every segment that appears between two looks (the deletes' own, or a
Hermes append's) adds its pages times the levels, and every merge step spends what it asked for.
A merge bigger than that (a deep level of a big index made due) is left under way, as automerge
leaves it, for the next writers to go on with a work unit at a time: finishing it in one purge
made the merging a third of a real store's purge, and nearly twice what the same deletes cost
with automerge on.
"""

from __future__ import annotations

import time

from hermes_admin.profile.store import fts_index

DEFAULT_AUTOMERGE = 4  # FTS5's own default; 1 means the default too
FIRST_S_PER_PAGE = 0.0003  # merge work before the first measurement: above what a page usually takes
MIN_PAGES = 8  # a step worth its turn
# and one that never outgrows a transaction: at most this many pages a second aimed at (400 in a
# writer's 20 ms, 800 in an idle 40 ms). Steps are sized by the time a page took (`pages`), so
# the cap binds on fast levels only, where a long doclist can still make one step run 4-5 times
# its estimate: a cap of 1600 pages whatever the aim let one such step hold the lock 98 ms under
# a writer; 400 kept idle steps at half their 40 ms (BENCHMARKS.md).
MAX_PAGES_PER_S = 20_000
# A merge this small (in leaf pages) is left to FTS5's automerge, in Hermes' own appends: it merges
# 64 pages a level for every 64 leaves written, so this is less than one of its work units. Most
# of them are the 1-page segments of Hermes' own appends; merging those in transactions of ours
# would cost a turn each.
SMALL_PAGES = 64
RATE_WINDOW = 9  # merge steps whose rates size the next: one slow level never rules them
SETTINGS_EVERY_S = 5.0  # how often an index's merge settings are read again
MAX_LEVELS = MAX_SEGMENTS = 2000  # FTS5's own limit on segments (FTS5_MAX_SEGMENT)
STRUCTURE_V2 = b"\xff\x00\x00\x01"  # SQLite 3.44+: segments carry five more fields


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint: 7 bits a byte, high bit set on all but the last; a ninth byte gives 8."""
    value = 0
    for n in range(9):
        byte = data[at]
        at += 1
        if n == 8:
            return (value << 8) | byte, at
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at
    return value, at


def levels(record: bytes) -> list[tuple[int, int, int]]:
    """(segments being merged, segments, their leaf pages) for each level of an FTS5 structure record."""
    return _summed(_parsed(record))


def _summed(parsed: list[tuple[int, list[tuple[int, int]]]]) -> list[tuple[int, int, int]]:
    """`_parsed`'s levels as `levels` gives them: the segments counted, their pages added up."""
    return [(merging, len(found), sum(pages for _, pages in found)) for merging, found in parsed]


def _parsed(record: bytes) -> list[tuple[int, list[tuple[int, int]]]]:
    """(segments being merged, [(segment id, leaf pages)]) for each level of a structure record."""
    at = 4  # the configuration cookie
    extended = record[at:at + 4] == STRUCTURE_V2
    if extended:
        at += 4
    count, at = _varint(record, at)
    if count > MAX_LEVELS:
        raise IndexError("more levels than FTS5 ever writes")
    _, at = _varint(record, at)  # segments in all
    _, at = _varint(record, at)  # the write counter
    found = []
    for _ in range(count):
        merging, at = _varint(record, at)
        held, at = _varint(record, at)
        if held > MAX_SEGMENTS:
            raise IndexError("more segments than FTS5 allows")
        level = []
        for _ in range(held):  # its id, first and last leaf page; then five more in a v2 record
            segid, at = _varint(record, at)
            first, at = _varint(record, at)
            last, at = _varint(record, at)
            level.append((segid, max(0, last - first + 1)))
            for _ in range(5 if extended else 0):
                _, at = _varint(record, at)
        found.append((merging, level))
    return found


def _setting(row, low: int, high: int) -> int | None:
    """A `_config` value as FTS5 takes it: an integer from `low` to `high`, else None (FTS5
    ignores the row and uses its default)."""
    value = row[0] if row else None
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None


AUTOMERGE_RANGE, USERMERGE_RANGE = (0, 64), (2, 16)  # the values FTS5's own commands accept


def _left_work(found: list[tuple[int, int, int]], level: int, threshold: int) -> int:
    """The pages a Hermes append would merge for `level` if we left it: none unless it is due (a
    merge under way, or `threshold` segments); else its pages, and those of each level above that
    the merged segment would make due in turn (FTS5 goes on merging within the same append)."""
    merging, segments, pages = found[level]
    if not merging and segments < threshold:
        return 0
    for above in found[level + 1:]:
        if above[0] or above[1] + 1 < threshold:
            break
        pages += above[2]
    return pages


class Budget:
    """The merging automerge would have done for the leaves written since the run began (FTS5's
    measure: its work unit, 64 pages a level, for every 64 leaf pages written: the leaves times the
    levels), less what our merge steps did. Leaves are seen as segments that were not there at the
    last look."""

    def __init__(self, parsed: list[tuple[int, list[tuple[int, int]]]] | None):
        self.pages = 0  # earned and not yet spent
        self.earned = 0  # in all, since the run began
        self._seen = _segment_ids(parsed)

    def look(self, parsed: list[tuple[int, list[tuple[int, int]]]]) -> None:
        """The index as it is now: each segment new since the last look earns its pages times
        the index's levels."""
        written = sum(pages for _, level in parsed for segid, pages in level if segid not in self._seen)
        earned = written * len(parsed)
        self.pages += earned
        self.earned += earned
        self._seen = _segment_ids(parsed)

    def spent(self, pages: int, parsed: list[tuple[int, list[tuple[int, int]]]] | None) -> None:
        """A merge step asked for `pages`; `parsed`: the index after it (its output is not new leaves)."""
        self.pages = max(0, self.pages - pages)
        if parsed is not None:
            self._seen = _segment_ids(parsed)


def _segment_ids(parsed) -> set[int]:
    return {segid for _, level in parsed or () for segid, _ in level}


class FtsMerges:
    """The store's FTS5 indexes, their stored `automerge`, and the merging owed to them."""

    def __init__(self, db, tables: list[str]):
        self.db = db
        self.tables = [t for t in tables if self._may_restore(t)]
        self._rates: dict[tuple[str, int], list[float]] = {}  # seconds a page, by index and level
        self._thresholds: dict[str, tuple[float, int]] = {}  # (when read, what) by index
        # By index, from the first write of ours that touches it (quiet) or the first look (owed):
        # not at open, where a damaged index is for the run's check to find and name, not for us.
        self.budgets: dict[str, Budget] = {}

    def add(self, table: str) -> None:
        """One more index (Hermes' CJK one, once its tokenizer is loaded)."""
        if table not in self.tables and self._may_restore(table):
            self.tables.append(table)

    def _budget(self, db, table: str, parsed=None) -> "Budget":
        if table not in self.budgets:
            self.budgets[table] = Budget(parsed if parsed is not None else self._structure(db, table))
        return self.budgets[table]

    @staticmethod
    def _structure(db, table: str) -> list[tuple[int, list[tuple[int, int]]]] | None:
        """The index's levels as `_parsed` reads them; None: a structure this reader does not know
        (FTS5's own merging stays as it was there)."""
        block = fts_index.structure_block(db, table)
        try:
            return _parsed(block) if block else []
        except (IndexError, TypeError):
            return None

    def _may_restore(self, table: str) -> bool:
        """Can this connection put an absent `_config` row back as absent? (SQLite's defensive
        mode refuses writes to shadow tables: such an index is left to merge as it always has.)"""
        return fts_index.config_writable(self.db, table)

    def _stored(self, db, table: str, key: str, valid: tuple[int, int]) -> tuple[bool, int | None]:
        """(a row exists, its value as FTS5 takes it) for one of the index's settings, as it is now."""
        row = fts_index.config_row(db, table, key)
        return row is not None, _setting(row, *valid)

    def quiet(self, work):
        """`work` (run inside a write transaction) with automerge off, and back as stored before it returns.

        An index whose stored `automerge` is not one FTS5 itself would set again (not an integer
        from 0 to 64) is left alone: putting it back could not give the same row."""
        if not self.tables:
            return work

        def quieted(db):
            quieted_tables = []
            for table in self.tables:
                self._budget(db, table)  # the index before this write, so that what it writes is earned
                present, value = self._stored(db, table, "automerge", AUTOMERGE_RANGE)
                if present and value is None:
                    continue
                fts_index.set_automerge(db, table, 0)
                quieted_tables.append((table, value if present else None))
            done = work(db)
            if quieted_tables:
                # A savepoint makes FTS5 write out what this transaction has pending, while automerge
                # is still off (so nothing merges at COMMIT); then the stored row, or its absence, comes back.
                fts_index.write_out_pending(db)
            for table, value in quieted_tables:
                fts_index.set_automerge(db, table, DEFAULT_AUTOMERGE if value is None else value)
                if value is None:
                    fts_index.forget_automerge(db, table)
            return done
        return quieted

    def _threshold(self, table: str) -> int:
        """How many segments a level needs before we merge it: what automerge would merge, and
        at least what FTS5's 'merge' command asks for (its `usermerge`); 0 for no merging.

        Read again every SETTINGS_EVERY_S, not at each of the thousands of looks a purge takes
        (they add up on a big store): a setting changed meanwhile only moves when we merge, never what
        the deletes put back (quiet() reads the stored value inside each transaction)."""
        now = time.monotonic()
        read_at, threshold = self._thresholds.get(table, (float("-inf"), 0))
        if now - read_at >= SETTINGS_EVERY_S:
            threshold = self._read_threshold(table)
            self._thresholds[table] = (now, threshold)
        return threshold

    def _read_threshold(self, table: str) -> int:
        _, automerge = self._stored(self.db, table, "automerge", AUTOMERGE_RANGE)
        _, usermerge = self._stored(self.db, table, "usermerge", USERMERGE_RANGE)
        if automerge == 0:
            return 0  # the store asks for no merging: neither do we
        automerge = DEFAULT_AUTOMERGE if automerge in (None, 1) else automerge
        return max(automerge, usermerge or DEFAULT_AUTOMERGE)

    def owed(self) -> tuple[str, int] | None:
        """(index, level) with merging to do: a merge under way, or a level as full as automerge
        allows, of more than SMALL_PAGES, while the index's `Budget` lasts. The level is the one
        FTS5's 'merge' takes up next (the first with a merge under way, else the one with the most
        segments), which may be a small one before the big."""
        for table in self.tables:
            threshold = self._threshold(table)
            if threshold == 0:
                continue
            parsed = self._structure(self.db, table)
            if parsed is None:
                continue
            budget = self._budget(self.db, table, parsed)
            budget.look(parsed)
            found = _summed(parsed)
            if budget.pages < MIN_PAGES or not any(_left_work(found, level, threshold) > SMALL_PAGES
                                                   for level in range(len(found))):
                continue
            under_way = [level for level, (merging, _, _) in enumerate(found) if merging]
            return table, (under_way[0] if under_way else max(range(len(found)), key=lambda level: found[level][1]))
        return None

    def pages(self, target_s: float, owed: tuple[str, int]) -> int:
        """How many pages a merge step of this index and level may do in about `target_s`.

        A page's cost depends on the level: a deep one holds the long doclists of the common
        words (and trigrams), and a step cannot stop inside one. So the time is measured a level
        at a time, and a step is sized by the slowest of the level's last steps: the median made
        one step in ten take twice its time, and those set a waiting writer's wait. A level not
        measured yet is sized by the slowest one measured."""
        rates = self._rates.get(owed)
        if rates:
            rate = max(rates)
        else:
            rate = max((max(r) for r in self._rates.values() if r), default=FIRST_S_PER_PAGE)
        fits = int(target_s / max(rate, 1e-9))
        cap = int(MAX_PAGES_PER_S * target_s)
        return max(MIN_PAGES, min(cap, fits, self._budget(self.db, owed[0]).pages))

    def merge(self, db, table: str, pages: int) -> int:
        """One step (inside a write transaction) of about `pages` pages; how many rows it wrote.

        FTS5 says fewer than two means there was nothing to merge; more, and it is about the pages
        written (a merge stops at a term's end, so one step may do more than asked). The step is
        paid from the index's budget, and its output is no new leaves (the structure is read
        again inside the same transaction)."""
        written = fts_index.merge(db, table, pages)
        self._budget(db, table).spent(pages, self._structure(db, table))
        return written

    def measured(self, owed: tuple[str, int], pages: int, written: int, held_s: float) -> None:
        """A step's time per page asked, from steps that did all that was asked (a merge writes
        its output pages and deletes its input's: a step short of work writes fewer rows)."""
        if written >= pages:
            rates = self._rates.setdefault(owed, [])
            rates.append(held_s / pages)
            del rates[:-RATE_WINDOW]

"""FTS5's segment merges on the engine's terms: never inside a delete, in short steps of their own.

Each of Hermes' FTS5 indexes gains a segment with every transaction that writes
to it, and merges them incrementally: once a transaction's writes have added 64
leaf pages, it merges 64 pages for every level of the index before it commits
(the `automerge` setting names how many segments a level must hold to be
merged). On the 1 GB realistic store the trigram index has 10 levels, so a
delete that crosses that line does 640 pages of merging: those were the
transactions that ran 5-10 times their estimate (150-550 ms where 15-40 ms was
due), and the writer's worst waits.

So a delete transaction turns `automerge` off when it begins and puts the
stored value back before it commits. No committed state ever shows another
setting: a row that was absent is absent again, and the change moves the
index's cookie, so every other connection reloads the same configuration. The
merging is then done apart, by FTS5's own 'merge' command, a few dozen pages a
transaction, whenever a level holds as many segments as automerge would merge
or a merge is under way: the index is left as automerge would leave it, so a
Hermes append never finds our merge work waiting for it.
"""

from __future__ import annotations

DEFAULT_AUTOMERGE = 4  # FTS5's own default; 1 means the default too
FIRST_S_PER_PAGE = 0.0003  # merge work, before the first measurement (measured here: 0.05-0.2 ms a page)
MIN_PAGES, MAX_PAGES = 8, 400
RATE_WINDOW = 9
STRUCTURE_ROWID = 10  # the %_data row that holds an index's structure record
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


def levels(record: bytes) -> list[tuple[int, int]]:
    """(segments being merged, segments) for each level of an FTS5 structure record."""
    at = 4  # the configuration cookie
    extended = record[at:at + 4] == STRUCTURE_V2
    if extended:
        at += 4
    count, at = _varint(record, at)
    _, at = _varint(record, at)  # segments in all
    _, at = _varint(record, at)  # the write counter
    found = []
    for _ in range(count):
        merging, at = _varint(record, at)
        segments, at = _varint(record, at)
        for _ in range(segments * (8 if extended else 3)):
            _, at = _varint(record, at)
        found.append((merging, segments))
    return found


class FtsMerges:
    """The store's FTS5 indexes, their stored `automerge`, and the merging owed to them."""

    def __init__(self, db, tables: list[str]):
        self.db = db
        self.stored: dict[str, int | None] = {}
        for table in tables:
            row = db.execute_sql(f"SELECT v FROM {table}_config WHERE k = 'automerge'").fetchone()
            self.stored[table] = None if row is None else int(row[0])
        self._rates: dict[tuple[str, int], list[float]] = {}  # seconds a page, by index and level
        self.steps = 0

    def quiet(self, work):
        """`work` (run inside a write transaction) with automerge off, and back as stored before it returns."""
        if not self.stored:
            return work

        def quieted(db):
            for table in self.stored:
                db.execute_sql(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', 0)")
            done = work(db)
            for table, value in self.stored.items():
                # Setting a value first writes out what this transaction has pending, while automerge is
                # still off; then the stored row (or its absence) comes back.
                db.execute_sql(f"INSERT INTO {table}({table}, rank) VALUES ('automerge', ?)",
                               (DEFAULT_AUTOMERGE if value is None else value,))
                if value is None:
                    db.execute_sql(f"DELETE FROM {table}_config WHERE k = 'automerge'")
            return done
        return quieted

    def owed(self) -> tuple[str, int] | None:
        """(index, level) with merging to do: a merge under way, or a level as full as automerge
        allows. The level is the one FTS5's 'merge' takes up: the first with a merge under way,
        else the one with the most segments."""
        for table, value in self.stored.items():
            threshold = DEFAULT_AUTOMERGE if value in (None, 1) else value
            if threshold == 0:
                continue  # the store asks for no merging: neither do we
            row = self.db.execute_sql(f"SELECT block FROM {table}_data WHERE id = ?", (STRUCTURE_ROWID,)).fetchone()
            try:
                found = levels(row[0]) if row and row[0] else []
            except (IndexError, TypeError):
                continue  # a structure this reader does not know: FTS5's own merging stays as it was
            under_way = [level for level, (merging, _) in enumerate(found) if merging]
            if under_way:
                return table, under_way[0]
            fullest = max(range(len(found)), key=lambda level: found[level][1], default=None)
            if fullest is not None and found[fullest][1] >= threshold:
                return table, fullest
        return None

    def pages(self, target_s: float, owed: tuple[str, int]) -> int:
        """How many pages a merge step of this index and level may do in about `target_s`.

        A page's cost depends on the level: a deep one holds the long doclists of the common
        words (and trigrams), and a step cannot stop inside one. So the time is measured a level
        at a time; a level not measured yet is sized by the slowest one measured."""
        rates = self._rates.get(owed)
        if rates:
            rate = sorted(rates)[len(rates) // 2]
        else:
            rate = max((max(r) for r in self._rates.values() if r), default=FIRST_S_PER_PAGE)
        return max(MIN_PAGES, min(MAX_PAGES, int(target_s / max(rate, 1e-9))))

    def merge(self, db, table: str, pages: int) -> int:
        """One step (inside a write transaction) of about `pages` pages; how many rows it wrote.

        FTS5 says fewer than two means there was nothing to merge; more, and it is about the pages
        written (a merge stops at a term's end, so one step may do more than asked)."""
        before = db.connection().total_changes
        db.execute_sql(f"INSERT INTO {table}({table}, rank) VALUES ('merge', ?)", (pages,))
        return db.connection().total_changes - before

    def measured(self, owed: tuple[str, int], pages: int, written: int, held_s: float) -> None:
        """A step's time per page asked, from steps that did all that was asked (a merge writes
        its output pages and deletes its input's: a step short of work writes fewer rows)."""
        self.steps += 1
        if written >= pages:
            rates = self._rates.setdefault(owed, [])
            rates.append(held_s / pages)
            del rates[:-RATE_WINDOW]

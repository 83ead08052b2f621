"""Tables for people, and the same rows for scripts.

On a terminal: a rich table as wide as the terminal. The columns people copy (ids, profile
names, paths) are never cut. Less important columns are dropped first, in the order each table
gives, as `ps` and `systemctl` do, and a line under the table names them (`--plain` or a wider
terminal shows them all). A path column has its place in that order too: there it goes under its
rows, whole, so the counts and sizes ranked before it stay on screen. A free-text
column (a title) is cut with "…", one that must be read whole (a reason) wraps in its cell. A
value still too long for its column (a path) goes under its row, on a line of its own that the
terminal wraps, so it is copied whole (a folded cell would copy with a line break); its cell says
"↓", and the shorter values of that column stay in it.

Piped, or with `--plain`: no box drawing, no colour, one row a line, the cells separated by a tab,
every column in a fixed order under a header line (what `awk -F'\\t'` and `cut` want).

Colour only on a terminal; rich honours `NO_COLOR`.
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass

import click

CUT_MIN = 12  # a title keeps this much on the narrowest terminal
PLAIN = False  # `--plain`: the piped form on a terminal too (set once per command)


@dataclass(frozen=True)
class Column:
    name: str
    whole: bool = False  # an id, a name or a path: never cut (folded only when nothing else fits)
    # On a narrow terminal, columns with the highest `drop` go first; 0 never goes. A `whole` column
    # with a `drop` is not hidden at its turn: its values go under their rows (a path, long by nature,
    # ranked after the counts and sizes that must stay beside the name).
    drop: int = 0
    cut: bool = False  # free text (a title): may end in "…" on a narrow terminal
    wrap: bool = False  # free text read whole (a reason, an error): wraps onto more lines of its row


def plain() -> bool:
    return PLAIN or not _terminal()


def _terminal() -> bool:
    return sys.stdout.isatty()


def show(columns: list[Column], rows: list[list[object]]) -> None:
    """Print the rows: a table that fits on a terminal, tab-separated lines otherwise."""
    from hermes_admin.shown import clean

    cells = [["-" if v is None or v == "" else clean(v) for v in row] for row in rows]
    originals = [list(row) for row in cells]  # the table's cells may say "↓": the value follows under the row
    if plain():
        # clean() escaped every tab and newline inside a cell: one row is one line.
        click.echo("\t".join(c.name for c in columns))
        for row in cells:
            click.echo("\t".join(row))
        return
    console = _console()
    kept, below, dropped = list(range(len(columns))), [], []
    under: list[list[int]] = [[] for _ in cells]  # per row, the columns whose value follows under it

    def measure(chosen: list[int], table_cells: list[list[str]] | None = None) -> int:
        # A table is as wide as each column's widest cell makes it: measured on those cells alone
        # (the widest on screen and the longest), not on every row, since the fitting measures often.
        return _width(console, _table([columns[i] for i in chosen], _widest(table_cells or cells, chosen)))

    while kept:
        width = measure(kept)
        if width <= console.width:
            break
        droppable = [i for i in kept if columns[i].drop]
        if droppable:
            going = max(droppable, key=lambda i: (columns[i].drop, i))
            kept.remove(going)
            (below if columns[going].whole else dropped).append(going)
            continue
        # What is never cut and still does not fit goes under its row, whole: only the values longer
        # than the widest cap every such column can have (`config show`'s long paths, its short values
        # kept in their columns), or, when even a narrow cap does not fit, the widest column entire.
        caps = _caps(lambda c: measure(kept, _capped(cells, c)) <= console.width,
                     [i for i in kept if _cappable(columns[i])], cells)
        whole_column = [i for i, cap in (caps or {}).items() if all(len(row[i]) > cap for row in cells)]
        if caps is not None and not whole_column:
            for r, row in enumerate(cells):
                under[r] += [i for i, cap in caps.items() if len(row[i]) > cap]
            cells[:] = _capped(cells, caps)
            continue
        # A column no value of which would stay in it goes under the rows entire, the widest first.
        widest = max(whole_column or kept,
                     key=lambda i: (columns[i].whole, max(len(row[i]) for row in cells) if cells else 0))
        kept.remove(widest)
        below.append(widest)
    for i in reversed(dropped if below or any(under) else []):  # with a value under its row, room again for some
        if measure(sorted(kept + [i])) <= console.width:
            kept = sorted(kept + [i])
    width = measure(kept) if kept else 0
    spare = console.width - width if kept else 0  # what free text (a title) may take back
    table = _table([columns[i] for i in kept], [[row[i] for i in kept] for row in cells], spare)
    hidden = [columns[i].name for i in sorted(set(range(len(columns))) - set(kept) - set(below))]
    # Said under the table, in the terminal's width: what a narrower screen hides is never a surprise.
    note = textwrap.fill(f"(not shown at {console.width} columns: {', '.join(hidden)}; --plain shows every column)",
                         max(console.width, 40), break_on_hyphens=False) if hidden else None
    if not below and not any(under):
        console.print(table)
        if note:
            console.file.write(note + "\n")
        return
    # Each row is one line of the table (nothing in it wraps); the values too long for it follow,
    # indented, as plain lines the terminal wraps itself: copied from a terminal, they come whole.
    with console.capture() as captured:
        if kept:
            console.print(table)
    lines = captured.get().splitlines()
    head, body = (lines[:2], lines[2:]) if kept else ([], [""] * len(cells))
    out = console.file
    for line in head:
        out.write(line.rstrip() + "\n")
    for line, row, whole, more in zip(body, cells, originals, under):
        if line.strip():
            out.write(line.rstrip() + "\n")
        for i in sorted(below + more):
            out.write(f"  {columns[i].name}: {whole[i]}\n")
    if note:
        out.write(note + "\n")
    out.flush()


def _widest(cells: list[list[str]], chosen: list[int]) -> list[list[str]]:
    """Two rows that measure as `cells` do: each column's widest cell on screen, and its longest."""
    from rich.cells import cell_len

    if not cells:
        return []
    return [[max((row[i] for row in cells), key=key) for i in chosen] for key in (cell_len, len)]


def _cappable(column: Column) -> bool:
    return not (column.cut or column.wrap)  # rich itself fits those (an ellipsis, lines of the cell)


def _capped(cells: list[list[str]], caps: dict[int, int]) -> list[list[str]]:
    """The cells as they would be shown with each value longer than its column's cap under its row."""
    return [["↓" if len(v) > caps.get(i, len(v)) else v for i, v in enumerate(row)] for row in cells]


def _caps(fits, candidates: list[int], cells: list[list[str]]) -> dict[int, int] | None:
    """Each column's cap, the table fitting: one cap for all first (at least CUT_MIN; None when even
    that does not fit), then each column's raised as far as it still fits, the first columns first."""
    longest = {i: max((len(row[i]) for row in cells), default=0) for i in candidates}
    if not fits(dict.fromkeys(candidates, CUT_MIN)):
        return None
    same = _largest(lambda c: fits(dict.fromkeys(candidates, c)), CUT_MIN, max(longest.values(), default=0))
    caps = dict.fromkeys(candidates, same)
    for i in candidates:
        caps[i] = _largest(lambda c, i=i: fits({**caps, i: c}), caps[i], longest[i])
    return {i: cap for i, cap in caps.items() if cap < longest[i]}


def _largest(fits, low: int, high: int) -> int:
    """The largest value in [low, high] that `fits`, `fits(low)` holding (a bisection)."""
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def _console():
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def _width(console, table) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update(width=10_000), table).maximum


def _table(columns: list[Column], rows: list[list[str]], spare: int = 0):
    """Nothing wraps but a `wrap` column; `spare`: columns a free-text column may grow by (0: at its narrowest)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    out = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, show_edge=False)
    cut = [c for c in columns if c.cut or c.wrap]
    for column in columns:
        if column.cut or column.wrap:
            narrowest = min(CUT_MIN, max([len(column.name)] + [len(r[columns.index(column)]) for r in rows]))
            out.add_column(column.name, no_wrap=column.cut, overflow="ellipsis" if column.cut else "fold",
                           min_width=narrowest, max_width=narrowest + spare // len(cut))
        else:
            out.add_column(column.name, no_wrap=True, overflow="fold")
    for row in rows:  # Text, not str: markup inside data is never interpreted
        out.add_row(*[Text(v) for v in row])
    return out

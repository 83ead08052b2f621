"""Packing units into transactions: pure, from their weights and the pacing (docs/design.md §5).

Units are weighed by the bytes of their messages plus a fixed cost per row and unit
(exports.ROW_WEIGHT, UNIT_WEIGHT). A transaction takes whole units in order while their weight
fits the budget the last transactions measured; a unit too big for one transaction alone goes
by itself, to be deleted in steps (splits.py). Nothing here reads a store or a clock.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

MAX_UNITS_PER_TXN = 1024  # a bound on one transaction's parameter lists and its report, whatever the weights


class Packed(NamedTuple):
    """The next transaction: how many units it takes, whether the one unit goes in steps, its weight."""
    count: int
    split: bool
    weight: int


def next_transaction(weights: Sequence[int | None], budget: int, too_big: Callable[[int], bool],
                     orphans: bool = False, max_units: int = MAX_UNITS_PER_TXN) -> Packed:
    """The units from the first of `weights` that go in one transaction. `weights[i]` is None for a
    unit not weighed yet (its export is still to come): the transaction ends before it. The first
    unit is always taken; one too big for a transaction (`too_big`) is a transaction of its own,
    deleted in steps (orphans never: they have no rows to go in steps)."""
    first = weights[0]
    if not orphans and too_big(first):
        return Packed(1, True, first)
    count, weight = 0, 0
    for w in weights[:max_units]:
        if w is None or (count and (weight + w > budget or (not orphans and too_big(w)))):
            break
        count += 1
        weight += w
    return Packed(count, False, weight)


def units_by_count(budget: int, unit_weight: int, max_units: int = MAX_UNITS_PER_TXN) -> int:
    """Units per transaction for row updates (an archive flip, a stale row closed): by count, sized
    like the deletes."""
    return max(1, min(max_units, budget // unit_weight))


def messages_in_step(weights: Sequence[int], budget: int) -> int:
    """How many of a split unit's messages (their weights, in id order) go in its next step: as
    many as the budget allows, at least one."""
    count, weight = 0, 0
    for w in weights:
        if count and weight + w > budget:
            break
        count += 1
        weight += w
    return count

"""The packing of units into transactions, from a table: pure, no store."""

from __future__ import annotations

import pytest

from hermes_admin.profile.engine.packing import Packed, next_transaction, units_by_count


def over(limit):
    return lambda weight: weight > limit


@pytest.mark.parametrize("weights,budget,too_big,orphans,max_units,packed", [
    # whole units while they fit the budget
    ([10, 10, 10], 25, over(100), False, 1024, Packed(2, False, 20)),
    ([10, 10, 10], 30, over(100), False, 1024, Packed(3, False, 30)),
    # the first unit is always taken, even past the budget (it is not too big to hold)
    ([40, 10], 25, over(100), False, 1024, Packed(1, False, 40)),
    # a first unit too big for one transaction goes alone, in steps
    ([500, 10], 25, over(100), False, 1024, Packed(1, True, 500)),
    # a too-big unit later on ends the transaction before it
    ([10, 500, 10], 1000, over(100), False, 1024, Packed(1, False, 10)),
    # orphans are never split: their weight only counts against the budget
    ([500, 10], 25, over(100), True, 1024, Packed(1, False, 500)),
    ([10, 10, 500], 1000, over(100), True, 1024, Packed(3, False, 520)),
    # a unit not weighed yet (its export is to come) ends the transaction
    ([10, None, 10], 100, over(100), False, 1024, Packed(1, False, 10)),
    # at most max_units units, whatever the budget
    ([1] * 10, 100, over(100), False, 4, Packed(4, False, 4)),
])
def test_next_transaction(weights, budget, too_big, orphans, max_units, packed):
    assert next_transaction(weights, budget, too_big, orphans, max_units) == packed


@pytest.mark.parametrize("budget,unit_weight,max_units,count", [
    (10_000, 1000, 1024, 10),
    (500, 1000, 1024, 1),  # at least one
    (10**9, 1000, 1024, 1024),  # at most max_units
])
def test_units_by_count(budget, unit_weight, max_units, count):
    assert units_by_count(budget, unit_weight, max_units) == count

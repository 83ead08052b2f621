"""A store's sessions as graphs that never cut a unit: memory bounded whatever the store's size.

Sessions at either end of a parent or delegate link come first, together in one
graph: every unit of more than one session is made of such links. Every other
session is a unit by itself, with no children, and comes in batches of a few
thousand, in rowid order. So a pure rule applied part by part selects what it
would select from one graph of every row (the tests compare both), while at most
two parts are in memory (the one acted on, and the next, read ahead so that its
first export can begin: actions/common.act_in_parts). A caller may delete
between two batches (rowids only grow, so no row is read twice).
"""

from __future__ import annotations

from typing import Iterator

from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.read import load_rows, related_ids, session_batches


def graph_around(store: Store, ids) -> Graph:
    """These sessions with every linked one: all that a unit (or lineage) of theirs can hold."""
    return Graph(load_rows(store, sorted(related_ids(store) | set(ids))).values())


def graph_parts(store: Store, only: str | None = None) -> Iterator[Graph]:
    """`only`: a condition (SQL, on `s`) that every session the rule could pick or keep meets;
    the other unlinked sessions are not read (the linked ones always are: a unit spans them)."""
    linked = related_ids(store)
    rows = load_rows(store, sorted(linked))
    yield Graph(rows.values())
    del rows
    for batch in session_batches(store, leave_out=linked, only=only):
        yield Graph(batch)

"""How sessions hang together: compression lineages and delegates (docs/design.md §2).

Pure functions over `SessionRow`s, no store access. A compression edge is a
child whose parent ended with `end_reason = 'compression'`; a delegate is a
child whose `model_config` carries `_delegate_from`. A *unit* (what gets
deleted or archived together) is a lineage plus the delegates of its members.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping, Protocol


class Row(Protocol):
    id: str
    parent_id: str | None
    end_reason: str | None
    delegate_from: str | None


class Graph:
    """Parent/child indexes over one store's sessions."""

    def __init__(self, rows: Iterable[Row]):
        self.rows: dict[str, Row] = {r.id: r for r in rows}
        self.children: Mapping[str, list[str]] = defaultdict(list)
        self.delegates: Mapping[str, list[str]] = defaultdict(list)
        for row in self.rows.values():
            if row.delegate_from:
                self.delegates[row.delegate_from].append(row.id)
            if row.parent_id:
                self.children[row.parent_id].append(row.id)
                if row.delegate_from and row.delegate_from != row.parent_id:
                    self.delegates[row.parent_id].append(row.id)

    def is_delegate(self, sid: str) -> bool:
        return bool(self.rows[sid].delegate_from)

    def compression_parent(self, sid: str) -> str | None:
        row = self.rows[sid]
        parent = self.rows.get(row.parent_id) if row.parent_id else None
        if parent is None or row.delegate_from or parent.end_reason != "compression":
            return None
        return parent.id

    def compression_children(self, sid: str) -> list[str]:
        if self.rows[sid].end_reason != "compression":
            return []
        return sorted(c for c in self.children.get(sid, ()) if not self.rows[c].delegate_from)

    def lineage(self, sid: str) -> list[str]:
        """The whole compression lineage of `sid`, root first (breadth-first below it)."""
        root, seen = sid, {sid}
        while (up := self.compression_parent(root)) is not None and up not in seen:
            seen.add(up)
            root = up
        order, queue, visited = [], [root], {root}
        while queue:
            current = queue.pop(0)
            order.append(current)
            for child in self.compression_children(current):
                if child not in visited:
                    visited.add(child)
                    queue.append(child)
        return order

    def delegates_of(self, sid: str) -> list[str]:
        """Delegate descendants of `sid`, recursively; never `sid` itself (cycle-safe)."""
        found: list[str] = []
        seen = {sid}
        frontier = [sid]
        while frontier:
            nxt = []
            for parent in frontier:
                for child in sorted(set(self.delegates.get(parent, ()))):
                    if child not in seen and child in self.rows:
                        seen.add(child)
                        found.append(child)
                        nxt.append(child)
            frontier = nxt
        return found

    def other_children(self, sid: str) -> list[str]:
        """Children that are neither compression continuations nor delegates (branches, resets)."""
        compression = set(self.compression_children(sid))
        return sorted(
            c for c in self.children.get(sid, ())
            if c not in compression and not self.rows[c].delegate_from
        )


class Unit:
    """What is deleted or archived together, and the id it was selected for."""

    __slots__ = ("session_id", "ids", "rule")

    def __init__(self, session_id: str, ids: Iterable[str], rule: str = ""):
        self.session_id = session_id
        self.ids = tuple(dict.fromkeys(ids))  # ordered, no duplicates
        self.rule = rule

    def __repr__(self) -> str:
        return f"Unit({self.session_id!r}, {self.ids!r}, {self.rule!r})"


def delete_unit(graph: Graph, sid: str, rule: str = "") -> Unit:
    """A session with its delegates (recursively): what an explicit delete removes."""
    return Unit(sid, [sid, *graph.delegates_of(sid)], rule)


def lineage_unit(graph: Graph, sid: str, rule: str = "") -> Unit:
    """A whole compression lineage plus its members' delegates; keyed by the lineage root."""
    members = graph.lineage(sid)
    ids = list(members)
    for member in members:
        ids += graph.delegates_of(member)
    return Unit(members[0], ids, rule)

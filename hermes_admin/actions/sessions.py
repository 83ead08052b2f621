"""`sessions delete|archive|unarchive`: units named on the command line."""

from __future__ import annotations

from hermes_admin.actions.common import Run, with_engine
from hermes_admin.engine import Engine
from hermes_admin.homes import Profile
from hermes_admin.lineage import Graph, Unit, delete_unit
from hermes_admin.store.read import load_sessions

NAMED = "named on the command line"


def _units(engine: Engine, ids: list[str], build) -> list[Unit]:
    graph = Graph(load_sessions(engine.store))
    units, taken = [], set()
    for sid in ids:
        if sid in taken or sid not in graph.rows:
            continue  # already part of an earlier unit (a delegate named with its parent), or gone
        unit = build(graph, sid)
        taken.update(unit.ids)
        units.append(unit)
    return units


def delete(run: Run, profile: Profile, ids: list[str]) -> None:
    """Each session with its delegates is one unit; other children are orphaned."""
    with_engine(run, profile, lambda engine: [
        engine.delete(_units(engine, ids, lambda g, sid: delete_unit(g, sid, NAMED)), "delete")
    ])


def archive(run: Run, profile: Profile, ids: list[str], archived: bool) -> None:
    """The whole compression lineage flips; `archive` fires only on a real change, unarchive never."""
    def lineage(graph: Graph, sid: str) -> Unit:
        return Unit(sid, [sid, *graph.lineage(sid)], NAMED)

    with_engine(run, profile, lambda engine: [
        engine.set_archived(_units(engine, ids, lineage), archived, "archive" if archived else None)
    ])

"""`sessions delete|archive|unarchive`: sessions named on the command line or matched by filters."""

from __future__ import annotations

from typing import Iterator

from hermes_admin.filters import Filters
from hermes_admin.model import Profile, Reason
from hermes_admin.profile.actions.common import Ledger, Refused, Run, act_in_parts, refuse_too_broad, with_engine
from hermes_admin.profile.engine import Engine
from hermes_admin.profile.exports import Settings
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.lineage import Graph, Unit, delete_unit
from hermes_admin.profile.parts import graph_around, graph_parts
from hermes_admin.results import Action, Result

NAMED = "named on the command line"  # the rule of a unit picked by id
MATCHED = "matched by the filters"  # the rule of a unit picked by the filters


def matching(graph: Graph, filters: Filters, archiving: bool) -> list[str]:
    """Sessions the filters pick, as `hermes sessions prune|archive` would: ended (for deletes),
    unpinned, and for archiving only unarchived lineage tips; delegates follow their parents."""
    picked = []
    for sid in sorted(graph.rows):
        row = graph.rows[sid]
        if row.pinned or graph.is_delegate(sid) or not filters.matches(row):
            continue
        if archiving and (row.archived or graph.compression_children(sid)):
            continue
        if not archiving and row.ended_at is None:
            continue
        picked.append(sid)
    return picked


def _parts_of_units(engine: Engine, ids: list[str], filters: Filters | None, force: bool, archiving: bool,
                    build) -> Iterator[list[Unit]]:
    """The units to act on, a part of the store at a time (parts.py): never every row in memory.

    Named sessions alone need only their own rows and the linked ones (a unit is made of links);
    filters look at every part, and first count, for the guard, before anything is touched.
    """
    store = engine.store
    filtering = filters is not None and filters.given()
    if not filtering:
        parts = [graph_around(store, ids)]
    else:
        if not filters.has_age_bound and not force:
            refuse_too_broad(engine, lambda graph: (len(matching(graph, filters, archiving)),
                                                    len(matching(graph, Filters(), archiving))))
        parts = graph_parts(store)
    for graph in parts:
        wanted = [(sid, NAMED) for sid in ids if sid in graph.rows]  # the others are gone, or in another part
        if filtering:
            wanted += [(sid, MATCHED) for sid in matching(graph, filters, archiving)]
        units, taken = [], set()
        for sid, rule in wanted:
            if sid in taken:
                continue  # already part of an earlier unit (a delegate named with its parent)
            unit = build(graph, sid, rule)
            taken.update(unit.ids)
            units.append(unit)
        yield units


def _guarded(run: Run, work):
    def wrapped(engine: Engine):
        try:
            return work(engine)
        except Refused as exc:
            run.add(exc.problem)
            return []
    return wrapped


def delete(run: Run, profile: Profile, env: Environment, ids: list[str], filters: Filters | None = None,
           force: bool = False, exports: Settings | None = None) -> None:
    """Each session with its delegates is one unit; other children are orphaned."""
    ledger = Ledger()

    def work(engine: Engine) -> list[Result]:
        with ledger.begun(Result(profile.name, Action.DELETE, Reason.DELETE, engine.dry_run)) as result:
            act_in_parts(engine, result, _parts_of_units(engine, ids, filters, force, False, delete_unit),
                         lambda units: engine.delete(units, Reason.DELETE))
        return ledger.results

    with_engine(run, profile, env, _guarded(run, work), exports, ledger=ledger)


def archive(run: Run, profile: Profile, env: Environment, ids: list[str], archived: bool,
            filters: Filters | None = None, force: bool = False) -> None:
    """The whole compression lineage flips; `archive` fires only on a real change, unarchive never."""
    def lineage(graph: Graph, sid: str, rule: str) -> Unit:
        return Unit(sid, [sid, *graph.lineage(sid)], rule)

    action, reason = (Action.ARCHIVE, Reason.ARCHIVE) if archived else (Action.UNARCHIVE, None)
    ledger = Ledger()

    def work(engine: Engine) -> list[Result]:
        with ledger.begun(Result(profile.name, action, reason, engine.dry_run)) as result:
            act_in_parts(engine, result, _parts_of_units(engine, ids, filters, force, True, lineage),
                         lambda units: engine.set_archived(units, archived, reason))
        return ledger.results

    with_engine(run, profile, env, _guarded(run, work), ledger=ledger)

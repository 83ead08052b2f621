"""`sessions delete|archive|unarchive`: sessions named on the command line or matched by filters."""

from __future__ import annotations

from hermes_admin.actions.common import Run, with_engine
from hermes_admin.engine import Engine
from hermes_admin.homes import Profile
from hermes_admin.lineage import Graph, Unit, delete_unit
from hermes_admin.store.read import load_sessions
from hermes_admin.tasks.filters import Filters

NAMED = "named on the command line"
MATCHED = "matched by the filters"


class Refused(Exception):
    pass


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


def _units(engine: Engine, ids: list[str], filters: Filters | None, force: bool, archiving: bool,
           build) -> list[Unit]:
    graph = Graph(load_sessions(engine.store))
    wanted = [(sid, NAMED) for sid in ids]
    if filters is not None and filters.given():
        picked = matching(graph, filters, archiving)
        candidates = matching(graph, Filters(), archiving)
        if picked and len(picked) == len(candidates) and not filters.has_age_bound and not force:
            raise Refused(f"profile '{engine.profile.name}': the filters match all {len(picked)} candidate sessions "
                          "and set no age bound; add --before/--after or use --force")
        wanted += [(sid, MATCHED) for sid in picked]
    units, taken = [], set()
    for sid, rule in wanted:
        if sid in taken or sid not in graph.rows:
            continue  # already part of an earlier unit (a delegate named with its parent), or gone
        unit = build(graph, sid, rule)
        taken.update(unit.ids)
        units.append(unit)
    return units


def _guarded(run: Run, work):
    def wrapped(engine: Engine):
        try:
            return work(engine)
        except Refused as exc:
            run.errors.append(str(exc))
            return []
    return wrapped


def delete(run: Run, profile: Profile, ids: list[str], filters: Filters | None = None, force: bool = False) -> None:
    """Each session with its delegates is one unit; other children are orphaned."""
    with_engine(run, profile, _guarded(run, lambda engine: [
        engine.delete(_units(engine, ids, filters, force, False, delete_unit), "delete")
    ]))


def archive(run: Run, profile: Profile, ids: list[str], archived: bool, filters: Filters | None = None,
            force: bool = False) -> None:
    """The whole compression lineage flips; `archive` fires only on a real change, unarchive never."""
    def lineage(graph: Graph, sid: str, rule: str) -> Unit:
        return Unit(sid, [sid, *graph.lineage(sid)], rule)

    with_engine(run, profile, _guarded(run, lambda engine: [
        engine.set_archived(_units(engine, ids, filters, force, True, lineage), archived,
                            "archive" if archived else None)
    ]))

"""The maintenance tasks of one profile, in the order `run` uses (docs/design.md §3).

repair (report) -> ghost prune -> empty sweep -> purge -> auto-archive. Each
task selects with its pure module in `tasks/` from a fresh read of the store,
then hands the units to the engine. A task that policy disables is reported
as skipped, never silently left out. Within one run no row is selected by two
tasks, so a dry run lists each row once, under the task that would take it.
"""

from __future__ import annotations

import time
from typing import Iterator

from hermes_admin import stopping
from hermes_admin.profile.store import sql
from hermes_admin.profile.actions.common import Refused, Run, act_in_parts, too_broad, with_engine
from hermes_admin.profile.engine.engine import Engine, Result
from hermes_admin.profile.engine.exports import Settings
from hermes_admin.profile import installation
from hermes_admin.profile.hermes_config import HermesConfig, HermesConfigError
from hermes_admin.profile.hermes_config import load as load_hermes_config
from hermes_admin.protocol import Profile, Request  # Request: the one shape of a maintenance pass
from hermes_admin.profile.engine.state_folder import LockHeld
from hermes_admin.profile.store import StoreError
from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.policy import Policy, PolicyError, with_origins
from hermes_admin.profile.parts import graph_parts
from hermes_admin.profile.store.read import (WITHOUT_MESSAGES, any_without_messages, existing_ids, message_bytes,
                                             orphan_session_ids)
from hermes_admin.profile.tasks import Selection, archive, budget, empty, ghosts, retention, stale

from hermes_admin.profile.tasks import ORDER  # noqa: E402 (re-exported: `run`'s order)
from hermes_admin.profile.store.errors import SQLITE_ERRORS
CHUNK = 2000  # files of sessions/ looked at together by the ghost sweep
BUDGET_CHUNK = 200  # units whose text the size budget sums in one query (their ids bound a statement's)


class _Pass:
    """One profile's run: the engine, the policy, and the rows already taken by an earlier task."""

    def __init__(self, engine: Engine, policy: Policy, request: Request):
        self.engine, self.policy, self.request = engine, policy, request
        # Ids a task selected that are still in the store: all of them in a dry run, else the
        # ones it skipped (what it did act on is gone, and kept out of this set: memory).
        self.claimed: set[str] = set()
        # The first result of a delete that freed pages: incremental vacuum gives them back once every
        # task is done (`reclaim`), so that its last commits are the run's last and cut the WAL back.
        self.to_reclaim: Result | None = None

    def reclaim(self) -> None:
        """Free pages back to the file system, on a store in incremental auto-vacuum (engine/space.py)."""
        if self.to_reclaim is not None:
            started = time.monotonic()
            self.engine.reclaim(self.to_reclaim)
            self.to_reclaim.seconds = (self.to_reclaim.seconds or 0) + time.monotonic() - started

    def result(self, task: str, action: str, reason: str | None) -> Result:
        return Result(self.engine.profile.name, action, reason, self.engine.dry_run, task=task)

    def skipped(self, task: str, why: str) -> Result:
        result = self.result(task, "none", None)
        result.status, result.why = "skipped", why
        return result

    def unclaimed(self, selection: Selection) -> list:
        units = [u for u in selection.units if not self.claimed.intersection(u.ids)]
        for unit in units:
            self.claimed.update(unit.ids)
        return units

    # -- the tasks -----------------------------------------------------------

    def ghost_prune(self) -> Result:
        if not (self.policy.ghost_prune or self.request.explicit):
            return self.skipped("ghost_prune", "ghost_prune is off in this profile's policy")
        now = self.request.now
        if any_without_messages(self.engine.store, source="tui"):
            result = self._by_parts("ghost_prune", "delete", "ghost_prune",
                                    lambda graph, live: ghosts.select_tui_ghosts(graph, now, live),
                                    lambda units: self.engine.delete(units, "ghost_prune", recheck=ghosts.recheck(now)), only=WITHOUT_MESSAGES)
        else:  # no TUI session without messages: no ghost to select or keep (store/read.py)
            result = self.result("ghost_prune", "delete", "ghost_prune")
        missing = orphan_session_ids(self.engine.store)
        rows = ghosts.select_orphan_rows(missing)
        result.absorb(self.engine.delete(self.unclaimed(rows), "ghost_prune", orphans=True))
        # (c) files of sessions that are gone; those of `missing` went with their rows just now
        index = self.engine.files
        for part in index.names(CHUNK):
            existing = set(existing_ids(self.engine.store, sorted({sid for sid, _ in part}))) | set(missing)
            gone = [(sid, index.entry(name)) for sid, name in part if sid not in existing]  # lstat those only
            files = ghosts.select_orphan_files([(sid, e) for sid, e in gone if e is not None], existing, now)
            self.engine.remove_orphan_files(files.files, result)
            result.kept.update(files.kept)
        return result

    def empty_sweep(self) -> Result:
        if not (self.policy.empty_sweep or self.request.explicit):
            return self.skipped("empty_sweep", "empty_sweep is off in this profile's policy")
        hours, now = self.policy.empty_min_age_hours, self.request.now
        if not any_without_messages(self.engine.store):  # nothing empty: nothing to select or keep
            return self.result("empty_sweep", "delete", "empty_sweep")
        return self._by_parts("empty_sweep", "delete", "empty_sweep",
                              lambda graph, live: empty.select(graph, hours, now, live),
                              lambda units: self.engine.delete(units, "empty_sweep", recheck=empty.recheck(hours, now)), only=WITHOUT_MESSAGES)

    def purge(self) -> Result:
        request = self.request
        if not (self.policy.auto_prune or request.explicit):
            return self.skipped("purge", "auto_prune is off in this profile's policy")
        filters = request.filters
        # As in Hermes: a filter replaces the implicit retention window, unless --older-than is given.
        days = request.older_than if request.older_than is not None else (
            0.0 if filters.given() else self.policy.retention_days)
        # --older-than (or filters) names one window for every source; else the policy's, per source
        windows = self.policy.windows() if request.older_than is None and not filters.given() else days
        recheck = retention.recheck(windows, request.now)
        if filters.given():
            result = self._filtered_purge(days, recheck)
        else:
            result = self._by_parts("purge", "delete", "prune",
                                    lambda graph, live: retention.select(graph, windows, request.now, live),
                                    lambda units: self.engine.delete(units, "prune", recheck=recheck))
        # Unasked, only the switch to incremental reclaim, whose moment any purge may find (space.py).
        asked = bool(result.rows and (request.vacuum or self.policy.vacuum_after_prune))
        result.vacuumed = self.engine.vacuum_if_worth(result, asked)
        if result.rows and not result.vacuumed:  # a store in incremental auto-vacuum: space back at the end
            self.to_reclaim = self.to_reclaim or result
        return result

    def close_stale(self) -> Result:
        """Open rows of automated sources idle past their window, closed as Hermes closes them (silent)."""
        if not (self.policy.auto_prune or self.request.explicit):
            return self.skipped("close_stale", "auto_prune is off in this profile's policy (stale rows are "
                                "closed with it, as Hermes does)")
        windows, now = self.policy.windows(), self.request.now
        check = stale.recheck(windows, now)
        return self._by_parts("close_stale", "close", None,
                              lambda graph, live: stale.select(graph, windows, now, live),
                              lambda units: self.engine.close_stale(units, check, now))

    def size_budget(self) -> Result:
        """Over `max_store_mb` after the other tasks: the oldest eligible units go until their text
        covers the excess, or nothing eligible is left (then one note says by how much it is over)."""
        limit = self.policy.max_store_mb
        if limit is None:
            return self.skipped("size_budget", "no max_store_mb in this profile's policy")
        result = self.result("size_budget", "delete", "prune")
        now, keep = self.request.now, self.policy.min_keep_days
        if self._used_mb() <= limit:
            return result
        store = self.engine.store
        live = set(sql.live_ids(store.db, store.schema, now))
        candidates = []
        for graph in self._parts("size_budget", result):
            picked = budget.select(graph, limit, keep, now, live)
            result.kept.update(picked.kept)
            candidates += [(max(graph.rows[i].last_activity for i in u.ids), u.session_id, u) for u in picked.units
                           if not self.claimed.intersection(u.ids)]
        units = [u for _, _, u in sorted(candidates, key=lambda item: item[:2])]
        # Deleted rows leave traces in the FTS5 indexes until their merges, so the store's size right
        # after a delete says little: the units whose text covers the excess go (estimated, as
        # _covering says), and the next run looks again.
        over = self._used_mb() - limit
        chosen = self._covering(units, over)
        result.absorb(act_in_parts(self.engine, self.result("size_budget", "delete", "prune"), [chosen],
                                   lambda part: self.engine.delete(part, "prune", recheck=budget.recheck(keep, now))))
        if len(chosen) == len(units) and self._used_mb() > limit and not self.engine.dry_run:
            result.notes.append(f"still over max_store_mb {limit:g} by {self._used_mb() - limit:.1f} MB: nothing "
                                f"eligible is left (open, pinned, live or active within {keep:g} days)")
        elif self.engine.dry_run:
            result.notes.append(f"over max_store_mb {limit:g} by {over:.1f} MB: the oldest eligible units whose "
                                "text covers it")
        if result.rows:
            self.to_reclaim = self.to_reclaim or result
        return result

    def _covering(self, units: list, over_mb: float) -> list:
        """The first units whose messages' text, three times over (the row and its two FTS5 indexes,
        as real stores measure: 6.6x in #110589 with everything else), adds up to `over_mb`. Their
        text is summed a chunk of units at a time, in one query each, as far as needed."""
        db, taken, total = self.engine.store.db, [], 0.0
        for start in range(0, len(units), BUDGET_CHUNK):
            part = units[start:start + BUDGET_CHUNK]
            sizes = message_bytes(db, [i for unit in part for i in unit.ids])
            for unit in part:
                if total >= over_mb:
                    return taken
                total += 3 * sum(sizes.get(i) or 0 for i in unit.ids) / 1e6
                taken.append(unit)
        return taken

    def _used_mb(self) -> float:
        """The store's pages in use (free pages are space the next writes reuse), in MB."""
        db = self.engine.store.db
        pages, free, size = (db.execute_sql(f"PRAGMA {p}").fetchone()[0] for p in
                             ("page_count", "freelist_count", "page_size"))
        return (pages - free) * size / 1e6

    def auto_archive(self) -> Result:
        request = self.request
        if not (self.policy.auto_archive or request.explicit):
            return self.skipped("auto_archive", "auto_archive is off in this profile's policy")
        days = request.archive_days if request.archive_days is not None else self.policy.auto_archive_days
        return self._by_parts("auto_archive", "archive", None,  # silent
                              lambda graph, live: archive.select(graph, days, request.now, live),
                              lambda units: self.engine.set_archived(units, True, reason=None, swept=True))

    # -- a part of the store at a time ----------------------------------------

    def _by_parts(self, task: str, action: str, reason: str | None, select, act, only: str | None = None) -> Result:
        """`select` (a pure rule) and `act` (the engine) on each part of the store in turn.

        The parts together are the whole store, and a unit never spans two of them, so
        the selection is the one a single graph of every row would give (the tests
        compare both); only one part is in memory at a time. `only`: the condition every
        unlinked session the rule can pick or keep meets (parts.graph_parts).
        """
        store = self.engine.store
        live = set(sql.live_ids(store.db, store.schema, self.request.now))
        result = self.result(task, action, reason)

        def units() -> Iterator[list]:
            for graph in self._parts(task, result, only):
                selection = select(graph, live)
                result.kept.update(selection.kept)
                yield self.unclaimed(selection)

        def acted(chosen: list) -> Result:
            done = act(chosen)
            if not self.engine.dry_run:  # gone (or archived, by the last task): no later task can take them
                self.claimed.difference_update(i for unit in done.done for i in unit.ids)
            return done

        return act_in_parts(self.engine, result, units(), acted)

    def _parts(self, task: str, result: Result, only: str | None = None) -> Iterator[Graph]:
        """The store a part at a time (parts.py), with a progress bar; a stop request ends it."""
        store = self.engine.store
        where = f"WHERE {only}" if only else ""
        total = store.db.execute_sql(f"SELECT COUNT(*) FROM sessions s {where}").fetchone()[0] \
            if self.engine.progress.wanted() else 0  # a count only for a bar someone sees
        with self.engine.progress.whole(f"{self.engine.profile.name}: {task}", total) as looked_at:
            for n, graph in enumerate(graph_parts(store, only)):
                if n and stopping.requested():
                    if not any(note.startswith("stopped on request") for note in result.notes):
                        result.notes.append("stopped on request: the rest of the store waits for the next run")
                    return
                yield graph
                looked_at(len(graph.rows))

    def _filtered_purge(self, days: float, recheck) -> Result:
        """Retention, then the filters. Two passes over the store's parts: the first only counts,
        for the guard against filters that match every ended session, before anything goes."""
        request, filters = self.request, self.request.filters
        store = self.engine.store
        if request.older_than is None and not filters.has_age_bound and not request.force:
            live = set(sql.live_ids(store.db, store.schema, request.now))
            candidates = picked = 0
            for graph in graph_parts(store):
                units = retention.select(graph, days, request.now, live).units
                candidates += len(units)
                picked += sum(1 for u in units if filters.matches(graph.rows[u.session_id]))
            refusal = too_broad(self.engine.profile, picked, candidates)
            if refusal:
                raise Refused(refusal)

        def select(graph: Graph, live: set[str]):
            selection = retention.select(graph, days, request.now, live)
            selection.units = [u for u in selection.units if filters.matches(graph.rows[u.session_id])]
            return selection

        return self._by_parts("purge", "delete", "prune", select,
                              lambda units: self.engine.delete(units, "prune", recheck=recheck))


def repair_step(run: Run, profile: Profile, policy: Policy, request: Request,
                siblings: dict[str, Profile], store=None) -> None:
    """`run`'s first step: profile repair, report-only unless the policy says `repair: apply`.

    It runs before the profile's engine opens: applying takes that profile's locks itself.
    `siblings`: the profiles of the same root and owner (where a wrong-store row may move).
    """
    from hermes_admin.profile import integrity, repair as profile_repair

    apply = policy.repair == "apply" and not request.dry_run
    result = Result(profile.name, "repair", "profile_repair", not apply, task="repair")
    started = time.monotonic()
    try:
        checked = integrity.identity(profile)  # before the check: a store replaced meanwhile is not this one
        check = integrity.due(profile, policy.quick_check_hours, request.now, checked)
        findings = profile_repair.inspect(profile, siblings, store=store, quick_check=check)
        if check and not request.dry_run and not any(f.kind == "unusable_store" for f in findings):
            integrity.passed(profile, request.now, checked)
        fixable = [f for f in findings if f.fix != "none"]
        if apply and fixable:
            result = profile_repair.apply(profile, fixable, siblings)
            result.action = "repair"
    except (LockHeld, StoreError, *SQLITE_ERRORS) as exc:
        run.warnings.append(f"profile '{profile.shown}': repair: {' '.join(str(exc).split())}")
        return
    for finding in findings:
        state = "fixed" if finding.applied else (f"not fixed: {finding.error}" if finding.error else
                                                 "report only" if finding.fix == "none" else f"run `repair --apply` to {finding.fix}")
        result.notes.append(f"{finding.kind} {finding.subject}: {finding.detail} ({state})")
    result.seconds = time.monotonic() - started
    result.home = str(profile.home)
    run.results.append(result)


def overridden(policy: Policy, origins: dict, request: Request) -> tuple[Policy, dict]:
    """The policy as this command applies it: an explicit command runs its task whatever the policy
    enables, and --older-than/--days replace the windows; what a dry run prints says so."""
    from dataclasses import replace

    origins, changes = dict(origins), {}
    if request.explicit and "purge" in request.tasks:
        changes["auto_prune"], origins["auto_prune"] = True, "the purge command"
    if request.explicit and "auto_archive" in request.tasks:
        changes["auto_archive"], origins["auto_archive"] = True, "the archive-inactive command"
    if request.older_than is not None:
        changes["retention_days"], origins["retention_days"] = request.older_than, "--older-than"
    if request.archive_days is not None:
        changes["auto_archive_days"], origins["auto_archive_days"] = request.archive_days, "--days"
    return replace(policy, **changes), origins


def _policy(run: Run, profile: Profile, layers: dict, request: Request) -> tuple[HermesConfig, Policy] | None:
    """The profile's Hermes config and policy, and into the report the policy as this command applies
    it, with where each value came from; None when either cannot be read (said in `run.errors`)."""
    try:
        lookup = installation.for_profile(profile)  # plugins enabled or not: its defaults and keys
        config = load_hermes_config(profile.home, installation.sessions_keys(lookup))  # once: the engine uses it too
        policy, origins = with_origins(profile.shown, layers, config, force=request.force,
                                       installed=installation.defaults_layer(lookup))
    except (HermesConfigError, PolicyError) as exc:
        run.errors.append(f"profile '{profile.shown}': skipped: {exc}")
        return None
    applied, origins = overridden(policy, origins, request)
    shown = dict(applied.as_dict(), origins=origins)
    shown["hook_callback_timeout"], origins["hook_callback_timeout"] = installation.hook_timeout(config, lookup)
    run.policies[str(profile.home)] = {"profile": profile.name, **shown, "hermes": lookup.as_dict()}
    return config, policy


def maintain(run: Run, profile: Profile, layers: dict, request: Request,
             siblings: dict[str, Profile] | None = None, lock_wait: float | None = None) -> None:
    """Run the requested tasks on one profile; its failures are recorded, never raised.

    `layers`: the admin config's part of its policy, as the host read it (host.config.policy_layers).
    `lock_wait`: --lock-wait, over the policy's.
    """
    if not profile.has_store():  # a profile Hermes never used yet: nothing to do, not an error
        result = Result(profile.name, "none", None, request.dry_run, status="skipped",
                        why="no store yet: nothing to do", home=str(profile.home))
        run.results.append(result)
        return
    found = _policy(run, profile, layers, request)
    if found is None:
        return
    config, policy = found
    siblings = siblings if siblings is not None else {profile.name: profile}
    applying = policy.repair == "apply" and not request.dry_run
    if "repair" in request.tasks and applying:  # fixes take the profile's locks themselves: before the engine
        repair_step(run, profile, policy, request, siblings)

    results: list[Result] = []  # filled as tasks finish: reported with a failure too (common.with_engine)

    def work(engine: Engine) -> list[Result]:
        if "repair" in request.tasks and not applying:  # a report reads through the engine's own connection
            repair_step(run, profile, policy, request, siblings, store=engine.store)
        one_pass = _Pass(engine, policy, request)
        for task in ORDER:
            if task == "repair" or task not in request.tasks:
                continue
            if stopping.requested():  # named in the report: a stop that came as this profile began never hides it
                results.append(one_pass.skipped(task, "stopped on request before it began"))
                continue
            started = time.monotonic()
            try:
                result = getattr(one_pass, task)()
            except Refused as exc:
                run.errors.append(str(exc))
                continue
            result.seconds = time.monotonic() - started
            results.append(result)
        one_pass.reclaim()
        return results

    exports = Settings(request.export_dir or policy.export_dir, policy.export_keep_days)
    lock_wait = lock_wait if lock_wait is not None else policy.lock_wait
    with_engine(run, profile, work, exports, config, lock_wait, incremental=policy.incremental_vacuum,
                finished=results)

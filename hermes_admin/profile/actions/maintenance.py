"""The maintenance tasks of one profile, in the order `run` uses (docs/design.md §3).

Each task is one record (`Task`, the tuple `TASKS`): its name, reason, switch and command
(model.TASKS), its rule (select, and re-check inside the transaction: its module's `rule` in
`tasks/`) and what the engine does with what it selects. `_Pass.run`
runs any of them the same way. The command's overrides are applied to the policy once
(`applied`): that policy drives every task and is the one the report shows. Within one
run no row is selected by two tasks, so a dry run lists each row once, under the task
that would take it; and a dry run's later tasks see what the earlier ones would have
done (rows closed as stale are closed for them), so it predicts the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from hermes_admin import model, stopping
from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile, Reason
from hermes_admin.profile.store import page_accounting
from hermes_admin.profile.actions.common import (Ledger, Refused, Run, act_in_parts, engine_notes, refuse_too_broad,
                                                 with_engine)
from hermes_admin.profile.engine import REST_WAITS, STOPPED, Engine, Interrupted, fold
from hermes_admin.profile.exports import Settings
from hermes_admin.profile import installation
from hermes_admin.profile.hermes_config import HermesConfig, HermesConfigError
from hermes_admin.profile.hermes_config import load as load_hermes_config
from hermes_admin.protocol import Request  # Request: the one shape of a maintenance pass
from hermes_admin.results import Action, Result, Status
from hermes_admin.profile.state_folder import LockHeld
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.installation import Installations
from hermes_admin.profile.store import StoreError
from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.policy import Policy, PolicyError, with_origins
from hermes_admin.profile.parts import graph_parts
from hermes_admin.profile.store.read import (any_without_messages, count_sessions, existing_ids, message_bytes,
                                             orphan_session_ids)
from hermes_admin.profile.tasks import Rule, Selection, archive, budget, empty, ghosts, retention, stale

from hermes_admin.problems import ERROR, LOCKED, WARNING, about
from hermes_admin.profile.store.damage import DAMAGED_STORE, damage_error, is_damage
from hermes_admin.profile.store.errors import SQLITE_ERRORS
CHUNK = 2000  # files of sessions/ looked at together by the ghost sweep
BUDGET_CHUNK = 200  # units whose text the size budget sums in one query (their ids bound a statement's)


@dataclass(frozen=True)
class Task:
    """One maintenance task: its name and reason, when the policy has it on, its rule, how it is acted on."""

    name: model.TaskName
    rule: Callable[[Policy, float], Rule]
    act: Action  # what the engine does with a selected unit: DELETE, CLOSE or ARCHIVE
    # How it goes over the store: its engine calls folded into the task's result; returns what it
    # says beyond them (its notes), which the pass adds once the work is done.
    work: Callable[["_Pass", "Task", Result], tuple[str, ...]]
    off_why: str | None = None  # what the report says when the policy has it off (else the switch's name)

    def off(self, policy: Policy) -> str | None:
        """Why the policy leaves this task off, in the report's words; None: it runs."""
        value = policy.switch(self.name.switch)
        if value is not None and value is not False:
            return None
        return self.off_why or f"{self.name.switch} is off in this profile's policy"


@dataclass
class Reach:
    """How far a task went over the store before a stop: the units it selected (in the parts it looked
    at), the session rows it looked at, and the rows there were (that COUNT(*) as it began)."""

    selected: int = 0
    looked: int = 0
    total: int = 0

    def unseen(self) -> int:
        return max(0, self.total - self.looked)


def stopped_note(left: int, selected: int, unseen: int) -> str:
    """What a stop says of a task that goes over the store in parts. It cannot give the count of
    what is left: the parts not yet looked at were never selected from (counting them would be a
    dry run's work, after a stop asked for an end), and the next run selects again over every task.
    So it says what it knows, which the next `--dry-run` never contradicts."""
    rest = f"; {unseen} session(s) of the store not yet looked at" if unseen else ""
    return (f"{STOPPED}: {left} of the {selected} unit(s) selected so far not reached{rest} "
            "(the next run selects again; `--dry-run` counts what is left)")


class _Pass:
    """One profile's run: the engine, the policy as applied, and the rows already taken by an earlier task.
    `ledger`: each task's result, entered as the task begins (reported with a failure too)."""

    def __init__(self, engine: Engine, policy: Policy, request: Request, ledger: Ledger):
        self.engine, self.policy, self.request, self.ledger = engine, policy, request, ledger
        # Ids a task selected that are still in the store: all of them in a dry run, else the
        # ones it skipped (what it did act on is gone, and kept out of this set: memory).
        self.claimed: set[str] = set()
        # The first result of a delete that freed pages: incremental vacuum gives them back once every
        # task is done (`reclaim`), so that its last commits are the run's last and cut the WAL back.
        self.to_reclaim: Result | None = None
        # The size budget weighs the store as the plan leaves it, the same in a dry run and a run: its
        # pages in use as the pass begins, less the text (budget.weight_mb) of what the earlier
        # tasks delete, counted as they delete it (`_deleting`). A store measured after a delete would
        # say little (FTS5 traces stay until their merges) and a dry run has deleted nothing.
        self.weighs = policy.max_store_mb is not None and model.SIZE_BUDGET.name in request.tasks
        self.used_mb = engine.read(page_accounting.pages).used_bytes / 1e6 if self.weighs else 0.0
        self.deleted_mb = 0.0

    def run(self, task: Task) -> Result:
        """Any task, the one way: skipped if the policy has it off, else its work into its result, timed."""
        why = task.off(self.policy)
        if why:
            return self.skipped(task, why)
        started = time.monotonic()
        with self.ledger.begun(self.result(task)) as result:
            said = task.work(self, task, result)
        result.notes += said
        result.seconds = time.monotonic() - started
        return result

    def reclaim(self) -> None:
        """Free pages back to the file system, on a store in incremental auto-vacuum (engine/space.py)."""
        if self.to_reclaim is not None:
            started = time.monotonic()
            fold(self.to_reclaim, self.engine.reclaim)
            self.to_reclaim.seconds = (self.to_reclaim.seconds or 0) + time.monotonic() - started

    def result(self, task: Task) -> Result:
        return Result(self.engine.profile.name, task.act, task.name.reason, self.engine.dry_run, task=task.name.name)

    def skipped(self, task: Task, why: str) -> Result:
        result = Result(self.engine.profile.name, Action.NONE, None, self.engine.dry_run, task=task.name.name)
        result.status, result.why = Status.SKIPPED, why
        return self.ledger.add(result)

    def unclaimed(self, selection: Selection) -> list:
        units = [u for u in selection.units if not self.claimed.intersection(u.ids)]
        for unit in units:
            self.claimed.update(unit.ids)
        return units

    def act(self, task: Task, rule: Rule, units: list) -> Result:
        """What the engine does with a task's units; returns what it did (a dry run: would do)."""
        if task.act == Action.CLOSE:
            return self.engine.close_stale(units, rule.recheck, self.request.now)
        if task.act == Action.ARCHIVE:  # the inactivity sweep's: silent, live units stay
            return self.engine.set_archived(units, True, reason=None, swept=True)
        if task.name == model.SIZE_BUDGET:  # the last delete of the pass: nothing weighs it after
            return self.engine.delete(units, task.name.reason, recheck=rule.recheck)
        return self._deleting(units, lambda: self.engine.delete(units, task.name.reason, recheck=rule.recheck))

    def _deleting(self, units: list, delete: Callable[[], Result]) -> Result:
        """`delete()` of `units`, returning what it did; where the size budget runs later in the pass,
        the text of the units it deleted (a dry run: would delete) is counted, as the plan's weight."""
        if not self.weighs or not units:
            return delete()
        sizes = self.engine.read(lambda db: message_bytes(db, [i for unit in units for i in unit.ids]))
        did = None
        try:
            did = delete()
            return did
        except Interrupted as exc:  # what committed before an error counts too
            did = exc.partial
            raise
        finally:
            gone = did.done if did is not None else ()
            self.deleted_mb += budget.weight_mb(sum(sizes.get(i) or 0 for done in gone for i in done.ids))

    def planned_mb(self) -> float:
        """The store's content as this pass's plan leaves it, in MB (see `weighs`)."""
        return self.used_mb - self.deleted_mb

    # -- how a task goes over the store ---------------------------------------

    def in_parts(self, task: Task, result: Result, select=None) -> tuple[str, ...]:
        """The task's rule (or `select`, a narrower one) and its acting on each part of the store in turn,
        into `result`.

        The parts together are the whole store, and a unit never spans two of them, so
        the selection is the one a single graph of every row would give (the tests
        compare both); at most two parts are in memory at a time (the next is read ahead: act_in_parts).
        """
        rule = task.rule(self.policy, self.request.now)
        select = select or rule.select
        store = self.engine.store
        live = set(self.engine.live_ids(self.request.now))
        reach = Reach(total=count_sessions(store, rule.only))  # one COUNT(*): what a stop says is not looked at

        def units(looked_at: Callable[[int], None]) -> Iterator[list]:
            for graph in self._graphs(task, result, rule.only, looked_at):
                reach.looked += len(graph.rows)
                selection = select(graph, live)
                result.kept.update(self.still_kept(selection))
                chosen = self.unclaimed(selection)
                reach.selected += len(chosen)
                yield chosen

        def acted(chosen: list) -> Result:
            done = self.act(task, rule, chosen)
            ids = [i for unit in done.done for i in unit.ids]
            if task.act == Action.CLOSE:  # closed, the rows stay: a later task (the archive) may still take them
                self.claimed.difference_update(ids)
            elif not self.engine.dry_run:  # gone (or archived, by the last task): no later task can take them
                self.claimed.difference_update(ids)
            return done

        with self._bar(task.name.name, rule.only, reach.total) as looked_at:  # over the parts and their acting
            act_in_parts(self.engine, result, units(looked_at), acted)
        if result.stop is not None:  # the engine's speaks of the part in hand only: one for the whole task
            result.stop = stopped_note(reach.selected - len(result.done) - len(result.skipped), reach.selected,
                                       reach.unseen())
        return ()

    def still_kept(self, selection: Selection) -> dict:
        """What a task keeps, less the rows an earlier task of this run took: in a dry run they are
        still there, in a run they are gone, and both must count the same."""
        return {sid: why for sid, why in selection.kept.items() if sid not in self.claimed}

    def _graphs(self, task: Task, result: Result, only: str | None = None,
                looked_at: Callable[[int], None] | None = None) -> Iterator[Graph]:
        """The store's parts as this point of the run sees them: in a dry run, the rows an earlier task
        would have closed are closed, as the run would have left them. `looked_at`: the caller's bar."""
        for graph in self._parts(task.name.name, result, only, looked_at):
            self.engine.as_left(graph.rows)  # the one record of a dry run's closes: the engine's
            yield graph

    def _parts(self, task: str, result: Result, only: str | None = None,
               looked_at: Callable[[int], None] | None = None) -> Iterator[Graph]:
        """The store a part at a time (parts.py), advancing `looked_at` (else a bar of its own); a stop
        request ends it."""
        if looked_at is None:
            with self._bar(task, only) as looked_at:
                yield from self._parts(task, result, only, looked_at)
            return
        for n, graph in enumerate(graph_parts(self.engine.store, only)):
            if n and stopping.requested():
                result.stop = result.stop or REST_WAITS
                return
            yield graph
            looked_at(len(graph.rows))

    def _bar(self, task: str, only: str | None, total: int | None = None):
        """One progress bar over a task's parts (`total`: the sessions, counted here if not given and
        someone sees the bar)."""
        if total is None:
            total = count_sessions(self.engine.store, only) if self.engine.progress.wanted() else 0
        return self.engine.progress.whole(f"{self.engine.profile.name}: {task}", total)

    # -- the tasks whose work is more than their rule over the parts ------------

    def ghost_prune(self, task: Task, result: Result) -> tuple[str, ...]:
        """TUI ghosts by the rule; then rows and files whose session is gone."""
        if any_without_messages(self.engine.store, source="tui"):
            self.in_parts(task, result)
        # (else no TUI session without messages: no ghost to select or keep; store/read.py)
        missing = orphan_session_ids(self.engine.store)
        rows = self.unclaimed(ghosts.select_orphan_rows(missing))
        fold(result, lambda: self._deleting(rows, lambda: self.engine.delete(rows, task.name.reason, orphans=True)))
        # (c) files of sessions that are gone; those of `missing` went with their rows just now
        index, now, went = self.engine.files, self.request.now, set(missing)
        for part in index.names(CHUNK):
            existing = set(existing_ids(self.engine.store, sorted({sid for sid, _ in part}))) | went
            gone = [(sid, index.entry(name)) for sid, name in part if sid not in existing]  # lstat those only
            files = ghosts.select_orphan_files([(sid, e) for sid, e in gone if e is not None], existing, now)
            fold(result, lambda: self.engine.remove_orphan_files(files.files))
            result.kept.update(files.kept)
        return ()

    def empty_sweep(self, task: Task, result: Result) -> tuple[str, ...]:
        if not any_without_messages(self.engine.store):  # nothing empty: nothing to select or keep
            return ()
        return self.in_parts(task, result)

    def purge(self, task: Task, result: Result) -> tuple[str, ...]:
        """Retention by the policy's windows (the command's overrides are in them: `applied`), narrowed by
        the command's filters; then VACUUM, or the freed pages back at the end."""
        request = self.request
        if request.filters.given():
            self._filtered_purge(task, result)
        else:
            self.in_parts(task, result)
        # Unasked, only the switch to incremental reclaim, whose moment any purge may find (space.py).
        # `--vacuum` asks whatever this purge deleted (the free pages may be Hermes' own deletes');
        # the policy's vacuum_after_prune only after a purge that deleted something.
        asked = bool(request.vacuum or (result.rows and self.policy.vacuum_after_prune))
        fold(result, lambda: self.engine.vacuum_if_worth(asked))  # `vacuumed` too, when it ran
        if not result.vacuumed:  # a store in incremental auto-vacuum: space back at the end, whoever
            self.to_reclaim = self.to_reclaim or result  # freed it (Hermes' own deletes too)
        return ()

    def _filtered_purge(self, task: Task, result: Result) -> tuple[str, ...]:
        """Retention, then the filters. Two passes over the store's parts: the first only counts,
        for the guard against filters that match every ended session, before anything goes."""
        request, filters = self.request, self.request.filters
        rule = task.rule(self.policy, request.now)
        if request.older_than is None and not filters.has_age_bound and not request.force:
            live = set(self.engine.live_ids(request.now))

            def count(graph: Graph) -> tuple[int, int]:
                units = rule.select(graph, live).units
                return sum(1 for u in units if filters.matches(graph.rows[u.session_id])), len(units)

            refuse_too_broad(self.engine, count)

        def select(graph: Graph, live: set[str]) -> Selection:
            selection = rule.select(graph, live)
            selection.units = [u for u in selection.units if filters.matches(graph.rows[u.session_id])]
            return selection

        return self.in_parts(task, result, select)

    def size_budget(self, task: Task, result: Result) -> tuple[str, ...]:
        """Over `max_store_mb` after the other tasks: the oldest eligible units go until their text
        covers the excess, or nothing eligible is left (then one note says by how much it is over)."""
        limit, keep = self.policy.max_store_mb, self.policy.min_keep_days
        if self.planned_mb() <= limit:
            return ()
        rule, now = task.rule(self.policy, self.request.now), self.request.now
        live = set(self.engine.live_ids(now))
        candidates = []
        for graph in self._graphs(task, result):
            picked = rule.select(graph, live)
            result.kept.update(self.still_kept(picked))
            candidates += [(budget.age(graph, u), u) for u in picked.units if not self.claimed.intersection(u.ids)]
        units = [u for _, u in sorted(candidates, key=lambda item: item[0])]
        planned = self.planned_mb()
        over = planned - limit
        chosen = budget.covering(self._weighed(units), planned, limit)  # the decision: tasks/budget.py
        for unit in chosen:  # taken: no later task (the archive sweep) counts them, in a dry run either
            self.claimed.update(unit.ids)
        act_in_parts(self.engine, result, [chosen], lambda units: self.act(task, rule, units))
        if not self.engine.dry_run:  # gone: kept out of the set (memory), as in_parts does
            self.claimed.difference_update(i for done in result.done for i in done.ids)
        if result.rows:
            self.to_reclaim = self.to_reclaim or result
        if len(chosen) == len(units) and self._used_mb() > limit and not self.engine.dry_run:
            return (f"still over max_store_mb {limit:g} by {_megabytes(self._used_mb() - limit)}: nothing "
                    f"eligible is left (open, pinned, live or active within {keep:g} days)",)
        if self.engine.dry_run:
            return (f"over max_store_mb {limit:g} by {_megabytes(over)}: the oldest eligible units whose "
                    "text covers it",)
        return ()

    def _weighed(self, units: list) -> Iterator[tuple]:
        """Each unit with the bytes of its messages' text, summed a chunk of units at a time, in one
        query each, as far as the size budget's decision reads them (budget.covering)."""
        for start in range(0, len(units), BUDGET_CHUNK):
            part = units[start:start + BUDGET_CHUNK]
            sizes = self.engine.read(lambda db: message_bytes(db, [i for unit in part for i in unit.ids]))
            for unit in part:
                yield unit, sum(sizes.get(i) or 0 for i in unit.ids)

    def _used_mb(self) -> float:
        """The store's content: its pages in use (free pages are space the next writes reuse), in MB.
        What `max_store_mb` counts (README), not the file's size."""
        return self.engine.read(page_accounting.pages).used_bytes / 1e6


def _megabytes(mb: float) -> str:
    """`1.4 MB`; under 0.1 MB in kB (`by 42 kB`, never `by 0.0 MB`): the unit max_store_mb counts in (1e6)."""
    return f"{mb:.1f} MB" if mb >= 0.1 else f"{max(mb * 1000, 1):.0f} kB"


# Every task the engine acts for, in `run`'s order (model.TASKS; repair, first, is `repair_step`): its
# name record, its rule (its module in tasks/), what the engine does with what it picks, and how it goes
# over the store (`_Pass.in_parts` unless it does more).
TASKS = (
    Task(model.GHOST_PRUNE, ghosts.rule, Action.DELETE, _Pass.ghost_prune),
    Task(model.EMPTY_SWEEP, empty.rule, Action.DELETE, _Pass.empty_sweep),
    Task(model.PURGE, retention.rule, Action.DELETE, _Pass.purge, "auto_prune is off in this profile's policy"),
    Task(model.CLOSE_STALE, stale.rule, Action.CLOSE, _Pass.in_parts,
         "auto_prune is off in this profile's policy; stale rows are closed with it, as Hermes does"),
    Task(model.SIZE_BUDGET, budget.rule, Action.DELETE, _Pass.size_budget, "no max_store_mb in this profile's policy"),
    Task(model.AUTO_ARCHIVE, archive.rule, Action.ARCHIVE, _Pass.in_parts),
)


def not_announcing(policy: Policy, lookup: installation.Lookup) -> str | None:
    """Why the deletions made outside hermes-admin are not announced in this profile, by its policy
    and its Hermes (None: they are, where a plugin listens; engine/noticed.py)."""
    if not policy.announce_hermes_deletes:
        return "announce_hermes_deletes is off in this profile's policy"
    found = lookup.installation
    if found is not None and found.delete_hook:
        return f"{found.label} fires on_session_delete itself"
    return None


def repair_step(run: Run, profile: Profile, policy: Policy, request: Request, env: Environment,
                siblings: dict[str, Profile], store=None) -> bool:
    """`run`'s first step: profile repair, report-only unless the policy says `repair: apply`.
    True when the store is damaged and stays so: the profile's error, and its other tasks do not run.

    It runs before the profile's engine opens: applying takes that profile's locks itself.
    `siblings`: the profiles of the same root and owner (where a wrong-store row may move).
    """
    from hermes_admin.profile import integrity, repair as profile_repair

    apply = policy.repair == "apply" and not request.dry_run
    result = Result(profile.name, Action.REPAIR, Reason.PROFILE_REPAIR, not apply, task="repair")
    started = time.monotonic()
    try:
        checked = integrity.identity(profile)  # before the check: a store replaced meanwhile is not this one
        check = integrity.due(profile, policy.quick_check_hours, request.now, checked)
        findings = profile_repair.inspect(profile, siblings, store=store, quick_check=check, lock_wait_s=env.lock_wait,
                                          exports=Settings(request.export_dir or policy.export_dir,
                                                           policy.export_keep_days))
        damaged = [f for f in findings if f.kind in ("unusable_store", DAMAGED_STORE)]
        if check and not request.dry_run and not damaged:
            integrity.passed(profile, request.now, checked)
        elif damaged and not request.dry_run:  # every view says it until the file is another one or passes
            integrity.damaged(profile, request.now, checked, damaged[0].detail)
        fixable = [f for f in findings if f.fix != "none"]
        if apply and fixable:
            result, set_aside = profile_repair.apply(profile, fixable, siblings, env, lossy=False)
            result.action = Action.REPAIR
            run.add(*engine_notes(profile, set_aside))
    except (LockHeld, StoreError, *SQLITE_ERRORS) as exc:
        if isinstance(exc, StoreError) and exc.kind == DAMAGED_STORE:
            run.add(exc.as_problem(profile.home))
            return True
        if isinstance(exc, SQLITE_ERRORS) and is_damage(exc):
            run.add(damage_error(profile, " ".join(str(exc).split())).as_problem(profile.home))
            return True
        # a held lock is a held lock (exit 3) whichever task meets it; anything else spares the other tasks
        severity = LOCKED if isinstance(exc, LockHeld) else WARNING
        run.add(about(profile, severity, "repair", f"repair: {' '.join(str(exc).split())}"))
        return False
    unfixed = [f for f in damaged if not f.applied]
    for finding in unfixed:  # the profile's error: no task works on a store SQLite cannot wholly read
        run.add(about(profile, ERROR, DAMAGED_STORE, f"{finding.detail}; no maintenance until it is repaired",
                      path=finding.subject))
    for finding in findings:
        finding.home = str(profile.home)
    run.findings += findings  # counted by kind in the report (cli/mutate.py), each listed under -v
    result.notes += [f"{finding.kind} {finding.subject}: {finding.detail} ({_repair_state(finding)})"
                     for finding in findings]
    result.seconds = time.monotonic() - started
    result.home = str(profile.home)
    run.results.append(result)
    return bool(unfixed)


def _repair_state(finding) -> str:
    """What became of a finding, as its note says it."""
    if finding.applied:
        return "fixed"
    if finding.error:
        return f"not fixed: {finding.error}"
    return "report only" if finding.fix == "none" else f"run `repair --apply` to {finding.fix}"


def applied(policy: Policy, origins: dict, request: Request) -> tuple[Policy, dict]:
    """The policy as this command applies it, with where each value came from: the one policy that
    drives every task of the pass and the one the report (a dry run's included) shows.

    A single-task command turns its task on whatever the policy says. `--older-than` is the window
    for every session: it replaces `retention_days` and every per-source window (the operator who
    types it means that age, for every source). Filters without `--older-than` have no age bound at
    all, as in Hermes. `--days` replaces `auto_archive_days`.
    """
    origins, changes = dict(origins), {}

    def change(key: str, value, origin: str) -> None:
        changes[key], origins[key] = value, origin

    if request.explicit:
        for task in model.TASKS:
            if task.name in request.tasks and task.command and task.switch \
                    and isinstance(policy.switch(task.switch), bool):
                change(task.switch, True, f"the {task.command} command")
    if model.PURGE.name in request.tasks:
        if request.older_than is not None:
            change("retention_days", request.older_than, "--older-than")
            change("source_retention_days", {}, "--older-than (over every source's window)")
        elif request.filters.given():
            change("retention_days", 0.0, "filters without --older-than (no age bound, as in Hermes)")
            change("source_retention_days", {}, "filters without --older-than (no age bound, as in Hermes)")
    if request.archive_days is not None and model.AUTO_ARCHIVE.name in request.tasks:
        change("auto_archive_days", request.archive_days, "--days")
    return replace(policy, **changes, origins=origins), origins


def _policy(run: Run, profile: Profile, layers: PolicyLayers, request: Request,
            installations: Installations) -> tuple[HermesConfig, Policy] | None:
    """The profile's Hermes config and its policy as this command applies it (`applied`), which also
    goes into the report with where each value came from; None when either cannot be read (said in
    `run`)."""
    try:
        lookup = installations.for_profile(profile)  # plugins enabled or not: its defaults and keys
        # once: the engine uses it too
        config = load_hermes_config(profile.home, installation.sessions_keys(lookup), installations.managed_for(profile))
        policy, origins = with_origins(profile.shown, layers, config,
                                       installed=installation.defaults_layer(lookup))
    except HermesConfigError as exc:
        run.add(about(profile, ERROR, "policy", str(exc), skipped=True))
        return None
    except PolicyError as exc:  # each problem with its file, key and line, as `config check` says them
        run.add(*(_policy_problems(profile, layers, config) or [about(profile, ERROR, "policy", str(exc), skipped=True)]))
        return None
    policy, origins = applied(policy, origins, request)
    shown = dict(policy.as_dict(), origins=origins)
    shown["hook_callback_timeout"], origins["hook_callback_timeout"] = installation.hook_timeout(config, lookup)
    run.policies[str(profile.home)] = {"profile": profile.name, **shown, "hermes": lookup.as_dict()}
    return config, policy


def _policy_problems(profile: Profile, layers: PolicyLayers, config: HermesConfig) -> list:
    """The problems a policy that cannot be used has, each a value with its file, key and line."""
    from hermes_admin import yamlfile
    from hermes_admin.profile.policy import problems as policy_problems

    texts: dict[str, str | None] = {}

    def line_of(file: str, dotted: str | None) -> int | None:
        if file not in texts:
            try:
                texts[file] = yamlfile.text(Path(file))
            except (OSError, ValueError):
                texts[file] = None
        return yamlfile.line_of(texts[file], dotted) if texts[file] and dotted else None

    found = []
    for origin, key, message in policy_problems(layers, config):
        said = message.removeprefix(f"{origin.file}: ")  # the path is a field, said once by Problem.text
        found.append(about(profile, ERROR, "policy", said, path=origin.file, key=origin.path_of(key),
                           line=line_of(origin.file, origin.path_of(key)), skipped=True))
    return found


def maintain(run: Run, profile: Profile, layers: PolicyLayers, request: Request, env: Environment,
             siblings: dict[str, Profile] | None = None) -> None:
    """Run the requested tasks on one profile; its failures are recorded, never raised.

    `layers`: the admin config's part of its policy, as the host read it (host.config.policy_layers).
    `env`: the job's (its --lock-wait over the policy's).
    """
    if not profile.has_store():  # a profile Hermes never used yet: nothing to do, not an error
        result = Result(profile.name, Action.NONE, None, request.dry_run, status=Status.SKIPPED,
                        why="no store yet: nothing to do", home=str(profile.home))
        run.results.append(result)
        return
    found = _policy(run, profile, layers, request, env.installations)
    if found is None:
        return
    config, policy = found
    lookup = env.installations.for_profile(profile)  # (found already for its policy: asked once per job)
    siblings = siblings if siblings is not None else {profile.name: profile}
    env = replace(env, lock_wait=env.lock_wait if env.lock_wait is not None else policy.lock_wait)
    repairing = model.REPAIR.name in request.tasks
    applying = policy.repair == "apply" and not request.dry_run
    if repairing and applying:  # fixes take the profile's locks themselves: before the engine
        if repair_step(run, profile, policy, request, env, siblings):
            return

    ledger = Ledger()  # each task's result as it begins: reported with a failure too (common.with_engine)

    def work(engine: Engine) -> list[Result]:
        if repairing and not applying:  # a report reads through the engine's own connection
            if repair_step(run, profile, policy, request, env, siblings, store=engine.store):
                return ledger.results
        one_pass = _Pass(engine, policy, request, ledger)
        if not stopping.requested():  # first: what was deleted outside hermes-admin since the last look
            announced = engine.announce_noticed(request.now, policy.retention_days, not_announcing(policy, lookup))
            if announced is not None:
                ledger.add(announced)
        for task in TASKS:
            if task.name.name not in request.tasks:
                continue
            if stopping.requested():  # named in the report: a stop that came as this profile began never hides it
                one_pass.skipped(task, f"{STOPPED} before it began")
                continue
            try:
                one_pass.run(task)
            except Refused as exc:
                run.add(exc.problem)
        one_pass.reclaim()
        return ledger.results

    exports = Settings(request.export_dir or policy.export_dir, policy.export_keep_days)
    with_engine(run, profile, env, work, exports, config, incremental=policy.incremental_vacuum, ledger=ledger)

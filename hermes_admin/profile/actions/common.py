"""Running one piece of work per profile, collecting what happened for the report and exit code."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterable, Iterator


from hermes_admin import stopping
from hermes_admin.hook_failures import HookFailure
from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile
from hermes_admin.problems import ERROR, LOCKED, WARNING, Problem, about
from hermes_admin.profile.engine import REST_WAITS, Engine, Interrupted, fold
from hermes_admin.profile.exports import Settings
from hermes_admin.profile.state_folder import LockHeld
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.hermes_config import HermesConfig, HermesConfigError
from hermes_admin.profile.installation import Installations
from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.parts import graph_parts
from hermes_admin.profile.store import StoreError
from hermes_admin.profile.store.connect import is_lock_error
from hermes_admin.profile.store.connect import WriteLockHeld
from hermes_admin.profile.store.damage import DAMAGED_STORE, damage_error, is_damage
from hermes_admin.profile.store.errors import SQLITE_ERRORS
from hermes_admin.report import Progress
from hermes_admin.results import Action, Result, Run


class Refused(Exception):
    """A selection too broad to run without --force (`refuse_too_broad` says which): carries that problem."""

    def __init__(self, problem: Problem):
        super().__init__(problem.text())
        self.problem = problem


def refuse_too_broad(engine: Engine, count: Callable[[Graph], tuple[int, int]]) -> None:
    """Refused when filters without an age bound pick every candidate the command could take
    (`purge`'s ended sessions past retention, `sessions delete|archive`'s): a typo in a filter would
    take everything. `count`: a part's (picked, candidates), over every part of the store, before
    anything goes. One guard, one message."""
    picked = candidates = 0
    for graph in graph_parts(engine.store):
        in_part = count(graph)
        picked, candidates = picked + in_part[0], candidates + in_part[1]
    if candidates and picked == candidates:
        raise Refused(about(engine.profile, ERROR, "too_broad", f"the filters match all {picked} candidate "
                            "sessions and set no age bound; add --before/--after or use --force"))


def act_in_parts(engine: Engine, result: Result, parts: Iterable[list[Unit]],
                 act: Callable[[list[Unit]], Result]) -> Result:
    """`act` (one engine call, returning what it did) on each part's units, each outcome folded into
    `result`, what committed before an error too. The files and events of every part are settled
    once, at the end (the engine's batch); after an error too, for what did commit, which `result`
    then holds. Each part is read before the one before it is acted on, and said to the engine
    (`coming`): its first export runs while that one's last deletes do. Parts never share a unit,
    so reading one early changes nothing of what is selected."""
    def each_part() -> None:
        following = iter(parts)
        units = next(following, None)
        try:
            while units is not None:
                coming = next(following, None)
                engine.coming(coming or [])
                fold(result, lambda: act(units))
                if coming is not None and stopping.requested():  # the part read ahead waits, as the rest
                    result.stop = result.stop or REST_WAITS
                    return
                units = coming
        finally:
            engine.coming([])

    fold(result, lambda: engine.batched(each_part))
    return result


class Ledger:
    """The results of one profile's work, in order, each entered as it begins: after a failure each
    is reported with it (with what it committed), and the one under way says what stopped it. The
    caller's own values: the engine remembers none of them."""

    def __init__(self) -> None:
        self.results: list[Result] = []
        self.under_way: Result | None = None

    def add(self, result: Result) -> Result:
        """A result that is whole as it is entered (a task skipped)."""
        self.results.append(result)
        return result

    @contextmanager
    def begun(self, result: Result) -> Iterator[Result]:
        """`result` entered, and under way until the `with` ends without an error. A work Refused
        (before it acts) leaves no result: the refusal is its report."""
        self.results.append(result)
        self.under_way = result
        try:
            yield result
        except Refused:
            self.results = [entered for entered in self.results if entered is not result]
            self.under_way = None
            raise
        self.under_way = None


def profile_policy(profile: Profile, layers: PolicyLayers, installations: Installations):
    """The profile's policy as its config and the admin config make it (no command's overrides),
    for commands that do not run the policy's tasks; None when it cannot be read (the commands that
    use it say what is wrong with it)."""
    from hermes_admin.profile import installation
    from hermes_admin.profile.hermes_config import load as load_hermes_config
    from hermes_admin.profile.policy import PolicyError, effective

    try:
        lookup = installations.for_profile(profile)
        return effective(profile.shown, layers,
                         load_hermes_config(profile.home, installation.sessions_keys(lookup),
                                            installations.managed_for(profile)),
                         installed=installation.defaults_layer(lookup))
    except (HermesConfigError, PolicyError):
        return None


def export_settings(profile: Profile, layers: PolicyLayers, installations: Installations,
                    export_dir: str | None = None) -> Settings:
    """Where and how long the profile's exports go: `--export-dir`, else its policy, else the defaults.

    For commands that do not run the policy's tasks (`sessions delete`): a policy that cannot be
    read here is the defaults; the commands that use it say what is wrong with it.
    """
    policy = profile_policy(profile, layers, installations)
    if policy is None:
        return Settings(export_dir)
    return Settings(export_dir or policy.export_dir, policy.export_keep_days)


def own_config(profile: Profile, installations: Installations) -> HermesConfig | None:
    """The profile's config.yaml, for a command that reads no policy (so has not looked its Hermes
    installation up): only a `sessions:` key no release we know defines has the installation looked
    up, whose release may define it. None when unreadable: the engine reads it again and says why."""
    from hermes_admin.profile import hermes_config, installation

    try:
        managed = installations.managed_for(profile)
        config = hermes_config.load(profile.home, (), managed)
        if set(config.own_section("sessions")) - hermes_config.KNOWN_SESSIONS_KEYS:
            config = hermes_config.load(profile.home, installation.sessions_keys(installations.for_profile(profile)),
                                        managed)
    except HermesConfigError:
        return None
    return config


def with_engine(run: Run, profile: Profile, env: Environment, work: Callable[[Engine], list[Result]],
                exports: Settings | None = None, config: HermesConfig | None = None, incremental: bool = True,
                ledger: Ledger | None = None) -> None:
    """Open the profile's engine, do `work`, record results; one profile's failure never stops the others.

    What `work` began before a failure (`ledger`: its results, entered as each begins, filled with
    what committed) is reported with the error; the one the failure cut short says so. The report is
    made of the values opening, `work` and closing returned: never of the engine's attributes.
    """
    done: list[Result] = []
    opened = None
    worked = False  # `work` returned: its results are in `done`, whatever closing the engine raises
    config = config if config is not None else own_config(profile, env.installations)
    engine = Engine(profile, dry_run=run.dry_run, exports=exports, config=config, incremental=incremental,
                    progress=Progress(), env=env)
    try:
        try:
            opened = engine.open()
            # each names its file and key
            run.add(*(replace(w, profile=profile.shown, home=str(profile.home)) for w in opened.warnings))
            done += opened.recovered  # units an interrupted run left half-deleted, finished or restored
            done += work(engine)
            worked = True
        finally:
            engine.close()
    except BaseException as exc:
        if not worked and ledger is not None:
            done += ledger.results  # what each task began did, up to the failure
            if ledger.under_way is not None:
                ledger.under_way.notes.append(f"stopped by: {type(exc).__name__}: "
                                              f"{' '.join(str(exc).split())[:300]}")
        _record(run, profile, exc)
    finally:
        closed = engine.close()  # what closing did (said again: it closed above, or failed closing)
        done = with_replayed(done, profile, list(opened.replayed) if opened is not None else [])
        for result in done:
            result.home = str(profile.home)
            if closed.export is not None and result.action == Action.DELETE and len(result.done) and not result.dry_run:
                result.export = closed.export  # (an export kept 0 days is gone once the run is done: None)
        run.results += done
        run.add(*engine_notes(profile, list(closed.notes)))
        if closed.exports_removed:
            run.data.setdefault("exports_removed", []).extend(closed.exports_removed)
        for wait in closed.reclaim_waits:  # what the free pages wait for
            run.data.setdefault("reclaim_waits", []).append(dict(wait, profile=profile.name, home=str(profile.home)))


def with_replayed(results: list[Result], profile: Profile, replayed: list[HookFailure]) -> list[Result]:
    """The profile's results carrying the plugin failures met delivering what an earlier run left in
    the outbox (Engine.replayed), as values, so they fold with this run's own and are counted: on the
    first result (they came first), or on one of their own, a `replay`, when the work has none (a
    command that only replays)."""
    if not replayed:
        return results
    if not results:
        return [Result(profile.name, Action.REPLAY, None, False, hook_failures=list(replayed))]
    results[0].hook_failures = [*replayed, *results[0].hook_failures]
    return results


def engine_notes(profile: Profile, notes: list[str]) -> list[Problem]:
    """What an engine's collaborators set aside or left for the next run (Engine.notes): warnings."""
    return [about(profile, WARNING, "engine_note", note) for note in notes]


def store_holders(profile: Profile) -> str:
    """` (held by pid 123: hermes gateway)`: who holds SQLite's locks on the store, from /proc/locks
    (POSIX locks on the database, or, in WAL mode, its -shm), this process left out. Only stats the
    files: never opens them (that would drop SQLite's own locks of this process)."""
    import os

    from hermes_admin import lockrecord

    pids: list[int] = []
    for suffix in ("", "-shm", "-wal"):
        try:
            st = os.stat(f"{profile.store_path}{suffix}")
        except OSError:
            continue
        pids += [p for p in lockrecord.kernel_holders(st, ("POSIX", "OFDLCK")) if p != os.getpid() and p not in pids]
    if not pids:
        return ""
    return " (held by " + ", ".join(f"pid {p}" + (f": {lockrecord.command_of(p)}" if lockrecord.command_of(p) else "")
                                    for p in pids[:3]) + ")"


def _record(run: Run, profile: Profile, exc: BaseException) -> None:
    """A profile's failure, as one line in the report; anything else (a bug, Ctrl-C) goes on up."""
    if isinstance(exc, Interrupted):  # an engine call's outcome no one folded (`fold`): its failure is said
        exc = exc.failure
    if isinstance(exc, LockHeld):
        run.add(about(profile, LOCKED, "lock_held", str(exc), skipped=True))
    elif isinstance(exc, WriteLockHeld):  # what committed before is reported with it; exit 3, not 2
        run.add(about(profile, LOCKED, "write_lock_held", str(exc)))
    elif isinstance(exc, StoreError):
        run.add(exc.as_problem(profile.home))
        if exc.kind == DAMAGED_STORE and not run.dry_run:  # every view says it until the file changes
            from hermes_admin.profile import integrity

            integrity.damaged(profile, time.time(), integrity.identity(profile), exc.problem)
    elif isinstance(exc, HermesConfigError):
        run.add(about(profile, ERROR, "hermes_config", str(exc)))
    elif isinstance(exc, SQLITE_ERRORS) and is_lock_error(exc):
        # Another process kept the store's write lock past --lock-wait: a held lock (exit 3), named.
        run.add(about(profile, LOCKED, "write_lock_held", f"another process holds the write lock"
                      f"{store_holders(profile)}; nothing of this transaction was written (--lock-wait "
                      "SECONDS waits longer)", path=profile.store_path))
    elif isinstance(exc, SQLITE_ERRORS) and is_damage(exc):  # named: which structure, and the next step
        run.add(damage_error(profile, " ".join(str(exc).split())).as_problem(profile.home))
    elif isinstance(exc, SQLITE_ERRORS):
        # The transaction rolled back: nothing of it was deleted, and its events never fire.
        where = getattr(exc, "filename", None) or profile.store_path
        run.add(about(profile, ERROR, "sqlite", " ".join(str(exc).split()), path=where))
    elif isinstance(exc, OSError):  # a folder or file of ours that is unusable, disk full: this profile only
        where = exc.filename or profile.home
        run.add(about(profile, ERROR, "os", str(exc.strerror or exc), path=where))
    else:
        raise exc

"""The host's one way to get work done on profiles, for every command and for the daemon's jobs.

Discovery once per command (or daemon run), the run locks of the roots a change
writes in, the broken holds on stores (host/detached.py), the admin config's
policy layers, handing back what an older root-run left in a home, and one job
per owner (host/workers.py), whose reports are gathered into one Run. The CLI
(cli/context.App) and the daemon (host/daemon.py) both call `Host.work`; nothing
here reads a home: the job does, as its owner (docs/design.md §1, §10).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from hermes_admin import stopping, yamlfile
from hermes_admin.host import config as admin_config
from hermes_admin.host import discovery as homes
from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Owner, Profile
from hermes_admin.problems import ERROR, LOCKED, WARNING, Problem, about
from hermes_admin.protocol import Change, Context, Job, ListProfiles, Maintain, Params, PruneExports, Repair
from hermes_admin.results import RepairRun, Run
from hermes_admin.trust import steering_environment

UNKNOWN_PROFILE = "unknown_profile"  # the kind of the warning for a `profiles:` entry that reaches no profile
MANAGED_SCOPE = "managed_scope"  # the kind of a warning about Hermes' managed scope (host/managed.py)


def selects(profile: Profile, wanted: str) -> bool:
    """`-p` takes NAME (in every root), ROOT:NAME, or a profile's home folder."""
    if wanted == profile.name:
        return True
    root, sep, name = wanted.rpartition(":")
    if sep and name == profile.name and root and homes.absolute(Path(root)) == profile.root:
        return True
    # a home folder as spelled (never resolved through links: a link could name someone else's)
    return "/" in wanted and Path(os.path.normpath(os.path.abspath(wanted))) == profile.home


@dataclass
class Host:
    """One command's (or one daemon run's) view of the machine: its config, roots and profiles."""

    config: admin_config.AdminConfig
    roots: list[Path]
    verbose: int = 0
    lock_wait: float | None = None  # --lock-wait: seconds a write waits for a store held by another process
    _everything: homes.Discovery | None = field(default=None, repr=False)
    _run_locks: object = field(default=None, repr=False)  # host.runlock.RunLocks, once a change starts
    _broken: dict | None = field(default=None, repr=False)
    _broken_notes: list = field(default_factory=list, repr=False)
    _steering: list | None = field(default=None, repr=False)  # $VARIABLES ignored as root: warned in each run  # the broken-hold scan passed its bounds

    @classmethod
    def of(cls, config: admin_config.AdminConfig, roots_given=(), all_users: bool = False, **settings) -> "Host":
        """`--root`, else the config's `roots:`, else HERMES_HOME or the platform's default (discovery.py)."""
        return cls(config, homes.resolve_roots(roots_given, config.roots, all_users), **settings)

    def close(self) -> None:
        """At the end of a command (or a daemon run): the run locks go."""
        if self._run_locks is not None:
            self._run_locks.release()

    def everything(self) -> homes.Discovery:
        """Every profile of every root, found once. Where several roots are in view, each profile
        is shown as ROOT:NAME, so two roots' `default`s never read alike."""
        if self._everything is None:
            found = homes.discover(self.roots)
            if len({p.root for p in found.profiles}) > 1:
                found.profiles = [replace(p, display=f"{p.root}:{p.name}") for p in found.profiles]
            self._everything = found
        return self._everything

    def select(self, only: tuple[str, ...] = ()) -> homes.Discovery:
        """The profiles `-p` chose (without it, all but those the admin config's `exclude:` leaves out:
        named with `-p`, one is chosen all the same), with every root's skipped folders and missing roots."""
        everything = self.everything()
        if only:
            chosen = [p for p in everything.profiles if any(selects(p, w) for w in only)]
        else:
            chosen = [p for p in everything.profiles if not any(selects(p, w) for w in self.config.exclude)]
        return homes.Discovery(profiles=chosen, skipped=everything.skipped, missing_roots=everything.missing_roots,
                               owners=everything.owners)

    def labels(self) -> dict[str, str]:
        """home -> how output names the profile (its name, or ROOT:NAME with several roots)."""
        return {str(p.home): p.shown for p in self.everything().profiles}

    def broken_holds(self) -> dict[str, list]:
        """home -> the processes whose hold on its store is broken (host/detached.py), looked for
        once, over every profile in view."""
        if self._broken is None:
            from hermes_admin.host import detached

            everything = self.everything()
            stores = {p.store_path: str(p.home) for p in everything.profiles}
            owners = {p.store_path: everything.owners[p.home].uid for p in everything.profiles
                      if p.home in everything.owners}
            self._broken_notes = []
            self._broken = {stores[store]: holds
                            for store, holds in detached.scan(list(stores), self._broken_notes, owners).items()}
        return self._broken

    def work(self, params: Params, profiles: list[Profile], with_policy: bool = False) -> Run:
        """Do one kind of job on these profiles, one job per owner, and gather the reports."""
        run = RepairRun(dry_run=True) if isinstance(params, Repair) else Run(dry_run=params.dry_run)
        if params.CHANGES and not params.dry_run and profiles and not self._lock_roots(run, profiles):
            return run
        kept = self._check_holds(run, params, profiles, writing=not params.dry_run)
        if isinstance(params, Maintain) and params.summaries:  # one left out still has its metrics
            run.data.setdefault("summaries", []).extend(
                {"name": p.name, "home": str(p.home), "ok": False} for p in profiles if p not in kept)
        if with_policy:
            self._unknown_entries(run)
        if self._steering is None:  # as root, a loading path not root's own is dropped, once (trust.py)
            self._steering = steering_environment()
        said = set(run.warnings)
        run.add(*(Problem(WARNING, w, kind="environment") for w in dict.fromkeys(self._steering) if w not in said))
        if profiles and self.config.managed_warning and self.config.managed_warning not in said:
            run.add(Problem(WARNING, self.config.managed_warning, kind=MANAGED_SCOPE))  # Hermes ignores it too
        context = self._context()
        for owner, group in by_owner(kept, self.everything().owners):
            self._dispatch(run, params, owner, group, context, with_policy)
        self._host_view(run)
        return run

    def _lock_roots(self, run: Run, profiles: list[Profile]) -> bool:
        """The run locks of every root these profiles live in, or none: never two half-runs.
        False when another run holds one (said in `run` as a held lock)."""
        from hermes_admin.host.runlock import RootBusy, RunLocks

        try:
            self._run_locks = self._run_locks or RunLocks()
            self._run_locks.take([p.root for p in profiles])
        except RootBusy as exc:
            run.add(Problem(LOCKED, str(exc), kind="root_busy"))
            return False
        except OSError as exc:  # no place for the run lock: each profile's own lock still holds
            run.add(Problem(WARNING, f"run lock not taken ({exc.strerror or exc}); the profiles' own locks apply",
                            kind="run_lock"))
        return True

    def _check_holds(self, run: Run, params: Params, profiles: list[Profile], writing: bool) -> list[Profile]:
        """Name every broken hold on these profiles' stores in the report (an error where it keeps us
        from writing, a warning where it does not), and leave out of a writing job the profiles whose
        store must not be written to: a process writes into files no longer there, or without locks."""
        if not (params.CHANGES or isinstance(params, ListProfiles)):
            return profiles
        kept = []
        for profile in profiles:
            holds = self.broken_holds().get(str(profile.home), [])
            for hold in holds:
                run.add(hold.problem(profile))
            if not (writing and any(hold.blocks_writes for hold in holds)):
                kept.append(profile)
        if profiles:  # the scan passed its bounds: what it did not see is unknown, and said once
            said = set(run.warnings)
            run.add(*(Problem(WARNING, n, kind="holder_scan") for n in dict.fromkeys(self._broken_notes)
                      if n not in said))
        return kept

    def _unknown_entries(self, run: Run) -> None:
        """A `profiles:` entry of the admin config that names no profile in view is likely a typo."""
        known = {p.name for p in self.everything().profiles}
        for name in sorted(map(str, self.config.profiles)):
            if name not in known:
                run.add(Problem(WARNING, f"profiles.{name}: matches no profile of "
                                f"{', '.join(str(r) for r in self.roots)} (a typo?)", kind=UNKNOWN_PROFILE,
                                path=str(self.config.path or "admin config"), key=f"profiles.{name}"))

    def _context(self) -> Context:
        """What every job of this command carries besides its parameters (protocol.Context)."""
        return Context(verbose=self.verbose, lock_wait=self.lock_wait,
                       safe_mode=os.environ.get("HERMES_SAFE_MODE", ""),  # a worker's environment is clean
                       bundled_plugins=os.environ.get("HERMES_BUNDLED_PLUGINS", ""),  # Hermes' own override
                       managed=self.config.managed, managed_dir=self._managed_dir(),
                       processes=1 if os.environ.get("HERMES_ADMIN_PROCESSES") == "1" else 2,  # profile/fork.py
                       siblings=self._siblings())

    def _managed_dir(self) -> str:
        """The folder Hermes' own code in a plugin process must take as its managed scope: the one read
        (host/managed.py), else the invoker's variable as given (a folder that is not there: none)."""
        from hermes_admin.host import managed

        if self.config.managed is not None:
            return str(Path(self.config.managed.file).parent)
        return os.environ.get(managed.VARIABLE, "")

    def _siblings(self) -> dict[str, dict[str, str]]:
        """Per root, the profiles that share the owner of its `default`: where repair may move rows."""
        everything = self.everything()
        siblings: dict[str, dict[str, str]] = {}
        for profile in everything.profiles:
            root_owner = everything.owners.get(profile.root)
            if root_owner is not None and everything.owners[profile.home].uid == root_owner.uid:
                siblings.setdefault(str(profile.root), {})[profile.name] = str(profile.home)
        return siblings

    def _siblings_of(self, owner: Owner, context: Context) -> dict[str, dict[str, str]]:
        """The siblings (`_siblings`) of the roots this owner's `default` profiles are: no other's."""
        owners = self.everything().owners
        return {root: names for root, names in context.siblings.items()
                if owners.get(Path(root)) is not None and owners[Path(root)].uid == owner.uid}

    def _dispatch(self, run: Run, params: Params, owner: Owner, profiles: list[Profile], context: Context,
                  with_policy: bool) -> None:
        """One owner's job, made whole here (its profiles' layers, its worker's deadline), then its
        report merged into `run`."""
        from hermes_admin.host.workers import run_job

        if stopping.requested():
            run.add(Problem(WARNING, "stopped on request: " + ", ".join(p.name for p in profiles)
                            + " not worked on", kind="stopped"))
            return
        # every job may need the profile's Hermes installation (profile/installation.py)
        layers = {str(p.home): PolicyLayers(hermes_python=admin_config.hermes_python(self.config, p.name, p.root))
                  for p in profiles}
        if with_policy:
            profiles = self._with_policy(run, profiles, layers)
        if not profiles:
            return
        if os.geteuid() == 0 and owner.uid != 0 and not params.dry_run:
            self._hand_back(run, owner, profiles)
        deadlines = self._deadlines(profiles)
        job = Job(only_theirs(params, profiles), owner, profiles, layers,
                  replace(context, idle_timeout=deadlines.idle, siblings=self._siblings_of(owner, context)))
        run.merge(run_job(job, self.verbose, deadlines))

    def _deadlines(self, profiles: list[Profile]):
        """How long root waits for the worker of these profiles: the admin config's
        `worker_idle_timeout` and `worker_timeout` (entry, preset, defaults), the longest of its
        profiles'. Never from a home: a user's own config.yaml cannot make root wait longer."""
        from hermes_admin.host.workers import Deadlines
        from hermes_admin.profile.policy import admin_setting

        idle, overall = [], []
        for profile in profiles:
            try:
                layers = admin_config.policy_layers(self.config, profile.name)
            except admin_config.ConfigError:  # its entry or preset cannot be read: the defaults still say
                layers = admin_config.defaults_only(self.config)
            idle.append(admin_setting(layers, "worker_idle_timeout"))
            overall.append(admin_setting(layers, "worker_timeout"))
        return Deadlines(max(idle, default=Deadlines.idle), max(overall, default=Deadlines.overall))

    def _with_policy(self, run: Run, profiles: list[Profile], layers: dict[str, PolicyLayers]) -> list[Profile]:
        """The admin config's policy layers into each profile's; a profile whose entry is wrong is skipped."""
        kept = []
        for profile in profiles:
            home = str(profile.home)
            try:
                layers[home] = replace(admin_config.policy_layers(self.config, profile.name),
                                       hermes_python=layers[home].hermes_python)
            except admin_config.ConfigError as exc:
                run.add(about(profile, ERROR, "admin_config", str(exc), skipped=True))
                continue
            self._managed_wins(run, layers[home])
            kept.append(profile)
        return kept

    def _managed_wins(self, run: Run, layers: PolicyLayers) -> None:
        """Where the admin config sets a key Hermes' managed scope pins to another value, the managed one
        is applied (docs/design.md §4): a warning naming both, once per run."""
        from hermes_admin.profile.policy import overridden_by_managed

        if self.config.managed is None:
            return
        said = set(run.warnings)
        for origin, key, message in overridden_by_managed(layers, self.config.managed):
            text = admin_config.text_of(origin.file)
            line = yamlfile.line_of(text, origin.path_of(key)) if text else None
            problem = Problem(WARNING, message, kind=MANAGED_SCOPE, path=origin.file, key=origin.path_of(key),
                              line=line)
            if problem.text() not in said:
                run.add(problem)

    @staticmethod
    def _hand_back(run: Run, owner: Owner, profiles: list[Profile]) -> None:
        """Root, before a change: what an older, root-run hermes-admin left as root's in these homes
        goes back to their owner (host/leftovers.py: the one thing the host does inside a home)."""
        from hermes_admin.host.leftovers import hand_back

        for profile in profiles:
            run.add(*(about(profile, WARNING, "handed_back", f"left as root's by an older hermes-admin; handed back "
                            f"to {owner.user}", path=path) for path in hand_back(profile.home, owner)))

    def _host_view(self, run: Run) -> None:
        """What only the host knows, into the gathered report: the broken holds it saw in /proc (for
        the metrics), and how output names each profile."""
        for row in run.data.get("summaries", []):
            if isinstance(row, dict) and isinstance(row.get("home"), str):
                holds = self.broken_holds().get(row["home"], [])
                row["detached_holders"] = sum(1 for hold in holds if hold.blocks_writes)
                row["unlocked_holders"] = sum(1 for hold in holds if hold.unlocked)
        labels = self.labels()
        for result in run.results:
            result.label = labels.get(result.home or "", result.profile)
        for home, policy in run.policies.items():
            policy["label"] = labels.get(home, policy.get("profile"))


def only_theirs(params: Params, profiles: list[Profile]) -> Params:
    """The parameters with only what concerns these profiles' homes: a worker never learns the ids
    or export files another owner's homes were asked about."""
    homes = {str(p.home) for p in profiles}
    if isinstance(params, Change):
        return replace(params, ids={home: ids for home, ids in params.ids.items() if home in homes})
    if isinstance(params, PruneExports):
        return replace(params, files={home: files for home, files in params.files.items() if home in homes})
    return params


def by_owner(profiles: list[Profile], owners: dict[Path, Owner]) -> list[tuple[Owner, list[Profile]]]:
    """The profiles grouped by who owns them, in the order they were found."""
    groups: dict[int, tuple[Owner, list[Profile]]] = {}
    for profile in profiles:
        owner = owners[profile.home]
        groups.setdefault(owner.uid, (owner, []))[1].append(profile)
    return list(groups.values())

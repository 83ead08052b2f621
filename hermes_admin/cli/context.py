"""What every command shares: the roots, the admin config, the profile selection, and the
one way work reaches a profile (a job, done as the profile's owner: host/workers.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from hermes_admin import exitcodes, report, stopping
from hermes_admin.host import config as admin_config
from hermes_admin.host import discovery as homes
from hermes_admin.protocol import Job, Profile
from hermes_admin.results import RepairRun, Run


CHANGING = ("maintain", "change", "repair", "restore", "exports_prune")  # the kinds of job that change stores (not when dry)


@dataclass
class App:
    roots_given: tuple[str, ...] = ()
    config_path: str | None = None
    all_users: bool = False
    verbose: int = 0
    quiet: bool = False
    lock_wait: float | None = None  # --lock-wait: seconds a write waits for a store held by another process
    _config: admin_config.AdminConfig | None = field(default=None, repr=False)
    _everything: homes.Discovery | None = field(default=None, repr=False)
    _run_locks: object = field(default=None, repr=False)  # host.runlock.RunLocks, once a change starts
    _broken: dict | None = field(default=None, repr=False)

    @property
    def config(self) -> admin_config.AdminConfig:
        if self._config is None:
            try:
                self._config = admin_config.load(self.config_path)
            except admin_config.ConfigError as exc:
                report.error(f"config: {exc}")
                raise click.exceptions.Exit(exitcodes.CONFIG)
        return self._config

    def use_config(self, config: admin_config.AdminConfig) -> None:
        """A config loaded elsewhere (`config check` reads it itself, to report every problem)."""
        self._config = config

    def close(self) -> None:
        """At the end of a command (or a daemon job): the run locks go."""
        if self._run_locks is not None:
            self._run_locks.release()

    def roots(self):
        return homes.resolve_roots(self.roots_given, self.config.roots, self.all_users)

    def everything(self) -> homes.Discovery:
        """Every profile of every root, found once per command. Where several roots are in view,
        each profile is shown as ROOT:NAME, so two roots' `default`s never read alike."""
        if self._everything is None:
            found = homes.discover(self.roots())
            if len({p.root for p in found.profiles}) > 1:
                found.profiles = [replace(p, display=f"{p.root}:{p.name}") for p in found.profiles]
            self._everything = found
        return self._everything

    def broken_holds(self) -> dict[str, list]:
        """home -> the processes whose hold on its store is broken (host/detached.py), looked for
        once per command, over every profile in view."""
        if self._broken is None:
            from hermes_admin.host import detached

            stores = {p.store_path: str(p.home) for p in self.everything().profiles}
            self._broken = {stores[store]: holds for store, holds in detached.scan(list(stores)).items()}
        return self._broken

    def _check_holds(self, run: Run, kind: str, profiles: list[Profile], writing: bool) -> list[Profile]:
        """Name every broken hold on these profiles' stores in the report (an error where it keeps us
        from writing, a warning where it does not), and leave out of a writing job the profiles whose
        store must not be written to: a process writes into files no longer there, or without locks."""
        if kind not in CHANGING + ("profiles",):
            return profiles
        kept = []
        for profile in profiles:
            holds = self.broken_holds().get(str(profile.home), [])
            for hold in holds:
                (run.errors if hold.blocks_writes else run.warnings).append(hold.line(profile.shown, profile.store_path))
            if not (writing and any(hold.blocks_writes for hold in holds)):
                kept.append(profile)
        return kept

    def labels(self) -> dict[str, str]:
        """home -> how output names the profile (its name, or ROOT:NAME with several roots)."""
        return {str(p.home): p.shown for p in self.everything().profiles}

    @staticmethod
    def selects(profile: Profile, wanted: str) -> bool:
        """`-p` takes NAME (in every root), ROOT:NAME, or a profile's home folder."""
        if wanted == profile.name:
            return True
        root, sep, name = wanted.rpartition(":")
        if sep and name == profile.name and root and homes.absolute(Path(root)) == profile.root:
            return True
        # a home folder as spelled (never resolved through links: a link could name someone else's)
        return "/" in wanted and Path(os.path.normpath(os.path.abspath(wanted))) == profile.home

    def discover(self, only: tuple[str, ...] = (), quiet: bool = False) -> homes.Discovery:
        """Profiles to work on; missing roots, refused and skipped folders are reported on stderr."""
        everything = self.everything()
        chosen = [p for p in everything.profiles if not only or any(self.selects(p, w) for w in only)]
        found = homes.Discovery(profiles=chosen, skipped=everything.skipped,
                                missing_roots=everything.missing_roots, owners=everything.owners)
        if quiet:
            return found
        for root in found.missing_roots:
            report.error(f"root {root}: no such folder")
        for skipped in found.skipped:
            (report.error if skipped.refused else report.warn)(f"skipped {skipped.path}: {skipped.reason}")
        if only:
            missing = [w for w in only if not any(self.selects(p, w) for p in found.profiles)]
            for name in missing:
                report.error(f"profile '{name}': not found in {', '.join(str(r) for r in self.roots())}")
        return found

    def failed_discovery(self, found: homes.Discovery, only: tuple[str, ...] = ()) -> bool:
        """Did finding the profiles go wrong somewhere (a missing root, a refused folder, an unknown name)?"""
        return bool(found.missing_roots or any(s.refused for s in found.skipped)
                    or any(not any(self.selects(p, w) for p in found.profiles) for w in only))

    def exit_code(self, answer: Run, found: homes.Discovery, only: tuple[str, ...] = (), failed: bool = False) -> int:
        """The exit code of a command that lists (README "Exit codes"): 70 for a bug of ours, 2 when a
        profile, store or root could not be processed, else 0."""
        if answer.internal:
            return exitcodes.INTERNAL
        if failed or answer.errors or self.failed_discovery(found, only):
            return exitcodes.PROFILE_FAILED
        return exitcodes.OK

    def work(self, kind: str, params: dict, profiles: list[Profile], with_policy: bool = False) -> Run:
        """Do one kind of job on these profiles, one job per owner, and gather the reports."""
        from hermes_admin.host.workers import by_owner, run_job

        run = RepairRun(dry_run=True) if kind == "repair" else Run(dry_run=bool(params.get("dry_run", True)))
        if kind in CHANGING and not params.get("dry_run", True) and profiles:
            from hermes_admin.host.runlock import RootBusy, RunLocks
            try:  # every root or none: never two half-runs
                self._run_locks = self._run_locks or RunLocks()
                self._run_locks.take([p.root for p in profiles])
            except RootBusy as exc:
                run.locked.append(str(exc))
                return run
            except OSError as exc:  # no place for the run lock: each profile's own lock still holds
                run.warnings.append(f"run lock not taken ({exc.strerror or exc}); the profiles' own locks apply")
        kept = self._check_holds(run, kind, profiles, writing=not params.get("dry_run", True))
        if params.get("summaries"):  # a profile left out still has its metrics: the holders, its errors
            run.data.setdefault("summaries", []).extend(
                {"name": p.name, "home": str(p.home), "ok": False} for p in profiles if p not in kept)
        profiles = kept
        owners = self.everything().owners
        params = dict(params, siblings=self._siblings(), verbose=self.verbose, lock_wait=self.lock_wait,
                      safe_mode=os.environ.get("HERMES_SAFE_MODE", ""),  # a worker's environment is clean
                      bundled_plugins=os.environ.get("HERMES_BUNDLED_PLUGINS", ""),  # Hermes' own override
                      processes=1 if os.environ.get("HERMES_ADMIN_PROCESSES") == "1" else 2)  # profile/fork.py
        if with_policy:
            known = {p.name for p in self.everything().profiles}
            for name in sorted(map(str, self.config.profiles)):
                if name not in known:
                    run.warnings.append(f"{self.config.path or 'admin config'}: profiles.{name}: matches no profile "
                                        f"of {', '.join(str(r) for r in self.roots())} (a typo?)")
        for owner, group in by_owner(profiles, owners):
            if stopping.requested():
                run.warnings.append("stopped on request: " + ", ".join(p.name for p in group) + " not worked on")
                continue
            # every job may need the profile's Hermes installation (profile/installation.py)
            layers = {str(p.home): admin_config.hermes_python(self.config, p.name, p.root) for p in group}
            if with_policy:
                for profile in list(group):
                    try:
                        layers[str(profile.home)].update(admin_config.policy_layers(self.config, profile.name))
                    except admin_config.ConfigError as exc:
                        run.errors.append(f"profile '{profile.shown}': skipped: {exc}")
                        group.remove(profile)
            if not group:
                continue
            if os.geteuid() == 0 and owner.uid != 0 and not params.get("dry_run", True):
                from hermes_admin.host.leftovers import hand_back
                for profile in group:
                    run.warnings += [f"profile '{profile.shown}': {path}: left as root's by an older hermes-admin; "
                                     f"handed back to {owner.user}" for path in hand_back(profile.home, owner)]
            run.merge(run_job(Job(kind, params, owner, group, layers), self.verbose))
        for row in run.data.get("summaries", []):  # for the metrics: what the host saw in /proc
            if isinstance(row, dict) and isinstance(row.get("home"), str):
                holds = self.broken_holds().get(row["home"], [])
                row["detached_holders"] = sum(1 for hold in holds if hold.blocks_writes)
                row["unlocked_holders"] = len(holds) - row["detached_holders"]
        labels = self.labels()
        for result in run.results:
            result.label = labels.get(result.home or "", result.profile)
        for home, policy in run.policies.items():
            policy["label"] = labels.get(home, policy.get("profile"))
        return run

    def _siblings(self) -> dict[str, list[list[str]]]:
        """Per root, the profiles that share the owner of its `default`: where repair may move rows."""
        everything = self.everything()
        siblings: dict[str, list[list[str]]] = {}
        for profile in everything.profiles:
            root_owner = everything.owners.get(profile.root)
            if root_owner is not None and everything.owners[profile.home].uid == root_owner.uid:
                siblings.setdefault(str(profile.root), []).append([profile.name, str(profile.home)])
        return siblings


pass_app = click.make_pass_decorator(App)


def complete_profiles(ctx: click.Context, param, incomplete: str):
    """Shell completion of `-p`: every profile's NAME and ROOT:NAME, found as a command would find them."""
    from click.shell_completion import CompletionItem

    top = ctx.find_root().params
    app = App(roots_given=tuple(top.get("roots") or ()), config_path=top.get("config_path"),
              all_users=bool(top.get("all_users")))
    try:
        found = app.everything().profiles
    except (click.exceptions.Exit, OSError):
        return []
    names = sorted({p.name for p in found} | {f"{p.root}:{p.name}" for p in found})
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def profile_option(f):
    return click.option(
        "--profile", "-p", "profiles", multiple=True, metavar="NAME", shell_complete=complete_profiles,
        help="Only this profile: NAME (in every root), ROOT:NAME or its home folder (repeatable; "
             "default: every profile of every root).",
    )(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")(f)

"""What every command shares: the global options, the admin config, the profile selection as
reported to a person, and the one way work reaches a profile (host/runner.Host.work: a job,
done as the profile's owner)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import click

from hermes_admin import exitcodes, report
from hermes_admin.host import config as admin_config
from hermes_admin.host import discovery as homes
from hermes_admin.host.runner import Host, selects
from hermes_admin.model import Profile
from hermes_admin.protocol import Params
from hermes_admin.results import Run
from hermes_admin.shown import did_you_mean
from hermes_admin.trust import expand_user


@dataclass
class App:
    roots_given: tuple[str, ...] = ()
    config_path: str | None = None
    all_users: bool = False
    verbose: int = 0
    quiet: bool = False
    lock_wait: float | None = None  # --lock-wait: seconds a write waits for a store held by another process
    _config: admin_config.AdminConfig | None = field(default=None, repr=False)
    _host: Host | None = field(default=None, repr=False)

    @property
    def config(self) -> admin_config.AdminConfig:
        if self._config is None:
            try:
                self._config = admin_config.load_checked(self.config_path)
            except admin_config.ConfigError as exc:
                for line in str(exc).splitlines():  # every problem, each with its file and line
                    report.error(f"config: {line}")
                raise click.exceptions.Exit(exitcodes.CONFIG)
        return self._config

    def use_config(self, config: admin_config.AdminConfig) -> None:
        """A config loaded elsewhere (`config check` reads it itself, to report every problem)."""
        self._config = config
        self._host = None

    @property
    def host(self) -> Host:
        """The host side of this command (host/runner.py), made once the config is read."""
        if self._host is None:
            self._host = Host.of(self.config, self.roots_given, self.all_users, verbose=self.verbose,
                                 lock_wait=self.lock_wait)
        return self._host

    def close(self) -> None:
        """At the end of a command: the run locks go."""
        if self._host is not None:
            self._host.close()

    def chosen_by(self) -> tuple[list[str], list[str]]:
        """The global options that chose this command's policy and its roots, as the words a printed
        command line repeats: `--config F` (the config read, by its absolute path), and `--root R`
        (each absolute) and `--all-users` as given."""
        path = self.config.path
        config = ["--config", str(Path(expand_user(str(path))).absolute())] if path else []
        roots = [w for root in self.roots_given for w in ("--root", str(Path(expand_user(str(root))).absolute()))]
        return config, roots + (["--all-users"] if self.all_users else [])

    def given(self) -> str:
        """`chosen_by`'s words, quoted, for a command line this command prints to be pasted as it is."""
        return "".join(" " + shlex.quote(w) for w in sum(self.chosen_by(), []))

    def roots(self):
        return self.host.roots

    def everything(self) -> homes.Discovery:
        return self.host.everything()

    def broken_holds(self) -> dict[str, list]:
        return self.host.broken_holds()

    def labels(self) -> dict[str, str]:
        return self.host.labels()

    def work(self, params: Params, profiles: list[Profile], with_policy: bool = False) -> Run:
        """One kind of job (its typed parameters: protocol.py) on these profiles (host/runner.py)."""
        return self.host.work(params, profiles, with_policy)

    selects = staticmethod(selects)

    def discover(self, only: tuple[str, ...] = (), quiet: bool = False) -> homes.Discovery:
        """Profiles to work on; missing roots, refused and skipped folders are reported on stderr."""
        found = self.host.select(only)
        if quiet:
            return found
        for root in found.missing_roots:
            report.error(f"root {root}: no such folder")
        for skipped in found.skipped:
            (report.error if skipped.refused else report.warn)(f"skipped {skipped.path}: {skipped.reason}")
        if only:
            missing = [w for w in only if not any(selects(p, w) for p in found.profiles)]
            known = {p.name for p in self.everything().profiles} if missing else set()
            for name in missing:
                report.error(f"profile '{name}': not found in {', '.join(str(r) for r in self.roots())}"
                             + did_you_mean(name, known))
        return found

    def failed_discovery(self, found: homes.Discovery, only: tuple[str, ...] = ()) -> bool:
        """Did finding the profiles go wrong somewhere (a missing root, a refused folder, an unknown name)?"""
        return bool(found.missing_roots or any(s.refused for s in found.skipped)
                    or any(not any(selects(p, w) for p in found.profiles) for w in only))

    def exit_code(self, answer: Run, found: homes.Discovery, only: tuple[str, ...] = (), failed: bool = False) -> int:
        """The exit code of a command that lists (README "Exit codes"): 70 for a bug of ours, 2 when a
        profile, store or root could not be processed, else 0."""
        if answer.internal:
            return exitcodes.INTERNAL
        if failed or answer.errors or self.failed_discovery(found, only):
            return exitcodes.PROFILE_FAILED
        return exitcodes.OK


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

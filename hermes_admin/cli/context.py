"""What every command shares: the roots, the admin config and the profile selection."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from hermes_admin.host import config as admin_config
from hermes_admin import exitcodes, report
from hermes_admin.host import discovery as homes


@dataclass
class App:
    roots_given: tuple[str, ...] = ()
    config_path: str | None = None
    all_users: bool = False
    verbose: int = 0
    _config: admin_config.AdminConfig | None = field(default=None, repr=False)

    @property
    def config(self) -> admin_config.AdminConfig:
        if self._config is None:
            try:
                self._config = admin_config.load(self.config_path)
            except admin_config.ConfigError as exc:
                report.error(f"config: {exc}")
                raise click.exceptions.Exit(exitcodes.PROFILE_FAILED)
        return self._config

    def roots(self):
        return homes.resolve_roots(self.roots_given, self.config.roots, self.all_users)

    def discover(self, only: tuple[str, ...] = ()) -> homes.Discovery:
        """Profiles to work on; missing roots and skipped folders are reported on stderr."""
        found = homes.discover(self.roots(), only)
        for root in found.missing_roots:
            report.error(f"root {root}: no such folder")
        for skipped in found.skipped:
            report.warn(f"skipped {skipped.path}: {skipped.reason}")
        if only:
            missing = sorted(set(only) - {p.name for p in found.profiles})
            for name in missing:
                report.error(f"profile '{name}': not found in {', '.join(str(r) for r in self.roots())}")
        return found


pass_app = click.make_pass_decorator(App)


def profile_option(f):
    return click.option(
        "--profile", "-p", "profiles", multiple=True, metavar="NAME",
        help="Only this profile (repeatable; default: every profile of every root).",
    )(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")(f)

"""`hermes-admin plugins list`: each profile's plugins, enabled or not and why."""

from __future__ import annotations

import click

from hermes_admin import exitcodes, report
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.profile.hermes_config import HermesConfigError
from hermes_admin.profile.hermes_config import load as load_hermes_config
from hermes_admin.profile.hooks.discovery import discover


@click.group()
def plugins():
    """Hermes plugins that receive `on_session_delete`."""


@plugins.command("list")
@profile_option
@json_option
@pass_app
def list_cmd(app: App, profiles, as_json: bool):
    """Every plugin found per profile: enabled or not and why, and its hooks. Imports none."""
    found = app.discover(profiles)
    rows, errors = [], []
    for profile in found.profiles:
        try:
            config = load_hermes_config(profile.home)
        except HermesConfigError as exc:
            errors.append(f"profile '{profile.name}': {exc}")
            continue
        rows += [dict(profile=profile.name, **p.as_dict()) for p in discover(profile.home, config)]
    if as_json:
        report.emit_json({"plugins": rows, "errors": errors})
    else:
        report.stdout_console().print(report.table(
            None, ["profile", "plugin", "source", "enabled", "why", "hooks"],
            [[r["profile"], r["key"], r["source"], "yes" if r["enabled"] else "no", r["why"],
              ", ".join(r["hooks"])] for r in rows],
        ))
    for message in errors:
        report.error(message)
    raise click.exceptions.Exit(exitcodes.PROFILE_FAILED if errors or found.missing_roots else exitcodes.OK)

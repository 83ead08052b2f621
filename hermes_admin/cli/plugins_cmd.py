"""`hermes-admin plugins list`: each profile's plugins, enabled or not and why."""

from __future__ import annotations

import click

from hermes_admin import report, tables
from hermes_admin.tables import Column
from hermes_admin.cli.context import App, json_option, pass_app, profile_option


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
    answer = app.work("plugins_list", {}, found.profiles)
    rows, errors = answer.data.get("plugins", []), answer.errors
    if as_json:
        report.emit_json({"plugins": rows, "errors": errors})
    else:
        tables.show([Column("profile", whole=True), Column("plugin", whole=True), Column("source", drop=2),
                     Column("enabled"), Column("why", cut=True), Column("hooks", drop=1)],
                    [[r["profile"], r["key"], r["source"], "yes" if r["enabled"] else "no", r["why"],
                      ", ".join(r["hooks"])] for r in rows])
    for message in errors:
        report.error(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))

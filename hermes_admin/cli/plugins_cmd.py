"""`hermes-admin plugins list`: each profile's plugins, enabled or not and why."""

from __future__ import annotations

import click

from hermes_admin import report, tables
from hermes_admin.tables import Column
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin.protocol import ListPlugins


@click.group(cls=SuggestingGroup)
def plugins():
    """Hermes plugins that receive `on_session_delete`."""


@plugins.command("list")
@click.option("--no-bundled", is_flag=True, help="Leave out the plugins bundled with Hermes (as `hermes plugins list`).")
@click.option("--enabled", "only_enabled", is_flag=True, help="Only the plugins enabled in the profile's config.")
@profile_option
@json_option
@pass_app
def list_cmd(app: App, profiles, as_json: bool, no_bundled: bool, only_enabled: bool):
    """Every plugin each profile's Hermes sees: enabled or not, whether it loads and why.
    Imports none: Hermes' own discovery answers, in the interpreter of the installation found.

    Which hooks a plugin registers is known only by running its `register()`, so the table has no
    hooks column; the JSON's `hooks` are those its manifest declares (`provides_hooks`), if any."""
    found = app.discover(profiles)
    answer = app.work(ListPlugins(), found.profiles)
    rows, errors = answer.data.get("plugins", []), answer.errors
    rows = [r for r in rows if not (no_bundled and r["source"] == "bundled") and not (only_enabled and not r["enabled"])]
    installs = answer.data.get("installations", [])
    if as_json:
        report.emit_json({"plugins": rows, "installations": installs, "errors": errors, "warnings": answer.warnings})
    else:
        for line in installation_lines(installs, app.labels()):  # beside a table read by a script, on stderr
            (report.line if not tables.plain() else report.note)(line)
        tables.show([Column("profile", whole=True), Column("plugin", whole=True), Column("source", drop=3),
                     Column("kind", drop=2), Column("enabled"), Column("loads"), Column("why", wrap=True)],
                    [[r["profile"], r["key"], r["source"], r.get("kind"), "yes" if r["enabled"] else "no",
                      "yes" if r.get("loads", r["enabled"]) else "no", r["why"]] for r in rows])
    for message in answer.warnings:
        report.warn(message)
    for message in errors:
        report.error(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))


def installation_lines(installs: list[dict], labels: dict[str, str]) -> list[str]:
    """Each installation line once, naming the profiles it is about (profiles of one root share one)."""
    by_line: dict[str, list[str]] = {}
    for row in installs:
        by_line.setdefault(installation_line(row), []).append(labels.get(row["home"], row["profile"]))
    return [f"{_names(names)}: {line}" for line, names in by_line.items()]


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def installation_line(row: dict) -> str:
    """One line: the installation a profile's plugins run in, or that none was found and what to do."""
    found = row.get("installation")
    if found:
        return f"plugins run in {found['python']} (Hermes {found.get('hermes') or '?'}; found by {found['found_by']})"
    return (row.get("notes") or ["no Hermes installation found"])[-1]

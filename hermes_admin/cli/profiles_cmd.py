"""`hermes-admin profiles`: each profile with its health and counts."""

from __future__ import annotations

import click

from hermes_admin import report, tables
from hermes_admin.tables import Column
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.protocol import ListProfiles


# On a narrow terminal the least read go first (hermes, stale, wal, journal, ...), then the home goes
# under its row, whole, so that the counts and sizes stay beside the name and its health.
COLUMNS = [Column("profile", whole=True), Column("home", whole=True, drop=6), Column("ok"), Column("schema", drop=7),
           Column("journal", drop=10), Column("sessions", drop=2), Column("messages", drop=4),
           Column("archived", drop=8), Column("live", drop=5), Column("stale", drop=12), Column("empty", drop=9),
           Column("store", drop=3), Column("wal", drop=11), Column("last activity", drop=1),
           Column("hermes", drop=13)]


def show_profiles(app: App, only: tuple[str, ...], as_json: bool) -> int:
    found = app.discover(only)
    answer = app.work(ListProfiles(), found.profiles, with_policy=True)
    rows = answer.data.get("profiles", [])
    for row in rows:  # processes whose hold on the store is broken: the host looked, the worker could not
        holds = app.broken_holds().get(row["home"], [])
        row["broken_holds"] = [hold.as_dict() for hold in holds]
        if any(hold.blocks_writes for hold in holds):
            row["ok"] = False
    if as_json:  # `profile`, as every other command's JSON names it; `name` kept for scripts that read it
        report.emit_json({"profiles": [{"profile": r["name"], **r} for r in rows]})
    else:
        labels = app.labels()
        tables.show(COLUMNS, [
            [labels.get(r["home"], r["name"]), r["home"], "yes" if r["ok"] else "NO", r["schema_version"], r["journal_mode"],
             r["sessions"], r["messages"], r["archived"], r["live"], r.get("stale_open"), r["empty"],
             report.human_bytes(r["store_bytes"]) if r["store"] else "no store",
             report.human_bytes(r["wal_bytes"]) if r["store"] else None, report.local_time(r["last_activity"]),
             _hermes(r)]
            for r in rows])
        report.installation_notes(r.get("hermes") for r in rows)  # none found: once per root, what to do
        for r in rows:
            if r.get("reclaim_waits_for"):
                report.note(f"{labels.get(r['home'], r['name'])}: {report.human_bytes(r['reclaimable_bytes'])} of free "
                            f"pages reclaimable; they wait for {r['reclaim_waits_for']}")
    for r in rows:
        if r["error"]:
            report.error(r["error"])
    for message in answer.errors:
        report.error(message)
    for message in answer.warnings:
        report.warn(message)
    return app.exit_code(answer, found, only, failed=any(not r["ok"] for r in rows))


def _hermes(row: dict) -> str:
    found = (row.get("hermes") or {}).get("installation")
    return f"{found.get('hermes') or '?'} ({found['found_by']})" if found else "not found"


@click.command()
@profile_option
@json_option
@pass_app
def profiles(app: App, profiles: tuple[str, ...], as_json: bool):
    """List every profile with its health and counts."""
    raise click.exceptions.Exit(show_profiles(app, profiles, as_json))

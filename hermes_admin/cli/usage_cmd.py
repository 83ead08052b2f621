"""`hermes-admin usage`: where the bytes are, per profile, per root and for the host; changes nothing."""

from __future__ import annotations

import click

from hermes_admin import report, tables
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.profile.usage import PARTS
from hermes_admin.protocol import Usage
from hermes_admin.tables import Column

FILES = {"state_db_wal": "state.db-wal", "state_db_shm": "state.db-shm", "sessions_dir": "sessions/",
         "exports": "exports", "damaged_copies": "damaged copies kept by repair"}  # how people read the file kinds after the store's parts

# On a narrow terminal the share goes first; profile and part stay whole.
COLUMNS = [Column("profile", whole=True), Column("part", whole=True), Column("bytes"), Column("share", drop=1)]
# The summary, one row a profile (what `du -sh` gives, split in the parts people act on): the store,
# its free pages (what a VACUUM gives back), the WAL with the shared-memory index, the transcript
# files and the exports; they add up to the total.
SUMMARY = [Column("profile", whole=True), Column("total"), Column("state.db"), Column("free pages", drop=1),
           Column("wal+shm", drop=2), Column("sessions/"), Column("exports")]


def totals(rows: list[dict]) -> dict:
    """Per root and for the host: every file kind summed (a profile counts in its root once)."""
    by_root: dict[str, dict[str, int]] = {}
    for row in rows:
        root = row.get("root") or row["home"]
        into = by_root.setdefault(root, {})
        for name, size in row["files"].items():
            into[name] = into.get(name, 0) + size
    host: dict[str, int] = {}
    for sums in by_root.values():
        for name, size in sums.items():
            host[name] = host.get(name, 0) + size
    return {"roots": by_root, "root_bytes": {root: sum(sums.values()) for root, sums in by_root.items()},
            "host": host, "host_bytes": sum(host.values())}


def part_label(part: dict) -> str:
    return PARTS.get(part.get("kind"), "{}").format(part.get("name"))


def summary_row(name: str, row: dict) -> list[str]:
    files, size = row["files"], report.human_bytes
    return [name, size(row["total_bytes"]), size(files["state_db"]), size(row["reclaimable_bytes"]),  # the one figure
            size(files["state_db_wal"] + files["state_db_shm"]), size(files["sessions_dir"]), size(files["exports"])]


@click.command()
@profile_option
@click.option("--detail", "-d", is_flag=True,
              help="Each table with its indexes, each FTS5 index, each file, each source's share and the "
                   "largest sessions, after the summary (--json always holds all of it).")
@json_option
@pass_app
def usage(app: App, profiles, detail: bool, as_json: bool):
    """Where each profile's bytes are: tables, FTS indexes, free pages, WAL, files.

    First a summary, a line a profile: its total, the store with its free pages, the WAL,
    sessions/ files and exports, what its free pages wait for, and totals per root and for the
    host. With --detail: each table with its indexes, each FTS5 index, free pages, the WAL,
    sessions/ files and exports, adding up to the files' sizes; the largest sessions and each
    source's share. Read-only."""
    found = app.discover(profiles)
    answer = app.work(Usage(), found.profiles, with_policy=True)
    rows = answer.data.get("usage", [])
    roots = {str(p.home): str(p.root) for p in found.profiles}
    labels = app.labels()
    for row in rows:
        row["root"] = roots.get(row["home"])
    summed = totals(rows)
    if as_json:
        report.emit_json({"profiles": rows, **summed, "errors": answer.errors, "warnings": answer.warnings})
    else:
        if not (detail and tables.plain()):  # piped, one table a command: --detail's
            tables.show(SUMMARY, [summary_row(labels.get(row["home"], row["profile"]), row) for row in rows])
        for row in rows:
            if row.get("reclaim_waits_for"):
                name = labels.get(row["home"], row["profile"])
                report.line(f"{name}: {report.human_bytes(row['reclaimable_bytes'])} of free pages reclaimable; "
                            f"they wait for {row['reclaim_waits_for']}")
        if detail:
            _detail(rows, labels)
        for root, size in summed["root_bytes"].items():
            report.line(f"root {root}: {report.human_bytes(size)}")
        report.line(f"host: {report.human_bytes(summed['host_bytes'])}")
        if not detail and rows and not tables.plain():
            report.note("each table and index, each source's share and the largest sessions: usage --detail")
    for message in answer.errors:
        report.error(message)
    for message in answer.warnings:
        report.warn(message)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles))


def _detail(rows: list[dict], labels: dict[str, str]) -> None:
    """Every part of every profile, then each profile's sources and its largest sessions."""
    lines = []
    for row in rows:
        name = labels.get(row["home"], row["profile"])
        store = row["files"]["state_db"] or 1
        for part in row["store_parts"]:
            lines.append([name, f"state.db: {part_label(part)}", report.human_bytes(part["bytes"]),
                          f"{100 * part['bytes'] / store:.1f} %"])
        for key, shown in FILES.items():
            lines.append([name, shown, report.human_bytes(row["files"][key]), ""])
        lines.append([name, "total", report.human_bytes(row["total_bytes"]), ""])
    if not tables.plain():  # piped, one table: its rows hold each profile's total too
        report.line("")
    tables.show(COLUMNS, lines)
    for row in rows:
        name = labels.get(row["home"], row["profile"])
        # `cli 73 % / 99 %`: one pair a source, the two shares named once (a list of both per source read as a run-on)
        shares = ", ".join(f"{s['source']} {100 * s['share_sessions']:.0f} % / {100 * s['share_bytes']:.0f} %"
                           for s in row["sources"][:5])
        report.line(f"{name}: sources, % of sessions / % of bytes: {shares}" if shares else f"{name}: sources: none")
        for big in row["largest_sessions"][:3]:
            report.line(f"{name}: large: {big['id']} ({big['source']}) {report.human_bytes(big['bytes'])}")

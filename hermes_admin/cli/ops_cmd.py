"""`hermes-admin daemon` and `hermes-admin systemd print`: wiring for machines."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import click

from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin import exitcodes, report, stopping
from hermes_admin.cli.context import App, pass_app
from hermes_admin.host.config import ConfigError
from hermes_admin.host.config import load_checked as load_config
from hermes_admin.host.config import shipped

PLACEHOLDER = "/usr/local/bin/hermes-admin"  # the path the shipped units name, replaced by this installation's real one


def setup_logging(verbose: int) -> None:
    # journald adds its own timestamps; a terminal gets them from us.
    stamp = "" if os.environ.get("JOURNAL_STREAM") or not sys.stderr.isatty() else "%(asctime)s "
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format=stamp + "%(levelname)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)


@click.command()
@click.option("--metrics-file", type=click.Path(dir_okay=False), help="Write Prometheus textfile metrics after each job.")
@pass_app
def daemon(app: App, metrics_file):
    """Run the maintenance tasks on the admin config's `schedule:` until stopped."""
    from hermes_admin.host.daemon import Daemon, ScheduleError, schedule  # APScheduler: only for the daemon

    setup_logging(app.verbose)

    def load():
        return load_config(app.config_path)

    try:
        service = Daemon(load_config=load, roots_given=app.roots_given, all_users=app.all_users,
                         verbose=app.verbose, metrics_file=metrics_file)
        # Check the schedule before telling systemd we are ready.
        from apscheduler.schedulers.background import BackgroundScheduler
        schedule(BackgroundScheduler(), service.config, service.job)
    except (ConfigError, ScheduleError) as exc:
        report.error(str(exc))
        raise click.exceptions.Exit(exitcodes.CONFIG)
    code = service.serve()
    stopping.clear()  # SIGTERM is how a daemon is meant to stop: exit 0, not "interrupted"
    raise click.exceptions.Exit(code)


def executable() -> str:
    found = shutil.which("hermes-admin")
    return str(Path(found).resolve()) if found else str(Path(sys.argv[0]).resolve())


def render_units(user: bool, exe: str, roots: list[Path] | None, writable: list[Path] | None = None) -> dict[str, str]:
    """The shipped units with this executable; `roots` replace --all-users, and ReadWritePaths= covers
    them and `writable` (the metrics folder) as well as the shipped defaults."""
    folder = shipped("systemd")
    if folder is None:
        raise click.ClickException("the systemd units are not installed with this copy of hermes-admin")
    folder = folder / "user" if user else folder
    units = {}
    for path in sorted(folder.glob("hermes-admin*")):
        text = path.read_text().replace(PLACEHOLDER, exe)
        if not user and (roots or writable):
            def paths(line: str) -> str:
                given = [f"-{r}" for r in (roots or [])] + [f"-{w}" for w in (writable or [])]
                kept = [] if roots else line.split("=", 1)[1].split()
                return "ReadWritePaths=" + " ".join(dict.fromkeys(kept + given))
            text = "\n".join(paths(line) if line.startswith("ReadWritePaths=") else line
                             for line in text.splitlines()) + "\n"
        if roots and not user:
            text = text.replace(f"{exe} --all-users ", f"{exe} " + " ".join(f"--root {r}" for r in roots) + " ")
        units[path.name] = text
    return units


@click.group(cls=SuggestingGroup)
def systemd():
    """systemd units for hermes-admin."""


@systemd.command("print")
@click.option("--user", is_flag=True, help="The user-unit variants (your own ~/.hermes).")
@click.option("--dir", "target", type=click.Path(file_okay=False), help="Write the units into this folder instead.")
@pass_app
def print_units(app: App, user: bool, target: str | None):
    """The units with the real path of this hermes-admin (and the --root folders, when given)."""
    given = app.roots_given or tuple(app.config.roots)  # --root, else the admin config's roots:
    roots = [Path(r).expanduser().absolute() for r in given] or None
    metrics = app.config.metrics_file
    writable = [Path(metrics).expanduser().absolute().parent] if metrics else None
    units = render_units(user, executable(), roots, writable)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            (Path(target) / name).write_text(text)
            click.echo(f"wrote {Path(target) / name}", err=True)
        return
    for name, text in units.items():
        click.echo(f"# ---- {name} ----")
        click.echo(text)

"""`hermes-admin daemon` and `hermes-admin systemd print`: wiring for machines."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from hermes_admin import exitcodes, report, stopping
from hermes_admin.cli.context import App, pass_app
from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin.host.config import ConfigError
from hermes_admin.host.config import load_checked as load_config
from hermes_admin.host.config import shipped
from hermes_admin.trust import expand_user

PLACEHOLDER = "/usr/local/bin/hermes-admin"  # the path the shipped units name, replaced by this installation's real one


def setup_logging(verbose: int) -> None:
    # journald adds its own timestamps; a terminal gets them from us.
    stamp = "" if os.environ.get("JOURNAL_STREAM") or not sys.stderr.isatty() else "%(asctime)s "
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format=stamp + "%(levelname)s %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.DEBUG if verbose > 1 else logging.WARNING)


def route_stderr() -> None:
    """Whatever else says something on stderr says it as a log record of the daemon's (one format)."""
    from hermes_admin.host.daemon import LogLines, log

    sys.stderr = LogLines(log, sys.stderr)


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
    route_stderr()  # after the config's own errors, said as every command says them
    code = service.serve()
    stopping.clear()  # SIGTERM is how a daemon is meant to stop: exit 0, not "interrupted"
    raise click.exceptions.Exit(code)


def executable() -> str:
    """The hermes-admin that is running, for the units to run: never the first one on PATH, which
    may be another version, or a stale copy whose failure the units would count as success.
    Started as `python -m hermes_admin`, that interpreter with `-m hermes_admin`."""
    program = Path(sys.argv[0])
    if program.name.startswith("hermes-admin") and os.access(program, os.X_OK) and program.is_file():
        return _word(program.absolute())
    return f"{_word(Path(sys.executable).absolute())} -m hermes_admin"


@dataclass(frozen=True)
class UnitInputs:
    """What `systemd print` was given, for the units to carry exactly: the roots' options their
    command lines start with (None keeps the shipped `--all-users` or `--root %h/.hermes`), the
    other global options (`--config F`, `--lock-wait`), and every folder the run writes: the roots
    (none, or every user's: the shipped list too), then exports and the metrics folder."""

    root_options: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    roots: tuple[Path, ...] = ()
    all_users: bool = False
    writable: tuple[Path, ...] = ()


def _word(text) -> str:
    """One word of a unit's command line or path list, as systemd reads it back (systemd.syntax(7))."""
    text = str(text).replace("%", "%%").replace("$", "$$")
    return f'"{text}"' if any(c.isspace() or c in "\"'\\;" for c in text) else text


def render_units(user: bool, exe: str, inputs: UnitInputs = UnitInputs()) -> dict[str, str]:
    """The shipped units with this executable and `inputs`: every ExecStart= starts with the
    options given (so the timer runs the policy `--config F run --dry-run` shows), and
    ReadWritePaths= covers the roots, our cache and every other folder the run writes."""
    folder = shipped("systemd")
    if folder is None:
        raise click.ClickException("the systemd units are not installed with this copy of hermes-admin")
    folder = folder / "user" if user else folder
    units = {}
    for path in sorted(folder.glob("hermes-admin*")):
        lines = []
        for line in path.read_text().replace(PLACEHOLDER, exe).splitlines():
            if line.startswith(f"ExecStart={exe} "):
                words, n = line[len(f"ExecStart={exe} "):].split(), 0
                while n < len(words) and words[n] in ("--all-users", "--root"):  # the shipped root selection
                    n += 2 if words[n] == "--root" else 1
                chosen = words[:n] if inputs.root_options is None else [_word(w) for w in inputs.root_options]
                line = " ".join([f"ExecStart={exe}", *chosen, *map(_word, inputs.options), *words[n:]])
            elif line.startswith("ReadWritePaths="):
                roots = ["-" + _word(r) for r in inputs.roots]  # a root gone never stops the unit
                if not roots or inputs.all_users:
                    roots += line.split("=", 1)[1].split()  # the shipped list: every user's root
                cache = "-%h/.cache/hermes-admin" if user else "-/root/.cache/hermes-admin"  # installation.py's cache
                line = "ReadWritePaths=" + " ".join(dict.fromkeys(
                    roots + [cache] + ["-" + _word(w) for w in inputs.writable]))
            lines.append(line)
        units[path.name] = "\n".join(lines) + "\n"
    return units


def unit_inputs(app: App) -> UnitInputs:
    """The global options `systemd print` was given (the admin config it read, by its path), and
    what the run they start writes: the timer then runs what `--config F run --dry-run` shows."""
    from hermes_admin.host.config import policy_layers

    config = app.config
    options, chosen_roots = app.chosen_by()
    if app.lock_wait is not None:
        options += ["--lock-wait", f"{app.lock_wait:g}s"]
    root_options: list[str] | None = None  # nothing said about roots: the shipped selection
    if app.roots_given or app.all_users or config.roots:
        root_options = chosen_roots  # none given: the config's roots:, by --config
    roots = [Path(expand_user(str(r))).absolute() for r in app.roots_given or config.roots]
    writable = []
    for name in list(config.profiles) or [""]:
        for layer in policy_layers(config, str(name)).admin_layers():
            folder = layer.values.get("export_dir")
            if isinstance(folder, str) and Path(expand_user(folder)).is_absolute():  # else inside a home
                writable.append(Path(expand_user(folder)))
    if config.metrics_file:
        writable.append(Path(expand_user(config.metrics_file)).absolute().parent)
    return UnitInputs(None if root_options is None else tuple(root_options), tuple(options), tuple(roots),
                      app.all_users, tuple(dict.fromkeys(writable)))


PRIVATE_TMP = ("/tmp", "/var/tmp")  # what PrivateTmp=yes replaces with the service's own empty folders


def private_tmp_warnings(units: dict[str, str]) -> list[str]:
    """A path under /tmp or /var/tmp in a unit with PrivateTmp=yes (a root, the config, an export
    folder, the metrics file): the service sees its own empty /tmp there, never that path. One
    line a path, naming every unit that has it (not a line per unit and path)."""
    units_of: dict[str, list[str]] = {}
    for name, text in units.items():
        if "\nPrivateTmp=yes" not in "\n" + text:
            continue
        words = [w.lstrip("-").strip('"') for line in text.splitlines()
                 if line.startswith(("ExecStart=", "ReadWritePaths=")) for w in line.split("=", 1)[1].split()]
        for word in dict.fromkeys(words):
            if any(word == tmp or word.startswith(tmp + "/") for tmp in PRIVATE_TMP):
                units_of.setdefault(word, []).append(name)
    said = []
    for word, names in units_of.items():
        tmp = "/var/tmp" if word.startswith("/var/tmp") else "/tmp"
        unit = "the unit" if len(names) == 1 else "the units"
        said.append(f"{', '.join(names)}: {word} is under {tmp}, and {unit} "
                    + ("has" if len(names) == 1 else "have")
                    + " PrivateTmp=yes: a service gets an empty /tmp of its own and never sees that path; move "
                    f"it out of /tmp (or drop PrivateTmp= from {unit})")
    return said


@click.group(cls=SuggestingGroup)
def systemd():
    """systemd units for hermes-admin."""


@systemd.command("print")
@click.option("--user", is_flag=True, help="The user-unit variants (your own ~/.hermes).")
@click.option("--dir", "target", type=click.Path(file_okay=False), help="Write the units into this folder instead.")
@pass_app
def print_units(app: App, user: bool, target: str | None):
    """The units with the real path of this hermes-admin and the global options given (--config,
    --root, --all-users, --lock-wait): they run the policy `run --dry-run` shows with those."""
    units = render_units(user, executable(), unit_inputs(app))
    for line in private_tmp_warnings(units):
        report.warn(line)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            (Path(target) / name).write_text(text)
            click.echo(f"wrote {Path(target) / name}", err=True)
        return
    for name, text in units.items():
        click.echo(f"# ---- {name} ----")
        click.echo(text)

"""`hermes-admin config check` and `config show [--origin]`: every layer of the configuration checked,
each problem with its file and line (as `nginx -t`), each effective value with where it came from
(as `git config --show-origin`). Both read; neither changes anything."""

from __future__ import annotations

import re
from pathlib import Path

import click

from hermes_admin import exitcodes, report, tables, yamlfile
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.host import config as admin_config
from hermes_admin.protocol import ShowPolicy
from hermes_admin.tables import Column


@click.group()
def config():
    """Check the admin config, presets and profiles' config.yaml; show effective values."""


def _text(path) -> str | None:
    """A config file's text, to find a key's line: a plain file only (a FIFO is never waited on)."""
    from hermes_admin.profile.engine.state_folder import read_plain

    try:
        return read_plain(path, 1 << 20, follow=True, head=True).decode("utf-8", "replace") if path else None
    except OSError:
        return None


def _where(path, text: str | None, key: str | None, message: str) -> dict:
    """A problem with its file and line: the line YAML reported, else where the key is written."""
    said = re.search(r"\(line (\d+)\)", message)
    line = int(said.group(1)) if said else yamlfile.line_of(text, key) if text and key else None
    return {"file": str(path) if path else None, "line": line, "message": message}


def admin_problems(app: App) -> tuple[admin_config.AdminConfig | None, list[dict]]:
    """The admin config itself, its schedule, and each of its policy layers (defaults, profiles.NAME and
    their presets), every problem of each, not only the first."""
    from hermes_admin.profile import policy as rules

    path = Path(app.config_path).expanduser() if app.config_path else next(
        (p for p in admin_config.candidate_paths() if p.is_file()), None)
    text = _text(path)
    try:
        loaded = admin_config.load(app.config_path)
    except admin_config.ConfigError as exc:
        unknown = re.search(r"unknown key\(s\) (\S+?)[ ,]", str(exc))
        return None, [_where(path, text, unknown.group(1) if unknown else None, str(exc))]
    app.use_config(loaded)
    found = []
    if loaded.metrics_file is not None and not isinstance(loaded.metrics_file, str):
        found.append(_where(path, text, "metrics_file", f"{path}: metrics_file must be a path"))
    if loaded.schedule:
        from hermes_admin.host.daemon import ScheduleError, trigger_for
        for task, spec in loaded.schedule.items():
            try:
                trigger_for(str(task), spec)
            except ScheduleError as exc:
                found.append(_where(path, text, f"schedule.{task}", f"{path}: {exc}"))
    names = sorted(map(str, loaded.profiles)) or [""]
    for name in names:
        try:
            layers = admin_config.policy_layers(loaded, name)
        except admin_config.ConfigError as exc:
            found.append(_where(path, text, f"profiles.{name}.preset", str(exc)))
            layers = {k: v for k, v in [("entry", loaded.profiles.get(name)), ("defaults", loaded.defaults)] if v}
            layers.update(entry_where=f"{path}: profiles.{name}", defaults_where=f"{path}: defaults")
        for where, key, message in rules.problems(layers, None):
            preset = layers.get("preset_where")
            if preset and where == preset:
                found.append(_where(preset, _text(preset), key, message))
            else:
                section = where.split(": ", 1)[1] if ": " in where else ""
                found.append(_where(path, text, f"{section}.{key}" if key else section, message))
    unique = list({(p["file"], p["line"], p["message"]): p for p in found}.values())
    return loaded, unique


def _line(problem: dict) -> str:
    """`FILE:LINE: message`, as compilers and `nginx -t` say it (the file said once)."""
    message, place = problem["message"], problem.get("file")
    if not place:
        return message
    if message.startswith(f"{place}: "):
        message = message[len(place) + 2:]
    return f"{place}:{problem['line']}: {message}" if problem.get("line") else f"{place}: {message}"


@config.command("check")
@profile_option
@json_option
@pass_app
def check(app: App, profiles, as_json: bool):
    """Check every layer: the admin config, its schedule and presets, each profile's config.yaml (the
    keys hermes-admin reads). One line per problem, with its file and line."""
    loaded, problems = admin_problems(app)
    warnings: list[dict] = []
    checked = [str(loaded.path)] if loaded is not None and loaded.path else []
    if loaded is not None:
        found = app.discover(profiles)
        # Without the admin layers (checked above): a profile whose preset is missing is checked too.
        answer = app.work(ShowPolicy(), found.profiles)
        admin_level = bool(problems)  # then a profile's policy fails on them too: said once, above
        for row in answer.data.get("policy", []):
            problems += [p for p in row["problems"] if p["file"] or not admin_level]
            warnings += row["warnings"]
            checked.append(str(Path(row["home"]) / "config.yaml"))
        problems += [{"file": None, "line": None, "message": m} for m in answer.errors if not admin_level]
        warnings += [{"file": None, "line": None, "message": m} for m in answer.warnings]
    code = exitcodes.CONFIG if problems else exitcodes.WARNINGS if warnings else exitcodes.OK
    if code != exitcodes.CONFIG and loaded is not None and app.failed_discovery(found, profiles):
        code = exitcodes.PROFILE_FAILED  # a root or profile named that is not there
    if as_json:
        report.emit_json({"ok": not problems, "problems": problems, "warnings": warnings, "checked": checked})
    for problem in problems:  # on stderr, as `nginx -t` and compilers say them (and in the JSON's errors)
        report.error(_line(problem))
    for warning in warnings:
        report.warn(_line(warning))
    if not as_json:
        state = f"{len(problems)} problem(s)" if problems else "ok"
        report.note(f"config check: {state}" + (f", {len(warnings)} warning(s)" if warnings else "")
                    + f" ({len(checked)} file(s) read)")
    raise click.exceptions.Exit(code)


@config.command("show")
@click.option("--origin", is_flag=True, help="Also where each value came from (a file and key, or built-in).")
@profile_option
@json_option
@pass_app
def show(app: App, origin: bool, profiles, as_json: bool):
    """Each profile's effective policy, value by value."""
    found = app.discover(profiles)
    answer = app.work(ShowPolicy(), found.profiles, with_policy=True)
    labels = app.labels()
    rows = answer.data.get("policy", [])
    if as_json:
        report.emit_json({"profiles": [{k: r[k] for k in ("profile", "home", "values", "origins")} for r in rows],
                          "errors": answer.errors})
    else:
        columns = [Column("profile", whole=True), Column("key", whole=True), Column("value", whole=True)]
        lines = []
        for row in rows:
            for key, value in (row["values"] or {}).items():
                if key == "description":
                    continue
                shown = "-" if value is None else str(value).lower() if isinstance(value, bool) else \
                    f"{value:g}" if isinstance(value, float) else str(value)
                lines.append([labels.get(row["home"], row["profile"]), key, shown]
                             + ([(row["origins"] or {}).get(key)] if origin else []))
            for problem in row["problems"]:
                report.error(f"profile '{labels.get(row['home'], row['profile'])}': {_line(problem)}")
        tables.show(columns + ([Column("origin", whole=True)] if origin else []), lines)
    for message in answer.errors:
        report.error(message)
    failed = any(r["problems"] for r in rows)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles, failed=failed))

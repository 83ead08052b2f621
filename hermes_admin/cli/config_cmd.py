"""`hermes-admin config check` and `config show [--origin]`: every layer of the configuration checked,
each problem with its file and line (as `nginx -t`), each effective value with where it came from
(as `git config --show-origin`). Both read; neither changes anything."""

from __future__ import annotations

from pathlib import Path

import click

from hermes_admin import exitcodes, report, tables
from hermes_admin.cli.context import App, json_option, pass_app, profile_option
from hermes_admin.cli.groups import SuggestingGroup
from hermes_admin.cli.values import shown_value
from hermes_admin.host import config as admin_config
from hermes_admin.host.runner import UNKNOWN_PROFILE
from hermes_admin.problems import WARNING
from hermes_admin.protocol import ShowPolicy
from hermes_admin.tables import Column
from hermes_admin.trust import expand_user


@click.group(cls=SuggestingGroup)
def config():
    """Check the admin config, presets and profiles' config.yaml; show effective values."""


def admin_problems(app: App) -> tuple[admin_config.AdminConfig | None, list[dict]]:
    """The admin config itself, its schedule, and each of its policy layers (defaults, profiles.NAME and
    their presets: the check every command applies, host/config.policy_problems), every problem of
    each, not only the first."""
    path = Path(expand_user(app.config_path)) if app.config_path else next(
        (p for p in admin_config.candidate_paths() if p.is_file()), None)
    text = admin_config.text_of(path)
    try:
        loaded = admin_config.load(app.config_path)
    except admin_config.ConfigError as exc:
        return None, [admin_config.problem_at(path, text, exc.key, str(exc), exc.line).as_dict()]
    found = [p.as_dict() for p in admin_config.policy_problems(loaded)]
    try:  # Hermes' managed scope, which every command applies over the profiles' own config
        loaded = admin_config.with_managed(loaded)
    except admin_config.ConfigError as exc:
        found.append(admin_config.Problem(None, None, str(exc)).as_dict())
    app.use_config(loaded)
    if loaded.metrics_file is not None and not isinstance(loaded.metrics_file, str):
        found.append(admin_config.problem_at(path, text, "metrics_file", f"{path}: metrics_file must be a path").as_dict())
    elif loaded.metrics_file:
        from hermes_admin.host.metrics import refused
        why = refused(Path(loaded.metrics_file))
        if why:
            found.append(admin_config.problem_at(path, text, "metrics_file",
                                                 f"{path}: metrics_file {loaded.metrics_file}: refusing it as root: "
                                                 f"{why}").as_dict())
    if loaded.schedule:
        from hermes_admin.host.daemon import ScheduleError, trigger_for
        for task, spec in loaded.schedule.items():
            try:
                trigger_for(str(task), spec)
            except ScheduleError as exc:
                found.append(admin_config.problem_at(path, text, f"schedule.{task}", f"{path}: {exc}").as_dict())
    unique = list({(p["file"], p["line"], p["message"]): p for p in found}.values())
    return loaded, unique


def _line(problem: dict) -> str:
    """`FILE:LINE: message`, as compilers and `nginx -t` say it (the file said once)."""
    return str(admin_config.Problem(problem.get("file"), problem.get("line"), problem["message"]))


@config.command("check")
@profile_option
@json_option
@pass_app
def check(app: App, profiles, as_json: bool):
    """Check every layer: the admin config, its schedule and presets, each profile's config.yaml (the
    keys hermes-admin reads). One line per problem, with its file and line."""
    loaded, problems = admin_problems(app)
    warnings: list[dict] = []
    # the files read: the admin config (refused or not), its presets, the profiles' config.yaml there is
    checked = [str(loaded.path)] if loaded is not None and loaded.path else [p["file"] for p in problems if p["file"]]
    if loaded is not None:
        checked += _presets(loaded) + ([loaded.managed.file] if loaded.managed is not None else [])
        found = app.discover(profiles)
        admin_level = bool(problems)  # then a profile's policy fails on them too: said once, above
        # One look at each profile, as `run` reads it: with the admin layers, unless they are wrong
        # (then without them, so that each profile's own config.yaml is checked all the same).
        answer = app.work(ShowPolicy(), found.profiles, with_policy=not admin_level)
        rows = answer.data.get("policy", [])
        for row in rows:
            problems += [p for p in row["problems"] if p["file"] or not admin_level]
            warnings += row["warnings"]
            if row.get("read") is True:
                checked.append(str(Path(row["home"]) / "config.yaml"))
        if not admin_level:  # which profiles the admin layers reach, each value's origin
            warnings += [w.as_dict() for w in _as_run_reads_it(loaded, answer)]
        problems += [{"file": None, "line": None, "message": m} for m in answer.errors if not admin_level]
        warnings += [{"file": None, "line": None, "message": p.text()} for p in answer.problems
                     if p.severity == WARNING and p.kind != UNKNOWN_PROFILE]  # that one said with its line, above
    checked = list(dict.fromkeys(checked))
    notes = _no_hermes(rows if loaded is not None else []) if not app.quiet else []
    code = exitcodes.CONFIG if problems else exitcodes.WARNINGS if warnings else exitcodes.OK
    if code != exitcodes.CONFIG and loaded is not None and app.failed_discovery(found, profiles):
        code = exitcodes.PROFILE_FAILED  # a root or profile named that is not there
    if as_json:
        report.emit_json({"ok": not problems, "problems": problems, "warnings": warnings, "checked": checked,
                          "notes": notes})
    for problem in problems:  # on stderr, as `nginx -t` and compilers say them (and in the JSON's errors)
        report.error(_line(problem))
    for warning in warnings:
        report.warn(_line(warning))
    if not as_json:
        for note in notes:
            report.note(note)
        state = f"{len(problems)} problem(s)" if problems else "ok"
        report.note(f"config check: {state}" + (f", {len(warnings)} warning(s)" if warnings else "")
                    + f"; read {len(checked)} file(s): " + ", ".join(checked))
    raise click.exceptions.Exit(code)


def _no_hermes(rows: list[dict]) -> list[str]:
    """What the installation lookups said (none found for a root, a configured interpreter refused),
    each line once: without a Hermes, the values `built-in` are hermes-admin's copy of Hermes
    0.19.0's defaults, not those of the Hermes the profile runs, which `config show` must not hide."""
    said = []
    for row in rows:
        hermes = row.get("hermes") or {}
        for line in hermes.get("notes") or []:
            if line not in said:
                said.append(line)
        if hermes and hermes.get("installation") is None and not hermes.get("own_interpreter_chosen_in"):
            line = ("without it, the defaults used are Hermes 0.19.0's as hermes-admin knows them (`built-in` in "
                    "`config show --origin`), not those of the Hermes these profiles run")
            if line not in said:
                said.append(line)
    return said


def _presets(loaded: admin_config.AdminConfig) -> list[str]:
    """The preset files the admin config's entries name, as read (one that cannot be is a problem)."""
    found = []
    for entry in loaded.profiles.values():
        if isinstance(entry, dict) and entry.get("preset") is not None:
            try:
                found.append(str(admin_config.load_preset(str(entry["preset"]))[1]))
            except admin_config.ConfigError:
                pass
    return found


def _as_run_reads_it(loaded: admin_config.AdminConfig, applied) -> list[admin_config.Problem]:
    """What `run` warns of, said by the check too: a `profiles:` entry that reaches no profile (a typo
    leaves the profile on the defaults), a `defaults:` value nobody takes, and an export_keep_days of 0
    (no restore copy is kept past the run: `exports prune --older-than 0` asks for --force)."""
    text = admin_config.text_of(loaded.path)
    found = [admin_config.problem_at(p.path, text, p.key, p.message) for p in applied.problems
             if p.kind == UNKNOWN_PROFILE]
    rows = applied.data.get("policy", [])
    for row in rows:
        if (row.get("values") or {}).get("export_keep_days") == 0:
            found.append(admin_config.Problem(None, None, f"profile '{row['profile']}': export_keep_days 0 "
                                              f"({(row.get('origins') or {}).get('export_keep_days')}): every export "
                                              "is removed when its run ends, so nothing deleted can be restored"))
    return found + _defaults_never_used(loaded, rows)


def _defaults_never_used(loaded: admin_config.AdminConfig, rows: list[dict]) -> list[admin_config.Problem]:
    """A `defaults:` value that no profile in view takes (each sets the key itself): a warning, since
    changing it changes nothing (a typo of the profile's name, or a forgotten default?)."""
    defaults = admin_config.defaults_only(loaded).defaults
    used = [r["origins"] for r in rows if r.get("origins")]
    if not used or not loaded.path:
        return []
    text = admin_config.text_of(loaded.path)
    return [admin_config.problem_at(loaded.path, text, defaults.origin.path_of(key),
                                    f"{defaults.origin.of(key)} is overridden in every profile ({len(used)}): it is not used")
            for key in map(str, loaded.defaults)
            if all(origins.get(key) not in (None, defaults.origin.of(key)) for origins in used)]


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
    notes = _no_hermes(rows) if not app.quiet else []
    if as_json:
        report.emit_json({"profiles": [{k: r.get(k) for k in ("profile", "home", "values", "origins", "hermes")}
                                       for r in rows], "notes": notes, "errors": answer.errors})
    else:
        columns = [Column("profile", whole=True), Column("key", whole=True), Column("value", whole=True)]
        lines = []
        for row in rows:
            for key, value in (row["values"] or {}).items():
                shown = shown_value(key, value, row["home"])
                lines.append([labels.get(row["home"], row["profile"]), key, shown]
                             + ([(row["origins"] or {}).get(key)] if origin else []))
            for problem in row["problems"]:
                report.error(f"profile '{labels.get(row['home'], row['profile'])}': {_line(problem)}")
        tables.show(columns + ([Column("origin", whole=True)] if origin else []), lines)
        for note in notes:  # after the table: what its `built-in` values are when no Hermes was found
            report.note(note)
    for message in answer.errors:
        report.error(message)
    failed = any(r["problems"] for r in rows)
    raise click.exceptions.Exit(app.exit_code(answer, found, profiles, failed=failed))

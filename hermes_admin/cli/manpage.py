"""`hermes-admin.1`, generated from the CLI itself (every command, its help and options), so the
man page never drifts from `--help`. `python -m hermes_admin.cli.manpage` writes man/hermes-admin.1;
tests/unit/test_manpage.py checks the file against what this writes."""

from __future__ import annotations

from pathlib import Path

import click

from hermes_admin import __version__, exitcodes

# the shipped page, which the tests compare with what the CLI generates
PAGE = Path(__file__).resolve().parents[2] / "man" / "hermes-admin.1"

EXIT_STATUS = [  # exitcodes.py in words, the README's table
    (exitcodes.OK, "done (a profile without a store yet is nothing to do)"),
    (exitcodes.WARNINGS, "done, with warnings (a plugin failed, units skipped, a typo in a config); or a "
                         "confirmation was answered no, and nothing was changed; status: a last run had warnings"),
    (exitcodes.PROFILE_FAILED, "a profile, store or root could not be processed, or was refused for safety; "
                               "the others were; status: a last run failed"),
    (exitcodes.LOCKED, "a lock is held: another hermes-admin run, Hermes' own maintenance, or a process that "
                       "keeps a store's write lock past --lock-wait (named); status: a last run found one"),
    (exitcodes.USAGE, "usage error (EX_USAGE)"),
    (exitcodes.INTERNAL, "internal error (EX_SOFTWARE): a bug; the traceback under -v"),
    (exitcodes.CONFIG, "the admin config cannot be used (EX_CONFIG); nothing was done"),
    (exitcodes.INTERRUPTED, "interrupted (SIGINT, SIGTERM), after reporting what was done; Ctrl-C while a "
                            "prompt's counts are made: no prompt, nothing done"),
]
ENVIRONMENT = [  # every variable hermes-admin reads
    ("HERMES_HOME", "the Hermes root (or a profile's folder, mapped back to its root) when no --root is given"),
    ("HERMES_ADMIN_CONFIG", "the admin config file, when no --config is given"),
    ("HERMES_SAFE_MODE", "1: no plugin is loaded, as in Hermes"),
    ("HERMES_ADMIN_PROCESSES", "1: every profile in one process"),
    ("NO_COLOR", "no colour, even on a terminal"),
]
FILES = [  # every file of ours, and the configuration it reads
    ("/etc/hermes-admin/config.yaml", "the site's admin config (after the user and site config folders)"),
    ("<home>/.hermes-admin/", "per profile: the lock, the outbox, last-run.json (read by status), exports/"),
]


def _roff(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line[:1] in (".", "'") else line for line in text.splitlines())


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    lines = []
    for param in command.get_params(ctx):
        # Options only, and never --help (said once, not under every command): what click writes
        # for the rest (arguments, its help option's name) changes between its releases, and the
        # committed page must be what any click the README installs generates (test_manpage.py).
        if not isinstance(param, click.Option) or param.hidden or "--help" in param.opts:
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        lines += [".TP", f"\\fB{_roff(names)}\\fR", _roff(text)]
    return lines


def _commands(group: click.Group, ctx: click.Context, prefix: str) -> list[str]:
    lines = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        if isinstance(command, click.Group):
            lines += _commands(command, sub, f"{prefix}{name} ")
            continue
        usage = " ".join(command.collect_usage_pieces(sub))
        lines += [".SS", f"\\fB{_roff(prefix + name)}\\fR {_roff(usage)}",
                  _roff(" ".join((command.help or "").split("\n\n")[0].split()))]
        rest = "\n\n".join((command.help or "").split("\n\n")[1:]).strip()
        if rest:
            lines += [".PP", _roff(" ".join(rest.split()))]
        lines += _options(command, sub)
    return lines


def render() -> str:
    from hermes_admin.cli.main import cli

    ctx = click.Context(cli, info_name="hermes-admin")
    lines = [f'.TH HERMES\\-ADMIN 1 "" "hermes-admin {__version__}" "User Commands"',
             ".SH NAME", "hermes\\-admin \\- maintenance for Hermes Agent installations",
             ".SH SYNOPSIS", "\\fBhermes\\-admin\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
             ".SH DESCRIPTION", _roff(" ".join((cli.help or "").split())),
             _roff("It keeps every profile's SQLite store of every Hermes root in shape: retention purges, "
                   "empty-session and ghost sweeps, auto-archive, profile repair, with plugin hooks. Durations "
                   "read 90 (days), 90d, 12h, 1w2d, 3mo; times are ISO 8601, local unless they name a zone."),
             ".SH GLOBAL OPTIONS", _roff("They may also follow the command: hermes-admin run -q --root PATH."),
             *_options(cli, ctx),
             ".SH COMMANDS", *_commands(cli, ctx, ""),
             ".SH EXIT STATUS"]
    for code, text in EXIT_STATUS:
        lines += [".TP", f"\\fB{code}\\fR", _roff(text)]
    lines.append(".SH ENVIRONMENT")
    for name, text in ENVIRONMENT:
        lines += [".TP", f"\\fB{_roff(name)}\\fR", _roff(text)]
    lines.append(".SH FILES")
    for name, text in FILES:
        lines += [".TP", f"\\fI{_roff(name)}\\fR", _roff(text)]
    lines += [".SH SEE ALSO", "\\fBsystemd.timer\\fR(5), \\fBsystemctl\\fR(1)"]
    return "\n".join(lines) + "\n"


def write() -> None:
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(render())


if __name__ == "__main__":
    write()

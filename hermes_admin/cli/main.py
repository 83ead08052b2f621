"""`hermes-admin`: the command group and its global options (docs/design.md §11)."""

from __future__ import annotations

import signal
import sys


def _stop_request(signum, frame) -> None:
    """SIGINT/SIGTERM: stop after the current transaction and report what was done; a second one aborts."""
    from hermes_admin import stopping

    if stopping.requested() and signum == signal.SIGINT:
        raise KeyboardInterrupt
    stopping.request()
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    print(f"hermes-admin: {name}: stopping after the current transaction (Ctrl-C again to abort)",
          file=sys.stderr, flush=True)


# First thing, before the imports: a stop that comes while the command starts is a stop request too.
signal.signal(signal.SIGTERM, _stop_request)
signal.signal(signal.SIGINT, _stop_request)

import click  # noqa: E402

from hermes_admin import __version__, exitcodes, stopping  # noqa: E402
from hermes_admin.cli.groups import SuggestingGroup  # noqa: E402
from hermes_admin.cli.params import LOCK_WAIT  # noqa: E402

# name -> (module, attribute, short help). A command's module is imported only when it runs, so
# `--help` and `--version` load click and nothing else (tests/unit/test_cli.py checks the help texts).
COMMANDS = {
    "profiles": ("profiles_cmd", "profiles", "List every profile with its health and counts."),
    "sessions": ("sessions_cmd", "sessions", "Look at, delete or archive sessions."),
    "purge": ("maintain_cmd", "purge",
              "Delete ended, unpinned sessions past retention, whole lineages at a time (reason `prune`)."),
    "sweep-empty": ("maintain_cmd", "sweep_empty",
                    "Delete ended sessions that never got a message (reason `empty_sweep`)."),
    "prune-ghosts": ("maintain_cmd", "prune_ghosts",
                     "Delete TUI ghosts and rows or files whose session is gone (reason `ghost_prune`)."),
    "archive-inactive": ("maintain_cmd", "archive_inactive",
                         "Archive idle lineages, open ones included; pinned never (silent: no event)."),
    "run": ("maintain_cmd", "run", "One pass of every task the policy enables: what the timer calls."),
    "repair": ("repair_cmd", "repair_cmd",
               "Find broken profiles: folders, permissions, dangling parents, labels, rows in the wrong store."),
    "restore": ("exports_cmd", "restore",
                "Put the units of an export back; a session id that exists is left alone and reported."),
    "exports": ("exports_cmd", "exports", "The exports every delete writes first (restorable with `restore FILE`)."),
    "plugins": ("plugins_cmd", "plugins", "Hermes plugins that receive `on_session_delete`."),
    "status": ("status_cmd", "status", "The last run per profile and the next scheduled one; changes nothing."),
    "usage": ("usage_cmd", "usage", "Where each profile's bytes are: tables, FTS indexes, free pages, WAL, files."),
    "compact": ("compact_cmd", "compact", "Give each store's free pages back to the file system."),
    "config": ("config_cmd", "config", "Check the admin config, presets and profiles' config.yaml; show effective values."),
    "daemon": ("ops_cmd", "daemon", "Run the maintenance tasks on the admin config's `schedule:` until stopped."),
    "systemd": ("ops_cmd", "systemd", "systemd units for hermes-admin."),
    "demo": ("demo_cmd", "demo", "Build a throwaway Hermes root with several profiles and run on it."),
}


class LazyGroup(SuggestingGroup):
    """Subcommands imported on use; the listing in --help comes from COMMANDS."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        from importlib import import_module
        module, attribute, _ = COMMANDS[name]
        return accept_global_options(getattr(import_module(f"hermes_admin.cli.{module}"), attribute))

    def invoke(self, ctx):
        """The command, and with --json its one document written as it ends, whatever ended it."""
        from hermes_admin import report

        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        args = args[:args.index("--")] if "--" in args else args
        if "--json" not in args or {"--help", "-h"} & set(args):  # help is text, asked for
            return super().invoke(ctx)
        report.gather_json()
        code = exitcodes.INTERNAL
        try:
            result = super().invoke(ctx)
            code = result if isinstance(result, int) else exitcodes.OK
            return result
        except click.exceptions.Exit as exc:
            code = exc.exit_code
            raise
        except click.ClickException as exc:
            code = exitcodes.USAGE if exc.exit_code == 2 else exc.exit_code
            report.record_error(exc.format_message())
            raise
        except (click.exceptions.Abort, KeyboardInterrupt):
            code = exitcodes.INTERRUPTED
            raise
        except Exception as exc:
            report.record_error(f"internal error: {type(exc).__name__}: {exc}")
            raise
        finally:
            report.finish_json(final_code(code))

    def format_commands(self, ctx, formatter):
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, _, short) in COMMANDS.items()])


# The global options, once: before the command as the group's, and after it too, on every command
# (`hermes-admin run -q`, `purge --root X --lock-wait 30`), hidden there so each command's help
# stays its own. (declarations, settings) each.
GLOBAL_OPTIONS = [
    (("--root", "roots"), dict(multiple=True, metavar="PATH", type=click.Path(),
                               help="A Hermes root (repeatable). Default: $HERMES_HOME's root, else ~/.hermes.")),
    (("--config", "config_path"), dict(metavar="FILE", type=click.Path(),
                                       help="Admin config (default: $HERMES_ADMIN_CONFIG, the user/site config dir, "
                                            "/etc/hermes-admin).")),
    (("--all-users",), dict(is_flag=True, help="Also every local user's default root.")),
    (("-v", "--verbose"), dict(count=True, help="More detail on stderr.")),
    (("-q", "--quiet"), dict(is_flag=True, help="Only what changed, warnings and errors (for timers).")),
    (("--plain",), dict(is_flag=True, help="Tables as tab-separated lines, no box drawing (as when piped).")),
    (("--lock-wait",), dict(type=LOCK_WAIT, metavar="DURATION",
                            help="How long a write waits for a store another process holds without progress "
                                 "(default: the policy's lock_wait, 300; a bare number is seconds: 30, 5s, 2m), "
                                 "then exit 3 naming it.")),
]


def global_options(f):
    for declarations, settings in reversed(GLOBAL_OPTIONS):
        f = click.option(*declarations, **settings)(f)
    return f


def _given_after(ctx: click.Context, param: click.Parameter, value) -> None:
    """A global option written after the command: into the App the group made from those before it
    (the group's callback runs before a command's options are parsed)."""
    if value in (None, False, 0, ()):
        return
    from hermes_admin import tables
    from hermes_admin.cli.context import App

    app = ctx.find_object(App)
    if param.name == "roots":
        app.roots_given += tuple(value)
    elif param.name == "verbose":
        app.verbose += value
    elif param.name == "plain":
        tables.PLAIN = True
    else:
        setattr(app, param.name, value)


def accept_global_options(command: click.Command) -> click.Command:
    """Give `command` (and a group's commands) the global options, once."""
    if getattr(command, "_takes_global_options", False):
        return command
    command._takes_global_options = True
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            accept_global_options(command.get_command(click.Context(command), name))
        return command
    for declarations, settings in GLOBAL_OPTIONS:
        command.params.append(click.Option(declarations, **settings, hidden=True, expose_value=False,
                                           callback=_given_after))
    return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Global options may come after the command too: hermes-admin run -q --root PATH.")
@global_options
@click.version_option(__version__, prog_name="hermes-admin")
@click.pass_context
def cli(ctx: click.Context, roots, config_path, all_users, verbose, quiet, plain, lock_wait):
    """Maintenance for Hermes Agent installations: every profile of every root."""
    from hermes_admin import tables
    from hermes_admin.cli.context import App

    tables.PLAIN = plain
    ctx.obj = App(roots_given=tuple(roots), config_path=config_path, all_users=all_users, verbose=verbose,
                  quiet=quiet, lock_wait=lock_wait)
    ctx.call_on_close(ctx.obj.close)


def help_text_source() -> str:
    """help_text.py as it must read: `hermes-admin --help` as click prints it on a terminal of
    HELP_COLUMNS or more, which entry.py answers with before click is imported. tests/unit/test_cli.py
    checks the file against this; `write_help_text()` writes it anew."""
    from hermes_admin.cli import HELP_COLUMNS

    with click.Context(cli, info_name="hermes-admin", terminal_width=HELP_COLUMNS - 2, **cli.context_settings) as ctx:
        text = ctx.get_help() + "\n"
    assert '"""' not in text and "\\" not in text, "the help text must fit in a plain triple-quoted string"
    return ('"""`hermes-admin --help` on a terminal of 80 columns or more, for cli/entry.py. Written by\n'
            'cli/main.py:write_help_text(); do not edit."""\n\nTEXT = """\\\n' + text + '"""\n')


def write_help_text() -> None:
    from pathlib import Path

    Path(__file__).with_name("help_text.py").write_text(help_text_source())


def main() -> None:
    """The console script: click's own handling; a stop request reports what was done and exits 130;
    usage errors exit 64 and internal errors 70, never a code that means "a profile failed" (docs/design.md §11)."""
    from hermes_admin.cli.pipes import guard_stdout

    signal.signal(signal.SIGTERM, _stop_request)
    signal.signal(signal.SIGINT, _stop_request)
    guard_stdout()
    _exit(_run())


def _exit(code: int) -> None:
    """Leave with `code` once everything is written: no signal during interpreter shutdown (when
    Python no longer runs our handlers) can turn a finished, reported run into a killed one."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run() -> int:
    try:
        code = cli.main(prog_name="hermes-admin", standalone_mode=False)
    except click.exceptions.Abort as abort:
        interrupted = isinstance(abort.__cause__, KeyboardInterrupt) or stopping.requested()
        # A prompt's Ctrl-C or end of input: the question's line is still open (the terminal shows `^C`)
        click.echo("hermes-admin: interrupted" if interrupted else
                   "\nhermes-admin: no answer (Ctrl-C or end of input): nothing was changed", err=True)
        return exitcodes.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("hermes-admin: interrupted", err=True)
        return exitcodes.INTERRUPTED
    except click.exceptions.UsageError as exc:
        exc.show()
        _json_for(exc, exitcodes.USAGE)
        return exitcodes.USAGE
    except click.ClickException as exc:
        exc.show()
        code = exitcodes.USAGE if exc.exit_code == 2 else exc.exit_code
        _json_for(exc, code)
        return code
    except Exception:  # a bug of ours: one line, the traceback only under -v
        import traceback
        if "-v" in sys.argv or "--verbose" in sys.argv or any(a.startswith("-vv") for a in sys.argv):
            traceback.print_exc()
        kind, value = sys.exc_info()[:2]
        click.echo(f"hermes-admin: internal error: {kind.__name__}: {value} (run with -v for the traceback)",
                   err=True)
        return exitcodes.INTERNAL
    return final_code(code)


def _json_for(exc: click.ClickException, code: int) -> None:
    """A usage error before any command ran (`hermes-admin --bogus profiles --json`): the one
    document --json promises still goes out, holding the error."""
    from hermes_admin import report

    args = sys.argv[1:]
    args = args[:args.index("--")] if "--" in args else args
    if "--json" in args and not report.json_written:
        report.gather_json()
        report.record_error(exc.format_message())
        report.finish_json(code)


def final_code(code) -> int:
    """A stop request turns a finished run into an interrupted one (what was done was reported)."""
    if stopping.requested() and code in (None, exitcodes.OK, exitcodes.WARNINGS):
        return exitcodes.INTERRUPTED
    return code if isinstance(code, int) else exitcodes.OK

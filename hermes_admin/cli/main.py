"""`hermes-admin`: the command group and its global options (design §8)."""

from __future__ import annotations

import signal
import sys

import click

from hermes_admin import __version__, exitcodes, stopping
from hermes_admin.cli.context import App
from hermes_admin.cli.demo_cmd import demo
from hermes_admin.cli.ops_cmd import daemon, systemd
from hermes_admin.cli.maintain_cmd import archive_inactive, prune_ghosts, purge, run, sweep_empty
from hermes_admin.cli.plugins_cmd import plugins
from hermes_admin.cli.profiles_cmd import profiles
from hermes_admin.cli.repair_cmd import repair_cmd
from hermes_admin.cli.sessions_cmd import sessions


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", "roots", multiple=True, metavar="PATH", type=click.Path(),
              help="A Hermes root (repeatable). Default: $HERMES_HOME's root, else ~/.hermes.")
@click.option("--config", "config_path", metavar="FILE", type=click.Path(),
              help="Admin config (default: $HERMES_ADMIN_CONFIG, the user/site config dir, /etc/hermes-admin).")
@click.option("--all-users", is_flag=True, help="Also every local user's default root.")
@click.option("-v", "--verbose", count=True, help="More detail on stderr.")
@click.version_option(__version__, prog_name="hermes-admin")
@click.pass_context
def cli(ctx: click.Context, roots, config_path, all_users, verbose):
    """Maintenance for Hermes Agent installations: every profile of every root."""
    ctx.obj = App(roots_given=tuple(roots), config_path=config_path, all_users=all_users, verbose=verbose)
    ctx.call_on_close(ctx.obj.close)


cli.add_command(profiles)
cli.add_command(sessions)
cli.add_command(demo)
cli.add_command(plugins)
for command in (purge, sweep_empty, prune_ghosts, archive_inactive, run, daemon, systemd, repair_cmd):
    cli.add_command(command)


def _stop_request(signum, frame) -> None:
    """SIGINT/SIGTERM: stop after the current transaction and report what was done; a second one aborts."""
    if stopping.requested() and signum == signal.SIGINT:
        raise KeyboardInterrupt
    stopping.request()
    name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    click.echo(f"hermes-admin: {name}: stopping after the current transaction (Ctrl-C again to abort)", err=True)


def main() -> None:
    """The console script: click's own handling; a stop request reports what was done and exits 130;
    usage errors exit 64 and internal errors 70, never a code that means "a profile failed" (design §12)."""
    signal.signal(signal.SIGTERM, _stop_request)
    signal.signal(signal.SIGINT, _stop_request)
    try:
        code = cli.main(prog_name="hermes-admin", standalone_mode=False)
    except click.exceptions.Abort as abort:
        interrupted = isinstance(abort.__cause__, KeyboardInterrupt) or stopping.requested()
        click.echo("hermes-admin: interrupted" if interrupted else "Aborted: nothing was changed", err=True)
        sys.exit(exitcodes.INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("hermes-admin: interrupted", err=True)
        sys.exit(exitcodes.INTERRUPTED)
    except click.exceptions.UsageError as exc:
        exc.show()
        sys.exit(exitcodes.USAGE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exitcodes.USAGE if exc.exit_code == 2 else exc.exit_code)
    except Exception:  # a bug of ours: one line, the traceback only under -v
        import traceback
        if "-v" in sys.argv or "--verbose" in sys.argv or any(a.startswith("-vv") for a in sys.argv):
            traceback.print_exc()
        kind, value = sys.exc_info()[:2]
        click.echo(f"hermes-admin: internal error: {kind.__name__}: {value} (run with -v for the traceback)",
                   err=True)
        sys.exit(exitcodes.INTERNAL)
    if stopping.requested() and code in (None, exitcodes.OK, exitcodes.WARNINGS):
        code = exitcodes.INTERRUPTED
    sys.exit(code if isinstance(code, int) else exitcodes.OK)

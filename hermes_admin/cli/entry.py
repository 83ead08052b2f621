"""The console script. `--version` and the top-level `--help` are answered here, before click is
imported: importing click alone takes ~90 ms on a small host, and these two are what people and
scripts run most. Everything else goes to `main`, unchanged."""

from __future__ import annotations

import os
import sys

from hermes_admin import __version__
from hermes_admin.cli import HELP_COLUMNS


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        _say(f"hermes-admin, version {__version__}\n")
    elif args in (["--help"], ["-h"]) and _columns() >= HELP_COLUMNS:
        from hermes_admin.cli.help_text import TEXT

        _say(TEXT)
    else:
        from hermes_admin.cli.main import main as full

        full()


def _say(text: str) -> None:
    """Write it all; an output that cannot take it (a full disk, a closed pipe) is one line and the
    internal-error code, as for every other command."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head -1`: the reader had enough; that is no error
        os._exit(0)
    except (OSError, ValueError, AttributeError) as exc:
        from hermes_admin import exitcodes

        try:
            print(f"hermes-admin: internal error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finally:
            os._exit(exitcodes.INTERNAL)


def _columns() -> int:
    """The terminal's width as click measures it (shutil's rules: $COLUMNS, the terminal, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns or 80

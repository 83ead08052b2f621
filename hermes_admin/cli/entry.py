"""The console script. `--version` and the top-level `--help` are answered here, before click is
imported: importing click alone takes ~90 ms on a small host, and these two are what people and
scripts run most. Everything else goes to `main`, unchanged."""

from __future__ import annotations

import os
import sys

from hermes_admin import __version__

HELP_COLUMNS = 80  # click's help is as wide on every terminal this wide or wider


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        sys.stdout.write(f"hermes-admin, version {__version__}\n")
    elif args in (["--help"], ["-h"]) and _columns() >= HELP_COLUMNS:
        from hermes_admin.cli.help_text import TEXT

        sys.stdout.write(TEXT)
    else:
        from hermes_admin.cli.main import main as full

        full()
        return
    sys.stdout.flush()


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

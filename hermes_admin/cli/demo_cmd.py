"""`hermes-admin demo`: a throwaway root with several profiles, then a real look at it."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click

from hermes_admin.config import AdminConfig
from hermes_admin.cli.context import App, pass_app
from hermes_admin.cli.profiles_cmd import show_profiles
from hermes_admin.synth.scenario import build_root

# Two upstream-shaped profiles and one written by the PyPI release's schema.
DEMO_PROFILES = {"default": 30, "work": 30, "legacy": 22}


@click.command()
@click.option("--path", "target", type=click.Path(file_okay=False), default=None,
              help="Build the demo root here (must not exist). Default: a new temporary folder.")
@pass_app
def demo(app: App, target: str | None):
    """Build a throwaway Hermes root with several profiles and run on it."""
    root = Path(target) if target else Path(tempfile.mkdtemp(prefix="hermes-admin-demo-")) / "hermes"
    if root.exists():
        raise click.UsageError(f"{root} exists: the demo only builds new roots")
    build_root(root, DEMO_PROFILES, now=time.time())
    click.echo(f"Demo root built in {root} (profiles: {', '.join(DEMO_PROFILES)})", err=True)
    click.echo(f"Try: hermes-admin --root {root} sessions list -p work", err=True)
    # The demo ignores any admin config on this machine: it runs on its own root only.
    demo_app = App(roots_given=(str(root),), verbose=app.verbose, _config=AdminConfig())
    raise click.exceptions.Exit(show_profiles(demo_app, (), as_json=False))

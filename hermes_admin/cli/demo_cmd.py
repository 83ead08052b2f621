"""`hermes-admin demo`: a throwaway root with several profiles, then a real run over it."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import click
import yaml

from hermes_admin.cli import mutate
from hermes_admin.model import ORDER
from hermes_admin.cli.context import App, pass_app
from hermes_admin.cli.profiles_cmd import show_profiles
from hermes_admin.host.config import AdminConfig
from hermes_admin.host.config import shipped
from hermes_admin.protocol import Maintain, Request
from hermes_admin.synth.scenario import build_root

# Two upstream-shaped profiles and one written by the PyPI release's schema.
DEMO_PROFILES = {"default": 30, "work": 30, "legacy": 22}
# `work` maintains itself through its own config.yaml, `legacy` through the admin config's preset;
# `default` keeps Hermes' built-ins (no purge, no archive), so its old sessions stay.
WORK_SESSIONS = {"auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}
# `legacy` takes its policy from a preset, to show that layer too
ADMIN = {"profiles": {"legacy": {"preset": "standard"}}}


def _prepare(root: Path) -> list[str]:
    """Give `work` its policy and the shipped audit plugin; returns the demo's notes."""
    config = root / "profiles" / "work" / "config.yaml"
    data = yaml.safe_load(config.read_text()) or {}
    data["sessions"] = WORK_SESSIONS
    plugins = shipped("plugins")
    if plugins and (plugins / "deletion-audit").is_dir():
        shutil.copytree(plugins / "deletion-audit", config.parent / "plugins" / "deletion-audit")
        data["plugins"] = {"enabled": ["deletion-audit"]}
    config.write_text(yaml.safe_dump(data))
    return [f"work: sessions policy in {config}", "legacy: preset 'standard' from the admin config"]


def _run(app: App, dry_run: bool) -> int:
    found = app.discover()
    run = app.work(Maintain(Request(ORDER, time.time(), dry_run=dry_run)), found.profiles, with_policy=True)
    run.dry_run = dry_run
    try:
        mutate.finish(run, as_json=False, verb="run")
    except click.exceptions.Exit as done:
        return done.exit_code
    return 0


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
    notes = _prepare(root)
    click.echo(f"Demo root built in {root} (profiles: {', '.join(DEMO_PROFILES)})", err=True)
    for note in notes:
        click.echo(f"  {note}", err=True)
    # The demo ignores any admin config on this machine: it runs on its own root only.
    # Its plugin is the shipped deletion-audit, standard library only: it runs in our own interpreter
    # on purpose (`hermes_python: hermes-admin`), where a machine without Hermes has no other.
    demo_app = App(roots_given=(str(root),), verbose=app.verbose,
                   _config=AdminConfig(profiles=ADMIN["profiles"], hermes_python="hermes-admin"))
    show_profiles(demo_app, (), as_json=False)
    click.echo("\n== hermes-admin run --dry-run: what would go, and why ==")
    _run(demo_app, dry_run=True)
    click.echo("\n== hermes-admin run ==")
    code = _run(demo_app, dry_run=False)
    show_profiles(demo_app, (), as_json=False)
    audit = root / "profiles" / "work" / "logs" / "session-deletions.jsonl"
    if audit.exists():
        click.echo(f"\nThe deletion-audit plugin logged {len(audit.read_text().splitlines())} event(s) in {audit}")
    click.echo(f"\nTry: hermes-admin --root {root} sessions list -p work", err=True)
    raise click.exceptions.Exit(code)

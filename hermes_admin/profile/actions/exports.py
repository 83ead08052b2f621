"""`restore FILE` and `exports list`: what the engine exported before deleting, put back or shown."""

from __future__ import annotations

from pathlib import Path

from hermes_admin.profile.actions.common import Run, export_settings, with_engine
from hermes_admin.profile.engine import exports
from hermes_admin.profile.engine.engine import Engine, Result
from hermes_admin.profile.environment import Environment
from hermes_admin.problems import ERROR, WARNING, about
from hermes_admin.profile.installation import Installations
from hermes_admin.protocol import Profile


def restore(run: Run, profile: Profile, env: Environment, path: str, sessions: list[str] | None) -> None:
    """Units of an export back into this profile's store; a session id that exists is left alone."""
    def work(engine: Engine) -> list[Result]:
        result = Result(profile.name, "restore", None, engine.dry_run)
        result.notes.append("transcript files in sessions/ are not part of an export: they stay gone")
        engine.restore(Path(path), set(sessions) if sessions else None, result)
        return [result]

    with_engine(run, profile, env, work)


def listing(run: Run, profile: Profile, layers: dict | None, installations: Installations,
            export_dir: str | None) -> None:
    """This profile's exports: file, when, how many units, sessions and messages."""
    try:
        found = exports.listing(profile, export_settings(profile, layers, installations, export_dir))
    except exports.ExportError as exc:
        run.add(about(profile, ERROR, "exports", str(exc)))
        return
    for item in found:
        if "problem" in item:
            run.add(about(profile, WARNING, "export_file", item["problem"]))
        else:
            run.data.setdefault("exports", []).append(item)


def remove(run: Run, profile: Profile, layers: dict | None, installations: Installations,
           export_dir: str | None, files: list[str], dry_run: bool) -> None:
    """`exports prune`: remove the exports the host chose, each with its manifest; only files this
    profile's own listing holds (a name from elsewhere is never removed)."""
    import os

    try:
        settings = export_settings(profile, layers, installations, export_dir)
        found = {item["file"]: item for item in exports.listing(profile, settings) if "problem" not in item}
    except exports.ExportError as exc:
        run.add(about(profile, ERROR, "exports", str(exc)))
        return
    for name in files:
        item = found.get(name)
        if item is None:
            run.add(about(profile, WARNING, "not_an_export", "not one of its exports; left alone", path=name))
            continue
        if not dry_run:
            for path in (name, name + exports.MANIFEST):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    run.add(about(profile, ERROR, "os", f"cannot remove: {exc.strerror}", path=path))
        run.data.setdefault("removed", []).append(dict(item, dry_run=dry_run))

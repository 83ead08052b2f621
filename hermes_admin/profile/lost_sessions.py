"""The sessions a damaged store held that its rebuild cannot bring back: their ids, where they can
be known, and the export that can put each back.

A torn page takes its rows' ids with it, so the ids are gathered from everything else that
named the sessions the store held (`known`):

- `index`: an intact index of the sessions' ids, or of the session ids of their messages or usage
  rows (store/damage.indexed_session_ids);
- `files`: the per-session files in `sessions/` (transcripts, snapshots, request dumps), named
  for their session as the ghost prune reads them (store/files.session_id_of);
- `look`: the outbox's last look at this very store file (engine/noticed.py), less the sessions
  our own deletes took since.

Less what the rebuilt store holds, they are the lost sessions (`lost`). Exports are not a source
of ids: an export holds what a delete took, so a session in one left the store then, unless it
was put back since, which nothing records. They say instead where a lost session can be restored
from (`restorable`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_admin.model import Profile
from hermes_admin.profile import exports
from hermes_admin.profile.engine import last_look_ids
from hermes_admin.profile.store import damage
from hermes_admin.profile.store.files import session_id_of, unsafe_id

SOURCES = ("index", "files", "look")
SHOWN = 20  # ids named in one line (the rebuild announces every one)


@dataclass(frozen=True)
class Known:
    """The session ids each source says the store held."""

    by_source: dict[str, frozenset[str]] = field(default_factory=dict)

    def ids(self) -> set[str]:
        return set().union(*self.by_source.values()) if self.by_source else set()

    def sources_of(self, sid: str) -> list[str]:
        return [name for name in SOURCES if sid in self.by_source.get(name, ())]


def _file_ids(sessions_dir: Path) -> set[str]:
    try:
        with os.scandir(sessions_dir) as entries:
            found = {session_id_of(entry.name) for entry in entries}
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return set()
    return {sid for sid in found if sid is not None and not unsafe_id(sid)}


def known(profile: Profile) -> Known:
    """Every session id the damaged store's profile still has word of (reads only)."""
    return Known({"index": frozenset(damage.indexed_session_ids(profile.store_path)),
                  "files": frozenset(_file_ids(profile.sessions_dir)),
                  "look": frozenset(last_look_ids(profile))})


def lost(known_ids: Known, kept: Iterable[str]) -> list[str]:
    """The known ids a store that holds `kept` does not hold, sorted."""
    return sorted(known_ids.ids() - set(kept))


def restorable(profile: Profile, settings: exports.Settings | None, ids: Iterable[str]) -> dict[str, dict]:
    """For each of `ids` an export of this profile holds: the newest such export's held unit
    (exports.held_units: its id, file, the unit's head)."""
    wanted = set(ids)
    if not wanted:
        return {}
    found: dict[str, dict] = {}
    for unit in exports.held_units(profile, settings or exports.Settings()):
        for sid in unit["ids"]:
            if sid in wanted and (sid not in found or (unit["exported_at"] or 0) > (found[sid]["exported_at"] or 0)):
                found[sid] = unit
    return found


def restore_command(profile: Profile, sid: str, unit: dict) -> str:
    other = " --other-profile" if unit.get("made_in") else ""
    return f"`hermes-admin restore {unit['id']} --session {sid} -p {profile.shown}{other}`"


def said(profile: Profile, ids: list[str], held: dict[str, dict], would: bool) -> str:
    """`N session(s) lost: a, b; 1 of them can be restored from an export: `hermes-admin restore …``
    (`would be lost` before the rebuild)."""
    if not ids:
        return ""
    verb = "would be lost" if would else "lost"
    names = ", ".join(ids[:SHOWN]) + (" …" if len(ids) > SHOWN else "")
    line = f"{len(ids)} session(s) {verb}: {names}"
    if held:
        commands = "; ".join(restore_command(profile, sid, held[sid]) for sid in sorted(held)[:SHOWN])
        line += f"; {len(held)} of them can be restored from an export: {commands}"
    return line

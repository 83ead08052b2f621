"""Ghost-row pruning (reason `ghost_prune`).

(a) TUI ghosts: `source='tui'`, no title, ended, started over 24 h ago, no messages;
(b) message and usage rows whose session row is gone: one unit per missing id;
(c) per-session files in `sessions/` whose session row is gone and whose mtime
    is over 24 h old: removed without an event. `sessions.json` and files not
    named like a per-session file are never selected.
"""

from __future__ import annotations

from typing import Iterable

from hermes_admin.profile.engine.files import SessionFile
from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.tasks import DAY, Selection

GHOST_AGE_S = DAY
ORPHAN_FILE_AGE_S = DAY


def select_tui_ghosts(graph: Graph, now: float, live: set[str] = frozenset()) -> Selection:
    chosen = Selection()
    for sid in sorted(graph.rows):
        row = graph.rows[sid]
        if row.source != "tui" or row.title or row.message_rows or row.ended_at is None:
            continue
        if sid in live or row.pinned:
            chosen.kept[sid] = "TUI ghost, but live or pinned"
        elif graph.children.get(sid):
            chosen.kept[sid] = "TUI ghost, but has children"
        elif row.started_at >= now - GHOST_AGE_S:
            chosen.kept[sid] = "TUI ghost, but started under 24 h ago"
        else:
            chosen.units.append(Unit(sid, [sid], "TUI ghost: no title, no messages, ended, over 24 h old"))
    return chosen


def select_orphan_rows(orphan_ids: list[str]) -> Selection:
    return Selection(units=[Unit(sid, [sid], "message/usage rows of a session row that is gone")
                            for sid in sorted(orphan_ids)])


def select_orphan_files(entries: Iterable[tuple[str, SessionFile]], existing: set[str], now: float) -> Selection:
    """Of these (session id, file) pairs, the files whose session is not in `existing`."""
    chosen = Selection()
    for sid, entry in sorted(entries, key=lambda pair: (pair[0], pair[1].name)):
        if sid in existing:
            continue
        if entry.mtime < now - ORPHAN_FILE_AGE_S:
            chosen.files.append(str(entry.path))
        else:
            chosen.kept[str(entry.path)] = "orphan file, but modified under 24 h ago"
    return chosen

"""Ghost-row pruning (reason `ghost_prune`).

(a) TUI ghosts: `source='tui'`, no title, ended, started over 24 h ago, no messages;
(b) message and usage rows whose session row is gone: one unit per missing id;
(c) per-session files in `sessions/` whose session row is gone and whose mtime
    is over 24 h old: removed without an event. `sessions.json` and files not
    named like a per-session file are never selected.
"""

from __future__ import annotations

from typing import Iterable

from hermes_admin.profile.store.files import SessionFile
from hermes_admin.profile.store.read import WITHOUT_MESSAGES
from hermes_admin.profile.lineage import Graph, Unit
from hermes_admin.profile.tasks import DAY, Rule, Selection

GHOST_AGE_S = DAY  # a TUI session is a ghost only once it could no longer be one being started
ORPHAN_FILE_AGE_S = DAY  # a file whose row is gone may be one Hermes is writing before its row

# Why a row that is no TUI ghost stays: not this task's business, so the selector reports nothing for it.
NOT_A_GHOST = "no longer a TUI ghost (a title, a message, or open)"


def why_kept(row, has_children: bool, live: set[str], now: float) -> str | None:
    """Why this row is not pruned as a TUI ghost, in the report's words; None: it goes. One rule for the
    selector (the row as read) and its re-check in the deleting transaction (the row as it is then)."""
    if row.source != "tui" or row.title or row.message_rows or row.ended_at is None:
        return NOT_A_GHOST
    if row.id in live or row.pinned:
        return "TUI ghost, but live or pinned"
    if has_children:
        return "TUI ghost, but has children"
    if row.started_at >= now - GHOST_AGE_S:
        return "TUI ghost, but started under 24 h ago"
    return None


def select_tui_ghosts(graph: Graph, now: float, live: set[str] = frozenset()) -> Selection:
    chosen = Selection()
    for sid in sorted(graph.rows):
        why = why_kept(graph.rows[sid], bool(graph.children.get(sid)), live, now)
        if why == NOT_A_GHOST:
            continue
        if why:
            chosen.kept[sid] = why
        else:
            chosen.units.append(Unit(sid, [sid], "TUI ghost: no title, no messages, ended, over 24 h old"))
    return chosen


def recheck(now: float):
    """The selector's rule (why_kept), on the row as it is inside the deleting transaction (live rows
    are the engine's own guard there; children are looked for among the rows it read)."""

    def check(unit, fresh) -> str | None:
        row = fresh.get(unit.session_id)
        if row is None:
            return "gone already"
        return why_kept(row, any(other.parent_id == row.id for other in fresh.values()), set(), now)
    return check


def rule(policy, now: float) -> Rule:
    """The TUI-ghost rule (a); (b) and (c) are picked as the pass meets them (actions/maintenance.py)."""
    return Rule(lambda graph, live: select_tui_ghosts(graph, now, live), recheck(now), WITHOUT_MESSAGES)


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

"""Where a profile's bytes are (`hermes-admin usage`): read-only, through SQLite's own page accounting.

`dbstat` (SQLite's virtual table of every b-tree's pages) sums, per table and index, the pages the
database holds; the free pages, and the pages SQLite keeps for itself (pointer maps, the lock page),
make up the rest of `page_count`. The file on disk can differ from `page_count × page_size` while the
WAL holds pages not yet copied back: that difference is its own line, so every store's figures add
up to its file's length exactly. The files' figures are what they take on disk (allocated blocks:
a sparse file of a user's counts for what it holds, not its length); the exports are those `exports
list` shows for the profile, with their manifests, so a folder several profiles share is counted
once, each export under the profile that answers for it. An FTS5 index is its virtual table's shadow tables together (`_data`,
`_idx`, `_content`, `_docsize`, `_config`) and their indexes.

Every key of the figures is an identifier (`state_db_wal`, `free_pages`); each part of the store is
`{"kind", "name", "bytes"}`, the kind one of PARTS, the name the table's or index's where it has one.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from hermes_admin.profile.engine import SWITCH_MIN_BYTES, holder_hint, rewrite_unasked
from hermes_admin.profile.store import Store, page_accounting, pragmas
from hermes_admin.profile.store.read import message_bytes, sources_by_id
from hermes_admin.shown import human_bytes

# the shadow tables FTS5 makes for an index: counted as that index
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")
LARGEST = 10  # sessions listed by size: enough to find what to look at
# the kinds of a store's parts, and how people read them (`{}`: the part's name)
PARTS = {"table": "table {}", "indexes": "indexes of {}", "fts5_index": "FTS5 index {}", "schema": "the schema",
         "free_pages": "free pages", "sqlite_pages": "SQLite's own pages (pointer maps, lock page)",
         "wal_not_copied_back": "in the WAL, not yet copied back", "other": "other: {}"}
AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}  # PRAGMA auto_vacuum's values


def _damaged_copies(store_path) -> int:
    """The damaged stores a repair kept beside this one (`state.db.damaged-*`, with their
    sidecars): the operator's to remove, never ours."""
    folder = os.path.dirname(store_path)
    prefix = os.path.basename(store_path) + ".damaged-"
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return 0
    return sum(_size(os.path.join(folder, n)) for n in names)


def profile_usage(profile, store: Store, exports: int, held_by: str | None = None) -> dict:
    """One profile's figures, in bytes. `exports`: what its exports take, as `exports list` counts
    them (exports.listed_bytes); `held_by`: who else holds the store open now (space.py), for what
    its free pages wait for."""
    db = store.db
    counted = page_accounting.pages(db)
    page_size, page_count, free = counted.size, counted.count, counted.free_bytes  # the one figure for free pages
    btrees = page_accounting.btree_bytes(db)
    parts = _grouped(db, btrees)
    logical = page_count * page_size
    parts[("free_pages", None)] = free
    parts[("sqlite_pages", None)] = logical - free - sum(btrees.values())
    parts[("wal_not_copied_back", None)] = _size(store.path, apparent=True) - logical  # negative: behind
    sizes, sources = _sessions(db)
    files = {"state_db": _size(store.path), "state_db_wal": _size(f"{store.path}-wal"),
             "state_db_shm": _size(f"{store.path}-shm"), "sessions_dir": _folder_bytes(profile.sessions_dir),
             "exports": exports, "damaged_copies": _damaged_copies(store.path)}
    mode, _ = reclaim_state(db)
    return {
        "profile": profile.name, "home": str(profile.home), "store": str(store.path),
        "files": files, "total_bytes": sum(files.values()),
        "auto_vacuum": mode, "reclaimable_bytes": free,
        "reclaim_waits_for": reclaim_waits_for(mode, counted, held_by),
        "store_parts": [{"kind": kind, "name": name, "bytes": size}
                        for (kind, name), size in sorted(parts.items(), key=lambda item: -item[1])],
        "largest_sessions": [{"id": sid, "bytes": size, "source": source}
                             for sid, size, source in sizes[:LARGEST]],
        "sources": sources,
    }


def reclaim_state(db) -> tuple[str, page_accounting.Pages]:
    """The store's auto-vacuum mode (AUTO_VACUUM) and its pages (`free_bytes`: the free ones)."""
    return AUTO_VACUUM.get(pragmas.auto_vacuum(db), "unknown"), page_accounting.pages(db)


def reclaim_waits_for(mode: str, counted: page_accounting.Pages, held_by: str | None) -> str | None:
    """What a store's free pages wait for before they go back to the file system; None: nothing
    (fewer than a run would VACUUM for, or the store is in incremental auto-vacuum, which every run
    that purges steps through)."""
    if counted.free_bytes < SWITCH_MIN_BYTES or mode == "incremental":
        return None
    if not rewrite_unasked(counted.used_bytes):
        return (f"one VACUUM on your word (`compact`, `--vacuum`, vacuum_after_prune): it would rewrite "
                f"{human_bytes(counted.used_bytes)}, more than a run does unasked")
    return ("one VACUUM while nobody else holds the store (it also switches the store to incremental "
            "reclaim, unless incremental_vacuum: false)" + (f"; now the store is {held_by}{holder_hint(held_by)}" if held_by else ""))


def _grouped(db, btrees: dict[str, int]) -> dict[tuple[str, str | None], int]:
    """b-tree bytes by what a person knows, keyed (kind, name): each table with its own indexes,
    each FTS5 index whole."""
    rows = page_accounting.schema_entries(db)
    fts = {name for kind, name, _, sql in rows if kind == "table" and sql and "USING FTS5" in sql.upper()}
    owner = {}
    for kind, name, table, _ in rows:
        base = next((f for f in fts if table in (f, *(f + s for s in FTS5_SHADOWS))), None)
        owner[name] = ("fts5_index", base) if base else (("table", table) if kind == "table" else ("indexes", table))
    grouped: dict[tuple[str, str | None], int] = defaultdict(int)
    for name, size in btrees.items():
        schema = name in ("sqlite_schema", "sqlite_master")
        grouped[owner.get(name, ("schema", None) if schema else ("other", name))] += size
    return dict(grouped)


def _sessions(db) -> tuple[list[tuple[str, int, str]], list[dict]]:
    """Each session's bytes of messages (content and tool calls), largest first, and per source the
    sessions and bytes with their share."""
    per = message_bytes(db)
    source_of = sources_by_id(db)
    sizes = sorted(((sid, int(size or 0), source_of.get(sid, "(no session row)")) for sid, size in per.items()),
                   key=lambda item: -item[1])
    by_source: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for sid, source in source_of.items():
        by_source[str(source)][0] += 1
        by_source[str(source)][1] += int(per.get(sid) or 0)
    sessions, total = max(1, len(source_of)), max(1, sum(b for _, b in by_source.values()))
    sources = [{"source": source, "sessions": count, "bytes": size,
                "share_sessions": round(count / sessions, 4), "share_bytes": round(size / total, 4)}
               for source, (count, size) in sorted(by_source.items(), key=lambda item: -item[1][1])]
    return sizes, sources


def _size(path, apparent: bool = False) -> int:
    """A file's bytes on disk (allocated: a sparse 1 TiB file is not 1 TiB), or its length."""
    try:
        st = os.stat(path)  # stat, never open: SQLite's locks stay intact
    except OSError:
        return 0
    return st.st_size if apparent else st.st_blocks * 512


def _folder_bytes(folder: Path) -> int:
    """Bytes on disk of the plain files in a folder and below it, never through a link."""
    total = 0
    stack = [Path(folder)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_blocks * 512  # allocated
            except OSError:
                continue
    return total

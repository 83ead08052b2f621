"""Where a profile's bytes are (`hermes-admin usage`): read-only, through SQLite's own page accounting.

`dbstat` (SQLite's virtual table of every b-tree's pages) sums, per table and index, the pages the
database holds; the free pages, and the pages SQLite keeps for itself (pointer maps, the lock page),
make up the rest of `page_count`. The file on disk can differ from `page_count × page_size` while the
WAL holds pages not yet copied back: that difference is its own line, so every store's figures add
up to its file's length exactly. The files' figures are what they take on disk (allocated blocks:
a sparse file of a user's counts for what it holds, not its length). An FTS5 index is its virtual table's shadow tables together (`_data`,
`_idx`, `_content`, `_docsize`, `_config`) and their indexes.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from hermes_admin.profile.store import Store
from hermes_admin.profile.store import page_accounting
from hermes_admin.profile.store.read import message_bytes, sources_by_id

# the shadow tables FTS5 makes for an index: counted as that index
FTS5_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")
LARGEST = 10  # sessions listed by size: enough to find what to look at


def profile_usage(profile, store: Store, export_folder: Path | None) -> dict:
    """One profile's figures, in bytes."""
    db = store.db
    page_size, page_count, free_pages = page_accounting.pages(db)
    free = free_pages * page_size
    btrees = page_accounting.btree_bytes(db)
    parts = _grouped(db, btrees)
    logical = page_count * page_size
    parts["free pages"] = free
    parts["SQLite's own pages (pointer maps, lock page)"] = logical - free - sum(btrees.values())
    files = {suffix or "state.db": _size(f"{store.path}{suffix}") for suffix in ("", "-wal", "-shm")}
    parts["in the WAL, not yet copied back"] = _size(store.path, apparent=True) - logical  # negative: behind
    sizes, sources = _sessions(db)
    return {
        "profile": profile.name, "home": str(profile.home), "store": str(store.path),
        "files": {"state.db": files["state.db"], "state.db-wal": files["-wal"], "state.db-shm": files["-shm"],
                  "sessions/": _folder_bytes(profile.sessions_dir),
                  "exports": _folder_bytes(export_folder) if export_folder else 0},
        "store_parts": dict(sorted(parts.items(), key=lambda item: -item[1])),
        "largest_sessions": [{"id": sid, "bytes": size, "source": source}
                             for sid, size, source in sizes[:LARGEST]],
        "sources": sources,
    }


def _grouped(db, btrees: dict[str, int]) -> dict[str, int]:
    """b-tree bytes by what a person knows: each table with its own indexes, each FTS5 index whole."""
    rows = page_accounting.schema_entries(db)
    fts = {name for kind, name, _, sql in rows if kind == "table" and sql and "USING FTS5" in sql.upper()}
    owner = {}
    for kind, name, table, _ in rows:
        base = next((f for f in fts if table in (f, *(f + s for s in FTS5_SHADOWS))), None)
        owner[name] = f"FTS5 index {base}" if base else (f"table {table}" if kind == "table" else f"indexes of {table}")
    grouped: dict[str, int] = defaultdict(int)
    for name, size in btrees.items():
        schema = name in ("sqlite_schema", "sqlite_master")
        grouped[owner.get(name, "the schema" if schema else f"other: {name}")] += size
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

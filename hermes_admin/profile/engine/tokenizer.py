"""Hermes' CJK tokenizer, loaded before anything is deleted or restored where its triggers are.

Hermes' CJK full-text index has a tokenizer of Hermes' own, a library: without it, FTS5 cannot so
much as open that index, and a delete or restore of messages there fails in the triggers.
"""

from __future__ import annotations

import os
from typing import Callable

from hermes_admin.profile.store import Store
from hermes_admin.profile.store.errors import SQLITE_ERRORS

# Hermes' CJK index: joins the indexes quieted and merged like the others once the library is loaded.
CJK_FTS_TABLE = "messages_fts_cjk"


class Tokenizer:
    """`loaded(conn)`: called once the library is loaded on the store's connection."""

    def __init__(self, store: Store, dry_run: bool, loaded: Callable[[object], None]):
        self.store, self.dry_run, self.loaded = store, dry_run, loaded
        self._on = None  # the connection the library was loaded on

    def require(self, doing: str = "delete from") -> None:
        """Deleting (or restoring) messages fires the CJK FTS triggers, which need Hermes' tokenizer."""
        conn = self.store.db.connection()
        if not self.store.schema.has_cjk_triggers or self._on is conn:
            return
        candidates = [os.environ.get("HERMES_FTS5_CJK_SO"), str(self.store.profile.home / "lib" / "libfts5_cjk.so")]
        library = next((c for c in candidates if c and os.path.isfile(c)), None)
        if library is None:
            raise self.store.error(
                "CJK full-text triggers need the cjk_unicode61 tokenizer: set HERMES_FTS5_CJK_SO or install "
                f"{self.store.profile.home / 'lib' / 'libfts5_cjk.so'}; refusing to {doing} this store")
        if not hasattr(conn, "enable_load_extension"):
            raise self.store.error(
                f"CJK full-text triggers need {library}, but this Python's sqlite3 cannot load "
                f"extensions; refusing to {doing} this store")
        if self.dry_run:
            return
        try:
            conn.enable_load_extension(True)
            conn.load_extension(library)
            conn.enable_load_extension(False)
        except SQLITE_ERRORS as exc:
            raise self.store.error(f"cannot load the CJK tokenizer {library}: {exc}; refusing to {doing} this store") from exc
        self._on = conn
        self.loaded(conn)

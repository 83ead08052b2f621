"""Open a profile's store, validated, as one object."""

from __future__ import annotations

from pathlib import Path

import peewee

from hermes_admin.model import Profile
from hermes_admin.profile.store import damage
from hermes_admin.profile.store.connect import open_readonly, open_readwrite
from hermes_admin.profile.store.errors import SQLITE_ERRORS, StoreError
from hermes_admin.profile.store.schema import (KNOWN_SCHEMA_VERSION, Schema, migration_gap, migration_leftovers,
                                               not_understood, read_schema)


class Store:
    """A validated connection to one profile's `state.db` (read-only unless asked)."""

    def __init__(self, profile: Profile, db: peewee.SqliteDatabase, schema: Schema, writable: bool):
        self.profile = profile
        self.db = db
        self.schema = schema
        self.writable = writable

    @property
    def path(self) -> Path:
        return self.profile.store_path

    @classmethod
    def open(cls, profile: Profile, writable: bool = False, lock_wait_s: float | None = None) -> "Store":
        path = profile.store_path
        if not path.is_file():
            raise StoreError(profile.shown, path, "no state.db (this profile has no store yet)")
        db = None
        try:
            # lock_wait_s: how long any statement waits for a store another process holds (None: the default)
            db = open_readwrite(path, lock_wait_s) if writable else open_readonly(path, lock_wait_s=lock_wait_s)
            schema = read_schema(db)
        except SQLITE_ERRORS as exc:
            # SQLite itself says "file is not a database": we never sniff the header.
            if db is not None:
                db.close()
            if damage.is_damage(exc):  # which structure, and what to do: one line (store/damage.py)
                raise damage.damage_error(profile, str(exc)) from exc
            raise StoreError(profile.shown, path, str(exc)) from exc
        # a table's rows stranded beside the live table, or a version row the tables belie: said, never worked on
        if migration_leftovers(schema) or migration_gap(schema):
            db.close()
            raise damage.damage_error(profile)
        problem = None
        if not schema.has_table("sessions"):
            problem = "not a Hermes store (no sessions table)"
        elif not schema.has_table("messages"):
            problem = "not a Hermes store (no messages table)"
        elif schema.version is not None and schema.version > KNOWN_SCHEMA_VERSION:
            # Newer than every release checked here: maintained while all it holds that names a
            # session is understood; otherwise refused, naming what is not.
            unknown = not_understood(schema)
            if unknown:
                shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
                problem = (f"schema version {schema.version} holds what this hermes-admin does not understand "
                           f"({shown}); left untouched, upgrade hermes-admin")
        if problem:
            db.close()
            raise StoreError(profile.shown, path, problem)
        return cls(profile, db, schema, writable)

    def error(self, problem: str) -> StoreError:
        return StoreError(self.profile.shown, self.path, problem)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

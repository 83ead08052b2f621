"""Errors that name the profile and the file, in one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import apsw
import peewee

from hermes_admin.problems import ERROR, Problem


class StoreError(Exception):
    """A store that cannot be used: the message is one line naming profile and file."""

    def __init__(self, profile: str, path: Path, problem: str, kind: str = "store"):
        self.profile = profile
        self.path = Path(path)
        self.kind = kind  # "store", or "damaged_store": the file is damaged (store/damage.py)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(self.as_problem().text())

    def as_problem(self, home: str | Path | None = None) -> Problem:
        return Problem(ERROR, self.problem, profile=self.profile, home=None if home is None else str(home),
                       kind=self.kind, path=str(self.path))


# What a statement can raise: peewee's wrapping of a driver's error, and the driver's own (apsw's
# from our connections, where a cursor is read past peewee; sqlite3's from our own files').
SQLITE_ERRORS = (peewee.DatabaseError, apsw.Error, sqlite3.Error)
# Of those, the ones that may say the file is damaged, and the ones that never do (a lock, a busy
# store, a bad statement): damage.is_damage reads the message only of the first, less the second.
MAYBE_DAMAGE_ERRORS = (peewee.DatabaseError, sqlite3.DatabaseError, apsw.IOError)
NEVER_DAMAGE_ERRORS = (peewee.OperationalError, sqlite3.OperationalError)

"""Errors that name the profile and the file, in one line."""

from __future__ import annotations

from pathlib import Path


class StoreError(Exception):
    """A store that cannot be used: the message is one line naming profile and file."""

    def __init__(self, profile: str, path: Path, problem: str):
        self.profile = profile
        self.path = Path(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(f"profile '{profile}': {self.path}: {self.problem}")

"""A problem found in a run, as one value: built where it is found, carried to the host as
itself (protocol.py), said as one line (`Problem.text`), and counted into the exit code here.

Its severity says what it does to the command's exit code (README's table, docs/design.md §11):
an error fails a profile (2), a held lock is 3, a warning is 1. Nothing reads a problem's text
back: what a consumer needs (the profile, the path, whether the profile's work was skipped) is
a field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

from hermes_admin import exitcodes
from hermes_admin.model import Profile


class Severity(StrEnum):
    """What a problem does to the exit code; a str, said and serialized as its value ("error")."""

    ERROR = "error"  # a profile could not be processed (2)
    LOCKED = "locked"  # another run (ours or Hermes') holds it (3)
    WARNING = "warning"  # worth saying, the work went on (1)


ERROR, LOCKED, WARNING = Severity.ERROR, Severity.LOCKED, Severity.WARNING
SEVERITIES = tuple(Severity)


@dataclass(frozen=True)
class Problem:
    severity: Severity  # ERROR | LOCKED | WARNING (its value given as text is taken too)
    message: str  # what is wrong, without the profile or the path it names
    # as people read it (ROOT:NAME where roots share names)
    profile: str | None = field(default=None, metadata={"max_len": 256})
    home: str | None = None  # its home: what tells two roots' profiles apart
    kind: str = field(default="problem", metadata={"max_len": 64})  # a short identifier scripts can match on
    path: str | None = None  # the file or folder it is about
    key: str | None = field(default=None, metadata={"max_len": 256})  # the configuration key it is about
    line: int | None = field(default=None, metadata={"range": (1, 1 << 31)})  # the line of `path` it is about
    skipped: bool = False  # the profile's work was skipped for it

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"a problem's severity is one of {', '.join(SEVERITIES)}, not {self.severity!r}")
        object.__setattr__(self, "severity", Severity(self.severity))  # "error" is Severity.ERROR

    @property
    def reason(self) -> str:
        """What went wrong and where, without whose it is: `PATH[:LINE]: message`."""
        if not self.path:
            return self.message
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"

    def text(self) -> str:
        """The one line people read: `profile 'NAME': [skipped: ]PATH[:LINE]: message`."""
        head = f"profile '{self.profile}': " if self.profile else ""
        return head + ("skipped: " if self.skipped else "") + self.reason

    def __str__(self) -> str:
        return self.text()

    def as_dict(self) -> dict:
        return asdict(self)


def about(profile: Profile, severity: Severity, kind: str, message: str, path=None, **more) -> Problem:
    """A problem of `profile`, named as its messages name it."""
    return Problem(severity, message, profile=profile.shown, home=str(profile.home), kind=kind,
                   path=None if path is None else str(path), **more)


def exit_code(problems, internal: bool = False, warned: bool = False) -> int:
    """The command's exit code from what went wrong: a bug of ours, then the worst severity found
    (`warned`: something else worth a warning, such as units skipped)."""
    if internal:
        return exitcodes.INTERNAL
    found = {p.severity for p in problems}
    if ERROR in found:
        return exitcodes.PROFILE_FAILED
    if LOCKED in found:
        return exitcodes.LOCKED
    if WARNING in found or warned:
        return exitcodes.WARNINGS
    return exitcodes.OK


def texts(problems, *severities: Severity) -> list[str]:
    """The lines of the problems of these severities, in order."""
    return [p.text() for p in problems if p.severity in severities]

"""The filter surface of scripted cleanups (as `hermes sessions prune` has it), ANDed.

`--source`, `--end-reason` (exact), `--title`, `--model` (case-insensitive
substring), `--min-messages`/`--max-messages` (message rows), `--before`/
`--after` (last activity; a duration back from now, or an ISO time: durations.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from hermes_admin import durations



class FilterError(ValueError):
    pass


def parse_when(text: str, now: float) -> float:
    """A duration back from `now` (`5h`, `2d`, `1w2d`, `3mo`) or an ISO time (local unless it says)."""
    try:
        return durations.when(text, now)
    except durations.DurationError as exc:
        raise FilterError(str(exc)) from None


@dataclass(frozen=True)
class Filters:
    source: str | None = None
    end_reason: str | None = None
    title: str | None = None
    model: str | None = None
    min_messages: int | None = None
    max_messages: int | None = None
    before: float | None = None  # last activity before this time
    after: float | None = None  # last activity after this time

    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    @property
    def has_age_bound(self) -> bool:
        return self.before is not None or self.after is not None

    def matches(self, row) -> bool:
        if self.source is not None and row.source != self.source:
            return False
        if self.end_reason is not None and row.end_reason != self.end_reason:
            return False
        if self.title is not None and self.title.lower() not in (row.title or "").lower():
            return False
        if self.model is not None and self.model.lower() not in (row.model or "").lower():
            return False
        if self.min_messages is not None and row.message_rows < self.min_messages:
            return False
        if self.max_messages is not None and row.message_rows > self.max_messages:
            return False
        if self.before is not None and row.last_activity >= self.before:
            return False
        if self.after is not None and row.last_activity <= self.after:
            return False
        return True

"""click parameter types for the one duration and time syntax (hermes_admin/durations.py)."""

from __future__ import annotations

import time

import click

from hermes_admin import durations


class Duration(click.ParamType):
    """`90`, `90d`, `12h`, `1w2d`, `3mo`, `5s`: a duration in the unit of the policy key the option
    sets (durations.RULES: days for `--older-than`, seconds for `--lock-wait`), under that key's
    minimum refused. `forceable`: the command lets `--force` pass a smaller value (`at_least`),
    since click converts options in the order they are typed, `--force` maybe after this one."""

    name = "duration"

    def __init__(self, key: str, forceable: bool = False):
        self.key, self.forceable = key, forceable

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return durations.read(self.key, value, minimum=not self.forceable)
        except durations.DurationError as exc:
            self.fail(str(exc), param, ctx)


def at_least(key: str, value: float | None, force: bool, option: str, zero: str | None = None) -> None:
    """A forceable option's value under its key's minimum: a usage error unless `--force`. `zero`:
    what 0 means for this option, where not what it means for the key."""
    why = durations.under_minimum(key, value, zero) if value is not None else None
    if why and not force:
        raise click.BadParameter(f"{why}; add --force if you mean it", param_hint=option)


class When(click.ParamType):
    """A duration back from now (`2d`, `3mo`) or an ISO time (local unless it names a zone): a Unix time."""

    name = "when"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return durations.when(value, time.time())
        except durations.DurationError as exc:
            self.fail(str(exc), param, ctx)


class Size(click.ParamType):
    """`500M`, `2G`, `1.5GiB`, `1000000` (bytes): powers of 1024, as `du -h` shows them."""

    name = "size"
    UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

    def convert(self, value, param, ctx):
        import re

        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*|\s*(\d+)\s*b\s*", str(value), re.IGNORECASE)
        if not match:
            self.fail(f"{value!r} is not a size (like 500M, 2G, 1.5GiB, or bytes)", param, ctx)
        if match.group(3):
            return int(match.group(3))
        return int(float(match.group(1)) * self.UNITS[match.group(2).lower()])


OLDER_THAN = Duration("retention_days", forceable=True)  # purge --older-than
ARCHIVE_DAYS = Duration("auto_archive_days", forceable=True)  # archive-inactive --days
EXPORT_AGE = Duration("export_keep_days", forceable=True)  # exports prune --older-than
LOCK_WAIT = Duration("lock_wait")  # --lock-wait: seconds
SIZE = Size()  # --max-size: bytes from `2G`, `500M`
WHEN = When()  # --before, --after: a time, or a duration back from now

"""click parameter types for the one duration and time syntax (hermes_admin/durations.py)."""

from __future__ import annotations

import time

import click

from hermes_admin import durations


class Duration(click.ParamType):
    """`90`, `90d`, `12h`, `1w2d`, `3mo`: a number of days (a bare number is days)."""

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            return durations.days(value)
        except durations.DurationError as exc:
            self.fail(str(exc), param, ctx)


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


DURATION = Duration()  # one instance of each parameter type: they hold no state
SIZE = Size()  # --max-size: bytes from `2G`, `500M`
WHEN = When()  # --before, --after: a time, or a duration back from now

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


DURATION = Duration()
WHEN = When()

"""The one duration and time syntax of every option and config key.

A duration is a number with a unit, or several summed: `90d`, `12h`, `1w2d`, `3mo`, `1y 6mo`,
`1.5d`. A bare number (`90`) is in the unit of what it sets: days for `--older-than`, `--days`
and `retention_days`, hours for `empty_min_age_hours`. Units, as systemd.time(7) spells them
where it can: s, m/min, h, d, w, mo (30 days), y (365 days); their long forms too (`3 months`).

A time (`--before`, `--after`) is a duration back from now, or an ISO 8601 time, read in the
local time zone unless it names one (`Z`, `+02:00`), as `date -d` and journalctl do.

No maintained library reads this whole set (pytimeparse has no months and is unmaintained;
dateparser is 40 MB of locales for a few lines), so it is here, once.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

# Each unit a duration may name, in seconds; a month is 30 days and a year 365, as Hermes counts.
SECONDS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 7 * 86400, "week": 7 * 86400, "weeks": 7 * 86400,
    "mo": 30 * 86400, "month": 30 * 86400, "months": 30 * 86400,
    "y": 365 * 86400, "year": 365 * 86400, "years": 365 * 86400,
}
# one number and its unit; a duration is several (`1w2d`)
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
_BARE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*")  # a bare number: the key's own unit
HINT = "a number, a duration like 90d, 12h, 1w2d, 3mo"  # what every refusal says a duration looks like


class DurationError(ValueError):
    pass


def seconds(text, default_unit: str = "d") -> float:
    """`text` as a number of seconds; a bare number is in `default_unit`. Numbers (from YAML) too."""
    if isinstance(text, bool):
        raise DurationError(f"{text!r} is not a duration ({HINT})")
    if isinstance(text, (int, float)):
        if not math.isfinite(text) and text > 0:
            return math.inf
        if text != text or text < 0:
            raise DurationError(f"{text!r} is not a duration ({HINT})")
        return float(text) * SECONDS[default_unit]
    if not isinstance(text, str):
        raise DurationError(f"{text!r} is not a duration ({HINT})")
    bare = _BARE.fullmatch(text)
    if bare:
        return float(bare.group(1)) * SECONDS[default_unit]
    total, at = 0.0, 0
    for match in _PART.finditer(text):
        unit = match.group(2).lower()
        if match.start() != at or unit not in SECONDS:
            break
        total += float(match.group(1)) * SECONDS[unit]
        at = match.end()
    if at and not text[at:].strip():
        return total
    raise DurationError(f"{text!r} is not a duration ({HINT})")


def days(text, default_unit: str = "d") -> float:
    return seconds(text, default_unit) / 86400


def hours(text) -> float:
    return seconds(text, "h") / 3600


def when(text: str, now: float) -> float:
    """A Unix time: `text` back from `now` (a duration), or an ISO time (local unless it says)."""
    try:
        return now - seconds(text)
    except DurationError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise DurationError(f"{text!r} is neither a duration ({HINT}) nor an ISO time "
                            "(2026-11-30, 2026-11-30T08:00, ...+00:00)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is the local zone's, as `date -d` reads it
    return moment.timestamp()


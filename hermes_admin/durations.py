"""The one duration and time syntax of every option and config key.

A duration is a number with a unit, or several summed: `90d`, `12h`, `1w2d`, `3mo`, `1y 6mo`,
`1.5d`. A bare number (`90`) is in the unit of what it sets: days for `--older-than`, `--days`
and `retention_days`, hours for `empty_min_age_hours`. Units, as systemd.time(7) spells them
where it can: s, m/min, h, d, w, mo (30 days), y (365 days); their long forms too (`3 months`).

A time (`--before`, `--after`) is a duration back from now, or an ISO 8601 time, read in the
local time zone unless it names one (`Z`, `+02:00`), as `date -d` and journalctl do.

Each duration an option or config key takes has one rule here (RULES): the unit of a bare
number and the least value it accepts. A value under it (`export_keep_days: 1m`, one minute, meant
as a month) is refused wherever it is read, config or command line, never quietly obeyed.

No maintained library reads this whole set (pytimeparse has no months and is unmaintained;
dateparser is 40 MB of locales for a few lines), so it is here, once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
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


DAY = 86400


@dataclass(frozen=True)
class Rule:
    """What one duration key takes: a bare number's unit, the least value (seconds), and what 0
    means where 0 is allowed under that least value ("" where it is not)."""

    unit: str
    minimum: float
    zero: str = ""
    finite: bool = False  # a deadline: never unbounded


# Every duration key of the policy; an option that sets the same thing keeps its key's rule
# (cli/params.py). README's table says them.
RULES = {
    "retention_days": Rule("d", DAY),
    "auto_archive_days": Rule("d", DAY),
    "source_retention_days": Rule("d", DAY),  # each source's own window
    "export_keep_days": Rule("d", DAY, zero="export only units deleted in several steps, until the run is done"),
    "stale_grace_days": Rule("d", DAY, zero="purge a closed stale row on the next run"),
    "min_keep_days": Rule("d", DAY, zero="the size budget may take anything not open, pinned or live"),
    "empty_min_age_hours": Rule("h", 0),
    "quick_check_hours": Rule("h", 0, zero="every run"),
    "lock_wait": Rule("s", 0),
    "worker_idle_timeout": Rule("s", 1, finite=True),
    "worker_timeout": Rule("s", 1, finite=True),
}


def read(key: str, value, minimum: bool = True) -> float:
    """`value` of duration key `key` in the key's own unit (days, hours, seconds), its rule kept:
    under the key's minimum (0 aside where 0 means something) is a DurationError saying the least.
    `minimum=False`: for an option that lets `--force` pass a smaller value (`under_minimum` is
    asked once `--force` is known)."""
    rule = RULES[key]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        total = value * SECONDS[rule.unit]  # a negative number is a value under the minimum, said so
    else:
        total = seconds(value, rule.unit)
    if rule.finite and not math.isfinite(total):
        raise DurationError(f"{_said(value)} is not a finite duration")
    why = _too_small(key, total, _said(value)) if minimum else None
    if why:
        raise DurationError(why)
    return total / SECONDS[rule.unit]


def under_minimum(key: str, value: float, zero: str | None = None) -> str | None:
    """Why `value` (already in the key's unit) is under `key`'s minimum, or None: for an option
    that lets `--force` pass it. `zero`: what 0 means for that option, where it differs from the
    key's (`exports prune --older-than 0`: every export)."""
    total = value * SECONDS[RULES[key].unit]
    return _too_small(key, total, shown(total), zero)


def _too_small(key: str, total: float, said: str, zero: str | None = None) -> str | None:
    rule = RULES[key]
    zero = rule.zero if zero is None else zero
    if total >= rule.minimum or (total == 0 and zero):
        return None
    if rule.minimum:
        least = shown(rule.minimum) + (f", or 0 ({zero})" if zero else "")
    else:  # 0 is the least: said once, with what it means
        least = "0" + (f" ({zero})" if zero else "")
    return (f"{said} is under its minimum, {least}"
            + (f" (a bare number is {_UNIT_NAMES[rule.unit]}; m means minutes, mo months)" if total > 0 else ""))


def shown(total: float) -> str:
    """Seconds as a duration a person reads back (`90d`, `1d12h`, `5m`, `forever`), in the syntax above."""
    if not math.isfinite(total):
        return "forever"
    if total == 0:
        return "0"
    parts, left = [], round(total)
    for unit, size in (("d", DAY), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(parts) or f"{total:g}s"


def shown_in(key: str, value: float | None) -> str:
    """A duration key's value (in its unit) as a duration: `export_keep_days` 7 -> `7d`."""
    return "-" if value is None else shown(value * SECONDS[RULES[key].unit])


_UNIT_NAMES = {"d": "days", "h": "hours", "s": "seconds"}


def _said(value) -> str:
    text = repr(value) if isinstance(value, str) else f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


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


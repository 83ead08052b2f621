"""What is shown to people, without click: text made safe to print.

The engine and the hook bus print through these, so they need neither click nor report.py.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text, limit: int | None = None) -> str:
    """Text from a store, a file or a plugin, made safe to print: controls escaped, length bounded."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return _CONTROLS.sub(_escape, text)


def did_you_mean(word, known) -> str:
    """` (did you mean 'retention_days'?)` for a mistyped name (a key, a profile), else ""."""
    import difflib

    near = difflib.get_close_matches(str(word), sorted(str(k) for k in known), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def human_bytes(n: int | None) -> str:
    """`1.6 MiB`: how every report of ours writes a size (free pages in `usage`, `run` and `compact`)."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)

"""JSON as UTF-8 bytes, for what an export writes by the hundred megabytes: messages and file text.

orjson (a Rust encoder, a wheel for every common machine) writes the same JSON as the standard
library, straight to UTF-8 bytes: on a real store's files it escaped text about five times faster,
and the bytes need no second encoding before they are hashed and compressed. On a purge that
export work runs beside the deletes, on the same two cores (BENCHMARKS.md).

Where orjson would write something else, the standard library writes it, as every export did:
- a float that is not finite (SQLite keeps infinities): orjson writes `null`, which loses it;
  the standard library writes `Infinity`, which Python's `json` reads back;
- text that is not UTF-8 (a lone surrogate): orjson refuses it; the standard library writes it,
  and `surrogatepass` keeps its bytes.
Without orjson the standard library writes everything: the same values read back.
"""

from __future__ import annotations

import base64
import json
import math

try:
    import orjson
except ImportError:  # no wheel of it for this machine
    orjson = None


def blob(value):
    """A BLOB as JSON: Hermes' columns are text, but a store may hold anything (`{"$bytes": base64}`)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"cannot export a {type(value).__name__}")


_STANDARD = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=blob).encode


def standard(value) -> bytes:
    """`value` as the standard library writes it."""
    return _STANDARD(value).encode("utf-8", "surrogatepass")


def _finite(values) -> bool:
    return all(type(v) is not float or math.isfinite(v) for v in values)


def _encoded(value) -> bytes:
    """`value` by orjson, or by the standard library where orjson refuses it (text not UTF-8) or is absent."""
    if orjson is not None:
        try:
            return orjson.dumps(value, default=blob)
        except orjson.JSONEncodeError:
            pass
    return standard(value)


def row(names, values) -> bytes:
    """One row as a JSON object of its columns (plain SQL values: text, numbers, BLOBs, NULL)."""
    record = dict(zip(names, values))
    return _encoded(record) if _finite(values) else standard(record)  # orjson would make an infinity null


def text(value: str) -> bytes:
    """A string as a JSON string, quotes included."""
    return _encoded(value)


def chars(data: bytes) -> int:
    """How many characters the JSON `data` holds: the engine weighs rows in characters (what SQLite's
    `length()` counts), whichever encoder wrote them."""
    return len(data) if data.isascii() else len(data.decode("utf-8", "surrogatepass"))

"""One reader of untrusted JSON into our dataclasses: every field of its type and within its bounds,
no field unknown, none missing; what it refuses comes back as a `Refusal` value naming where.

Everything a worker says to the host (protocol.py) and everything Hermes' own code answers us
(profile/hooks/listing.py) is read through `decode`, so a bound is written once, on the field it
bounds, as the field's metadata:

    message: str = field(metadata={"max_len": 256})      text past 256 characters is cut ("…" said so)
    ids: tuple[str, ...] = field(metadata={"max_items": 1000})   a longer list is refused
    hooks: tuple[str, ...] = field(metadata={"keep_items": 100}) only the first 100 are read
    line: int | None = field(default=None, metadata={"range": (1, 1 << 31)})   refused outside [lo, hi)
    internal: bool = field(default=False, metadata={"optional": True})   may be absent: False

A field without them has the defaults below. The types read: text, whole and finite numbers, flags,
a path, an enum (its members' values), `X | None`, a union of those plain kinds (`Scalar`),
`tuple[X, ...]`, `list[X]`, `dict[str, X]` (or `Mapping`), a nested dataclass, and `object` (any
plain JSON value, bounded in depth and text). The bottom floor: it imports nothing of the package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from enum import Enum
from functools import cache, partial
from pathlib import Path
from types import UnionType
from typing import Callable, Union, get_args, get_origin, get_type_hints

TEXT_LEN = 4096  # a text field's bound when it declares none (cut past it)
MAX_ITEMS = 100_000  # a list's or an object's bound when it declares none (refused past it)
WHOLE = (-(1 << 63), 1 << 63)  # a whole number's range when it declares none
PLAIN_DEPTH, PLAIN_TEXT = 8, 65536  # an `object` field: nesting, and each text in it (cut past it)
Scalar = str | int | float | bool | None  # any plain JSON value but a list or an object

# The metadata `decode` reads ("optional": the field may be absent, taking its default, whatever
# the call says).
LIMITS = frozenset({"max_len", "max_items", "keep_items", "range", "optional"})


@dataclass(frozen=True)
class Refusal:
    """Why a value was not taken: where in it (`profiles[0].layers.entry`), and what was wrong."""

    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}" if self.where else self.what


class _Refused(Exception):
    """Unwinds a refusal to `decode`, which returns it as a value; each level it passes names itself
    on the way out (`under`), so reading what is taken builds no path."""

    def __init__(self, what: str, where: str = ""):
        super().__init__(what)
        self.what, self.where = what, where

    def under(self, part: str) -> "_Refused":
        """The same refusal, one level up (`part`: a field's name, or `[n]`, `['key']`)."""
        if not self.where:
            self.where = part
        else:
            self.where = part + self.where if self.where.startswith("[") else f"{part}.{self.where}"
        return self

    def refusal(self, where: str = "") -> Refusal:
        if self.where and where:
            self.under(where)
        return Refusal(self.where or where, self.what)


def decode(cls, value, where: str = "", *, absent_ok: bool = False, extra_ok: bool = False,
           max_len: int = TEXT_LEN, max_items: int = MAX_ITEMS):
    """An instance of the dataclass `cls` (or of any type decode reads: `tuple[cls, ...]`) read from
    the JSON value `value`, or a Refusal (`where`: how it names the value itself).

    `absent_ok`: a field with a default may be absent (the host's own jobs); otherwise every field
    must be there, as the writer's `asdict` always puts it. `extra_ok`: fields `cls` does not name
    are let through unread (a row whose other fields are shown as they are, already bounded:
    `plain_json`). `max_len`, `max_items`: the bounds of fields that declare none. What the class
    itself checks (its `__post_init__`'s ValueError) is a refusal too.
    """
    try:
        return _root(cls, absent_ok, extra_ok, max_len, max_items)(value)
    except _Refused as refused:
        return refused.refusal(where)


@cache
def _root(cls, absent_ok: bool, extra_ok: bool, max_len: int, max_items: int) -> Reader:
    return _reader(cls, (), _Defaults(absent_ok, extra_ok, max_len, max_items))


# The checks of one value, for readers of JSON that is not a dataclass's (a report's spilled lines,
# its rows before their check): each returns the value as read, or a Refusal.

def text(value, limit: int = TEXT_LEN):
    """Text, cut past `limit` characters ("…" said so), a lone surrogate escaped."""
    return _checked(_text, value, limit)


def plain_json(value):
    """A JSON value of bounded depth whose numbers are finite and texts bounded (rows, policies)."""
    return _checked(_plain, value, 0)


def _checked(check, value, *more):
    try:
        return check(value, *more)
    except _Refused as refused:
        return refused.refusal()


# -- readers, made once per type and its limits ------------------------------------------------

Reader = Callable[[object], object]


@dataclass(frozen=True)
class _Defaults:
    """What a field that declares no limit gets, and whether a field with a default may be absent."""

    absent_ok: bool
    extra_ok: bool
    max_len: int
    max_items: int


@cache
def _reader(hint, limits: tuple, defaults: _Defaults) -> Reader:
    """The reader of one type with its field's limits (`limits`: the metadata's items, sorted)."""
    given = dict(limits)
    unknown = set(given) - LIMITS
    if unknown:  # a typo would bound nothing: our own bug, said at once
        raise TypeError(f"unknown limit(s) {sorted(unknown)} (known: {sorted(LIMITS)})")
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) > 1:
            read = _scalar_reader(inner, limits, defaults)
        else:
            read = _reader(inner[0], limits, defaults)
        if len(inner) == len(args):
            return read
        return lambda v: None if v is None else read(v)
    if is_dataclass(hint):
        return _dataclass_reader(hint, defaults)
    if origin in (tuple, list):
        if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
            raise TypeError(f"decode reads tuple[X, ...], not {hint}")
        return _list_reader(origin, _reader(args[0], _for_items(limits), defaults), given, defaults)
    if origin in (dict, Mapping):
        key = _reader(args[0], (), defaults)
        item = _reader(args[1], _for_items(limits), defaults)
        return _object_reader(key, item, given, defaults)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _enum_reader(hint)
    if hint is str or hint is Path:
        cut = given.get("max_len", defaults.max_len)
        return partial(_text, limit=cut) if hint is str else (lambda v: Path(_text(v, cut)))
    if hint is bool:
        return _flag
    if hint is int:
        return _whole_reader(given.get("range", WHOLE))
    if hint is float:
        return _number_reader(given.get("range"))
    if hint is object:
        return lambda v: _plain(v, 0)
    raise TypeError(f"decode cannot read {hint!r}")


def _scalar_reader(kinds: list, limits: tuple, defaults: _Defaults) -> Reader:
    """One of several plain kinds (`str | int | float | bool`): read as the one its JSON is."""
    if not set(kinds) <= {str, int, float, bool}:
        raise TypeError(f"decode reads X | None or a union of plain kinds, not {kinds}")
    readers = {kind: _reader(kind, limits, defaults) for kind in kinds}
    if float in readers and int not in readers:
        readers[int] = readers[float]  # JSON's 2 for 2.0
    expected = f"expected {' or '.join(k.__name__ for k in kinds)}"

    def read(value):
        read_as = readers.get(type(value))
        if read_as is None:
            raise _Refused(f"{expected}, got {type(value).__name__}")
        return read_as(value)
    return read


def _for_items(limits: tuple) -> tuple:
    """A container's limits as its items see them: a text bound is theirs, a count the container's."""
    return tuple((k, v) for k, v in limits if k in ("max_len", "range"))


def _dataclass_reader(cls, defaults: _Defaults) -> Reader:
    hints = get_type_hints(cls)
    plan = [(f.name, _reader(hints[f.name], tuple(sorted(f.metadata.items())), defaults),
             (defaults.absent_ok or f.metadata.get("optional", False))
             and (f.default is not MISSING or f.default_factory is not MISSING))
            for f in fields(cls) if f.init]
    known, extra_ok = frozenset(name for name, _, _ in plan), defaults.extra_ok

    def read(value):
        if not isinstance(value, dict):
            raise _Refused("expected an object")
        if not (extra_ok or known.issuperset(value)):
            unknown = sorted(str(k) for k in value if k not in known)
            raise _Refused(f"unknown field {unknown[0][:64]!r}")
        given = {}
        for name, read_field, may_be_absent in plan:
            if name in value:
                try:
                    given[name] = read_field(value[name])
                except _Refused as refused:
                    raise refused.under(name) from None
            elif not may_be_absent:
                raise _Refused("missing", name)
        try:
            return cls(**given)
        except ValueError as exc:  # what the class itself checks (a task's name, a verb, a count)
            raise _Refused(str(exc)) from None
    return read


def _list_reader(kind: type, item: Reader, given: dict, defaults: _Defaults) -> Reader:
    most, keep = given.get("max_items", defaults.max_items), given.get("keep_items")

    def read(value):
        if not isinstance(value, list):
            raise _Refused("expected a list")
        if keep is not None:
            value = value[:keep]
        elif len(value) > most:
            raise _Refused(f"expected a list of at most {most}")
        try:
            return kind([item(v) for v in value])
        except _Refused as refused:  # which one: counted again, only now that one is refused
            n = next(n for n, v in enumerate(value) if _refuses(item, v))
            raise refused.under(f"[{n}]") from None
    return read


def _refuses(read: Reader, value) -> bool:
    try:
        read(value)
    except _Refused:
        return True
    return False


def _object_reader(key: Reader, item: Reader, given: dict, defaults: _Defaults) -> Reader:
    most = given.get("max_items", defaults.max_items)

    def read(value):
        if not isinstance(value, dict):
            raise _Refused("expected an object")
        if len(value) > most:
            raise _Refused(f"expected an object of at most {most} fields")
        taken = {}
        for k, v in value.items():
            name = key(k)
            try:
                taken[name] = item(v)
            except _Refused as refused:
                raise refused.under(f"[{k!r}]") from None
        return taken
    return read


def _enum_reader(cls: type[Enum]) -> Reader:
    members = {m.value: m for m in cls}
    known = ", ".join(map(str, members))

    def read(value):
        if not isinstance(value, str) or value not in members:
            raise _Refused(f"expected one of {known}, got {str(value)[:32]!r}")
        return members[value]
    return read


def _whole_reader(bounds: tuple[int, int]) -> Reader:
    low, high = bounds

    def read(value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Refused("expected a whole number")
        if not low <= value < high:
            raise _Refused(f"expected a whole number from {low} to {high - 1}")
        return value
    return read


def _number_reader(bounds: tuple[float, float] | None) -> Reader:
    def read(value):
        number = float(_number(value))
        if bounds is not None and not bounds[0] <= number < bounds[1]:
            raise _Refused(f"expected a number from {bounds[0]} to under {bounds[1]}")
        return number
    return read


def _text(value, limit: int = TEXT_LEN) -> str:
    if not isinstance(value, str):
        raise _Refused(f"expected text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a file name's undecodable byte) would crash whoever prints it
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value if len(value) <= limit else value[:limit] + "…"


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Refused("expected a finite number")
    return value


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise _Refused("expected true or false")
    return value


def _plain(value, depth: int):
    if depth > PLAIN_DEPTH:
        raise _Refused("nested too deep")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return _text(value, PLAIN_TEXT)
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {_text(k, 256): _plain(v, depth + 1) for k, v in value.items()}
    raise _Refused("not a JSON value")

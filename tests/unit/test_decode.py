"""The one reader of untrusted JSON into dataclasses (hermes_admin/decode.py): a table of what it
takes, what it cuts, and what it refuses, and where it says the refusal is."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import pytest

from hermes_admin.decode import MAX_ITEMS, TEXT_LEN, Refusal, Scalar, decode, plain_json, text


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner:
    name: str = field(metadata={"max_len": 8})
    count: int = field(default=0, metadata={"range": (0, 10)})


@dataclass(frozen=True)
class Outer:
    title: str
    colour: Colour
    flag: bool
    ratio: float
    where: Path
    maybe: int | None
    inner: Inner
    inners: tuple[Inner, ...] = field(metadata={"max_items": 2})
    tags: list[str] = field(metadata={"max_len": 3, "keep_items": 2})
    by_name: dict[str, tuple[str, ...]] = field(default_factory=dict, metadata={"max_items": 2})
    extra: object = None

    def __post_init__(self):
        if self.title == "forbidden":
            raise ValueError("no such title")


GOOD = {"title": "t", "colour": "red", "flag": True, "ratio": 1, "where": "/x", "maybe": None,
        "inner": {"name": "n", "count": 3}, "inners": [{"name": "a", "count": 0}], "tags": ["abc"],
        "by_name": {"k": ["v"]}, "extra": {"any": [1, "x"]}}


def test_a_good_value_comes_back_as_the_dataclass_of_its_types():
    got = decode(Outer, GOOD)
    assert got == Outer("t", Colour.RED, True, 1.0, Path("/x"), None, Inner("n", 3), (Inner("a", 0),), ["abc"],
                        {"k": ("v",)}, {"any": [1, "x"]})
    assert got.colour is Colour.RED and type(got.ratio) is float and type(got.inners) is tuple


def _with(**changes):
    return {**GOOD, **changes}


def _without(name: str):
    return {k: v for k, v in GOOD.items() if k != name}


@pytest.mark.parametrize("value, where, what", [
    (["not", "an", "object"], "", "expected an object"),
    (_with(surprise=1), "", "unknown field 'surprise'"),
    (_without("title"), "title", "missing"),
    (_without("by_name"), "by_name", "missing"),  # every field, defaults too, unless absent_ok
    (_with(title=5), "title", "expected text, got int"),
    (_with(title=None), "title", "expected text, got NoneType"),
    (_with(title="forbidden"), "", "no such title"),  # the class's own check
    (_with(colour="green"), "colour", "expected one of red, blue, got 'green'"),
    (_with(colour=1), "colour", "expected one of red, blue, got '1'"),
    (_with(flag=1), "flag", "expected true or false"),
    (_with(ratio=float("nan")), "ratio", "expected a finite number"),
    (_with(ratio=True), "ratio", "expected a finite number"),
    (_with(ratio="1"), "ratio", "expected a finite number"),
    (_with(where=["/x"]), "where", "expected text, got list"),
    (_with(maybe=1.5), "maybe", "expected a whole number"),
    (_with(maybe=True), "maybe", "expected a whole number"),
    (_with(maybe=1 << 63), "maybe", "expected a whole number from"),
    (_with(inner="n"), "inner", "expected an object"),
    (_with(inner={"name": "n", "count": 10}), "inner.count", "expected a whole number from 0 to 9"),
    (_with(inner={"name": "n", "count": -1}), "inner.count", "expected a whole number from 0 to 9"),
    (_with(inner={"count": 1}), "inner.name", "missing"),
    (_with(inners=[{"name": "a", "count": 0}] * 3), "inners", "expected a list of at most 2"),
    (_with(inners={"0": {"name": "a"}}), "inners", "expected a list"),
    (_with(inners=[{"name": "a", "count": 0}, {"name": 1, "count": 0}]), "inners[1].name", "expected text"),
    (_with(tags=["a", 5]), "tags[1]", "expected text"),
    (_with(by_name={"a": [], "b": [], "c": []}), "by_name", "at most 2 fields"),
    (_with(by_name={"a": "v"}), "by_name['a']", "expected a list"),
    (_with(extra=[[[[[[[[[[1]]]]]]]]]]), "extra", "nested too deep"),
    (_with(extra={"x": float("inf")}), "extra", "expected a finite number"),
])
def test_what_is_refused_is_one_refusal_naming_where(value, where, what):
    got = decode(Outer, value, "job")
    assert isinstance(got, Refusal), got
    assert got.where == ("job." + where if where else "job") and what in got.what
    assert str(got) == f"{got.where}: {got.what}"


@pytest.mark.parametrize("value, field_name, expect", [
    (_with(inner={"name": "x" * 20}), "inner", Inner("x" * 8 + "…", 0)),  # text is cut, said so, never refused
    (_with(tags=["abcdef", "b", "c", "d"]), "tags", ["abc…", "b"]),  # keep_items: the first ones, the rest dropped
    (_with(title="caf\udce9"), "title", "caf\\udce9"),  # a lone surrogate: escaped, printable
    (_with(title="x" * (TEXT_LEN + 5)), "title", "x" * TEXT_LEN + "…"),  # the default text bound
], ids=["cut", "keep-items", "surrogate", "default-text-bound"])
def test_what_is_bounded_by_cutting_is_cut(value, field_name, expect):
    got = decode(Outer, value, absent_ok=True)
    assert not isinstance(got, Refusal), got
    assert getattr(got, field_name) == expect


def test_absent_ok_lets_a_field_with_a_default_be_absent_only():
    assert decode(Outer, _without("by_name"), absent_ok=True).by_name == {}
    assert decode(Inner, {"name": "n"}, absent_ok=True) == Inner("n", 0)
    assert decode(Outer, _without("tags"), absent_ok=True) == Refusal("tags", "missing")


def test_the_defaults_of_a_call_bound_fields_that_declare_none():
    long_list = _with(by_name={"k": ["v"] * (MAX_ITEMS + 1)})
    assert decode(Outer, long_list) == Refusal("by_name['k']", f"expected a list of at most {MAX_ITEMS}")
    assert decode(Outer, long_list, max_items=MAX_ITEMS + 1).by_name["k"] == ("v",) * (MAX_ITEMS + 1)
    assert decode(Outer, _with(title="x" * 10), max_len=4).title == "xxxx…"


@dataclass(frozen=True, kw_only=True)
class Row:
    home: str
    title: Scalar
    size: float | None = field(default=None, metadata={"optional": True})


@pytest.mark.parametrize("value, expect", [
    ({"home": "/h", "title": "t"}, Row(home="/h", title="t")),  # `optional`: absent whatever the call says
    ({"home": "/h", "title": 3, "size": 2}, Row(home="/h", title=3, size=2.0)),  # JSON's 2 for 2.0
    ({"home": "/h", "title": None, "other": [1]}, Row(home="/h", title=None)),  # extra_ok: others unread
    ({"home": "/h", "title": True}, Row(home="/h", title=True)),
    ({"home": "/h", "title": [1]}, Refusal("title", "expected str or int or float or bool, got list")),
    ({"home": "/h", "title": float("nan")}, Refusal("title", "expected a finite number")),
    ({"home": "/h", "title": "t", "size": None}, Row(home="/h", title="t")),
    ({"title": "t"}, Refusal("home", "missing")),
])
def test_a_row_is_checked_for_the_fields_it_names_and_may_hold_more(value, expect):
    assert decode(Row, value, extra_ok=True) == expect


def test_a_list_of_them_is_read_as_well_and_names_the_one_refused():
    assert decode(tuple[Inner, ...], [{"name": "a", "count": 1}]) == (Inner("a", 1),)
    assert decode(tuple[Inner, ...], [{"name": "a"}, {"name": 5}], "profiles", absent_ok=True) == Refusal(
        "profiles[1].name", "expected text, got int")


def test_a_limit_it_does_not_know_is_our_bug_said_at_once():
    @dataclass
    class Typo:
        name: str = field(metadata={"maxlen": 3})

    with pytest.raises(TypeError, match="unknown limit"):
        decode(Typo, {"name": "x"})


@pytest.mark.parametrize("check, value, expect", [
    (text, "abc", "abc"), (text, 5, Refusal("", "expected text, got int")), (text, "x" * 5000, "x" * TEXT_LEN + "…"),
    (plain_json, {"a": [1, 2.5, None, "x"]}, {"a": [1, 2.5, None, "x"]}),
    (plain_json, {"a": object()}, Refusal("", "not a JSON value")),
    (plain_json, "x" * 70_000, "x" * 65536 + "…"),
])
def test_the_checks_of_one_value(check, value, expect):
    assert check(value) == expect


def test_every_dataclass_read_off_the_wire_has_a_reader_and_only_limits_decode_knows():
    """A typo in a field's metadata would bound nothing, and a type decode cannot read would fail
    only when first read: every class read through it gets its reader made here (its fields',
    nested ones too), so either is a TypeError now."""
    from hermes_admin import protocol
    from hermes_admin.layers import PolicyLayers
    from hermes_admin.model import Owner, Profile
    from hermes_admin.profile.hooks import listing

    for cls in (*protocol.PARAMS.values(), protocol.Context, Owner, Profile, PolicyLayers, protocol._JobProfile,
                *protocol.WIRE,
                *protocol.ROWS.values(), protocol.PolicyShown, listing.Answer):
        assert isinstance(decode(cls, None), Refusal), cls

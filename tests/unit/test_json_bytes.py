"""The exports' JSON (profile/json_bytes.py): whichever encoder writes a value, Python's `json`
reads back the value the standard library's encoding gives, and a value orjson would lose or
refuse is written as the standard library writes it."""

from __future__ import annotations

import json

import pytest

from hermes_admin.profile import json_bytes

NAMES = ["id", "role", "content", "timestamp", "tokens", "blob"]
ROWS = [  # (values, what json.loads reads back where it differs from the values themselves)
    ((1, "user", "plain", 1.5, 3, None), None),
    ((2, "tool", 'quotes " and \\ and \n\t and \x00\x1f controls', 0.0, -2**63, None), None),
    ((3, "assistant", "non-ASCII: é 中文 😀 and \u2028 \u2029", 1e300, 2**63 - 1, None), None),
    ((4, "tool", "x" * 50_000, -0.0, 0, b"\x00\xffbytes"), {"$bytes": "AP9ieXRlcw=="}),
    ((5, "tool", "infinite", float("inf"), 1, None), None),
    ((6, "tool", "minus infinite", float("-inf"), 1, None), None),
    ((7, "tool", "a lone surrogate: \udcff", 1.0, 1, None), None),
]


def _read(data: bytes):
    return json.loads(data.decode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("with_orjson", [True, False], ids=["orjson", "standard library"])
@pytest.mark.parametrize("values,blob", ROWS, ids=[str(v[0]) for v, _ in ROWS])
def test_a_row_reads_back_as_its_values(monkeypatch, with_orjson, values, blob):
    if not with_orjson:
        monkeypatch.setattr(json_bytes, "orjson", None)
    elif json_bytes.orjson is None:
        pytest.skip("no orjson on this machine")
    data = json_bytes.row(NAMES, values)
    assert json_bytes.chars(data) == len(data.decode("utf-8", "surrogatepass"))  # rows are weighed in characters
    read = _read(data)
    assert list(read) == NAMES
    assert [read[n] for n in NAMES[:-1]] == list(values[:-1])
    assert read["blob"] == (blob if blob is not None else values[-1])
    if not with_orjson:
        assert json_bytes.row(NAMES, values) == json_bytes.standard(dict(zip(NAMES, values)))


def test_what_orjson_would_lose_or_refuse_is_written_as_the_standard_library_writes_it():
    assert b'"timestamp":Infinity' in json_bytes.row(NAMES, ROWS[4][0])
    assert b'"timestamp":-Infinity' in json_bytes.row(NAMES, ROWS[5][0])
    assert "\udcff".encode("utf-8", "surrogatepass") in json_bytes.row(NAMES, ROWS[6][0])
    assert json_bytes.text("\udcff") == json_bytes.standard("\udcff")


@pytest.mark.parametrize("text", ["", "plain", 'a "quoted" \\ line\n', "é 中文 😀", "\x00\x7f\u2028", "x" * 49_152])
def test_a_string_reads_back_as_itself(text):
    data = json_bytes.text(text)
    assert data[:1] == data[-1:] == b'"'
    assert _read(data) == text

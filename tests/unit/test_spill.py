"""Report lists kept on disk past their head (spill.py): same content, same JSON, bounded memory."""

from __future__ import annotations

import json
import tempfile

from hermes_admin import report, spill
from hermes_admin.results import Done, Result
from hermes_admin.spill import Spill, SpillMap


def test_a_spill_keeps_order_and_length_across_its_head_and_its_file(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 3)
    monkeypatch.setattr(spill, "READ_BYTES", 7)  # lines cut across reads
    items = [f"/s/{i}\n\u00e9.json" for i in range(10)] + ["line\u2028break", ""]
    listed = Spill(items)
    assert listed._file is not None and len(listed._head) == 3
    assert len(listed) == 12 and bool(listed) and not Spill()
    assert list(listed) == items
    assert list(listed) == items  # a second pass reads the file again
    reader = iter(listed)
    assert [next(reader) for _ in range(5)] == items[:5]  # a reader that stops half way ...
    listed.append("late")  # ... leaves the next entry at the end all the same
    assert list(listed)[-1] == "late" and len(list(listed)) == 13
    assert list(listed.encoded()) == [json.dumps(item) for item in items + ["late"]]


def test_spilled_units_come_back_as_units(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 1)
    done = Spill([Done("a", ("a", "b"), "old"), Done("c", ("c",), "old")], decode=Done.from_dict)
    assert [(d.session_id, d.ids, d.rule) for d in done] == [("a", ("a", "b"), "old"), ("c", ("c",), "old")]


def test_a_spill_map_writes_one_json_object(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 2)
    kept = SpillMap({"a": "active 1.0 days ago", "b\"q": "pinned"})
    kept.update({"c": "open", "d": "x\ny"})
    kept["e"] = "last"
    assert len(kept) == 5
    assert dict(kept.items()) == {"a": "active 1.0 days ago", "b\"q": "pinned", "c": "open", "d": "x\ny", "e": "last"}
    pieces: list[str] = []
    report._write_compact(kept, pieces.append)
    assert "".join(pieces) == json.dumps(dict(kept.items()))


def test_absorbing_copies_the_lines_in_order(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 2)
    first, second = Spill(range(3)), Spill(range(10, 16))
    first += second
    assert list(first) == [0, 1, 2, 10, 11, 12, 13, 14, 15] and len(first) == 9
    small = Spill([1])  # its head has room: the other's file still follows its own entries
    small += Spill(range(5))
    assert list(small) == [1, 0, 1, 2, 3, 4]


def test_without_a_scratch_file_the_entries_stay_in_memory(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 2)

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    listed = Spill(range(6))
    assert listed._file is None and list(listed) == list(range(6)) and len(listed) == 6


def test_a_report_with_spilled_lists_is_what_json_dump_writes(monkeypatch):
    monkeypatch.setattr(spill, "HEAD", 2)
    result = Result("default", "delete", "prune", False, task="purge")
    for i in range(7):
        result.done.append(Done(f"s{i}", (f"s{i}", f"d{i}"), "every member ended"))
        result.files_removed.append(f"/root/sessions/s{i}.jsonl")
        result.kept[f"k{i}"] = "active 2.0 days ago"
    result.skipped.append({"session_id": "x", "ids": ["x"], "why": "gone already"})
    assert result.rows == 14
    doc = {"results": [result], "errors": []}
    pieces: list[str] = []
    report._write_compact(doc, pieces.append)
    written = "".join(pieces)
    plain = json.loads(json.dumps(doc, default=lambda v: v.as_dict()))
    assert written == json.dumps(plain)
    assert json.loads(written)["results"][0]["kept"]["k6"] == "active 2.0 days ago"

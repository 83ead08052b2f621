import os

import pytest

from hermes_admin.profile.store.files import FileIndex, session_id_of, unsafe_id


@pytest.mark.parametrize("name, sid", [
    ("20260101_120000_abc123.json", "20260101_120000_abc123"),
    ("20260101_120000_abc123.jsonl", "20260101_120000_abc123"),
    ("session_20260101_120000_abc123.json", "20260101_120000_abc123"),
    ("request_dump_20260101_120000_abc123_20260102_030405_123456.json", "20260101_120000_abc123"),
    ("request_dump_s1_20260102_030405.json", "s1"),
    ("sessions.json", None),
    ("notes.txt", None),
    ("x.json.bak", None),
])
def test_session_id_of(name, sid):
    assert session_id_of(name) == sid


@pytest.mark.parametrize("sid, unsafe", [
    ("20260101_120000_abc", False), ("a/b", True), ("..", True), ("a..b", True),
    ("a\\b", True), ("a\0b", True), ("", True),
])
def test_unsafe_ids(sid, unsafe):
    assert unsafe_id(sid) is unsafe


def test_index_lists_links_without_following(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("keep")
    os.symlink(outside, sessions / "s1.jsonl")
    (sessions / "s1.json").write_text("{}")
    (sessions / "sessions.json").write_text("{}")
    (sessions / "s2.json").mkdir()  # a folder named like a transcript is not a file
    index = FileIndex.scan(sessions)
    files = index.files_of("s1")
    assert [f.path.name for f in files] == ["s1.json", "s1.jsonl"]
    assert [f.is_symlink for f in files] == [False, True]
    assert index.files_of("s2") == [] and index.files_of("../secret") == []
    assert list(FileIndex.scan(tmp_path / "missing").names(10)) == []

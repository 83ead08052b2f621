"""`hermes-admin usage`: where the bytes are; every store's figures add up to its files; read-only."""

from __future__ import annotations

import json
import os
import re

from tests.conftest import store_digest
from tests.helpers import home_of


def test_usage_adds_up_to_each_stores_files_and_changes_nothing(synth_root, invoke):
    root, _ = synth_root
    before = store_digest(root)
    result = invoke("--root", str(root), "usage", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert {r["profile"] for r in doc["profiles"]} == {"default", "work", "legacy"}
    for row in doc["profiles"]:
        db = home_of(root, row["profile"]) / "state.db"
        assert sum(p["bytes"] for p in row["store_parts"]) == os.stat(db).st_size == row["files"]["state_db"]
        assert {"kind": "fts5_index", "name": "messages_fts"} in [
            {k: p[k] for k in ("kind", "name")} for p in row["store_parts"]]
        assert row["files"]["sessions_dir"] > 0 and row["total_bytes"] == sum(row["files"].values())
        assert all(key.isidentifier() and key == key.lower() for key in row["files"])  # keys, not prose
        assert row["auto_vacuum"] in ("none", "full", "incremental") and row["reclaimable_bytes"] >= 0
        assert abs(sum(s["share_sessions"] for s in row["sources"]) - 1) < 0.01
        sizes = [s["bytes"] for s in row["largest_sessions"]]
        assert sizes == sorted(sizes, reverse=True)
    assert doc["host_bytes"] == sum(sum(r["files"].values()) for r in doc["profiles"])
    assert list(doc["roots"]) == [str(root)]
    assert store_digest(root) == before  # read-only
    human = invoke("--root", str(root), "usage", "--detail")
    assert human.exit_code == 0 and "FTS5 index messages_fts" in human.stdout and "host:" in human.stdout
    assert "\ttotal\t" in human.stdout
    assert human.stdout.count("profile\t") == 1  # piped: one table, the detail (each profile's total in it)


def test_usage_says_a_summary_per_profile_first_and_the_parts_with_detail(synth_root, invoke):
    """A `du -sh` habit: one line a profile (total, store, free pages, WAL, files, exports), then the
    totals; each table and index only with --detail. The JSON holds everything either way."""
    from hermes_admin.report import human_bytes

    root, _ = synth_root
    doc = json.loads(invoke("--root", str(root), "usage", "--json").stdout)
    short = invoke("--root", str(root), "usage")
    assert short.exit_code == 0, short.stderr
    lines = short.stdout.splitlines()
    assert lines[0].split("\t") == ["profile", "total", "state.db", "free pages", "wal+shm", "sessions/", "exports"]
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:4]}
    assert set(rows) == {"default", "work", "legacy"}
    for row in doc["profiles"]:
        assert rows[row["profile"]][1:3] == [human_bytes(row["total_bytes"]), human_bytes(row["files"]["state_db"])]
    assert "FTS5 index" not in short.stdout and "sources" not in short.stdout and "host:" in short.stdout
    detail = invoke("--root", str(root), "usage", "--detail", "-p", "work").stdout
    assert re.search(r"^work: sources, % of sessions / % of bytes: \w+ \d+ % / \d+ %", detail, re.M), detail
    assert len(lines) <= 3 + 1 + 2  # a header, a line a profile, the root and the host
    assert json.loads(invoke("--root", str(root), "usage", "--json", "--detail").stdout)["profiles"] == doc["profiles"]


def test_usage_of_a_garbage_store_is_that_profiles_error(synth_root, invoke):
    root, _ = synth_root
    broken = root / "profiles" / "broken"
    broken.mkdir()
    (broken / "state.db").write_bytes(b"not a database" * 100)
    result = invoke("--root", str(root), "usage", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert any("broken" in e and "state.db" in e for e in doc["errors"])
    assert {r["profile"] for r in doc["profiles"]} == {"default", "work", "legacy"}


def test_usage_totals_each_root_apart_and_the_host_over_both(synth_root, invoke, tmp_path, now):
    from hermes_admin.synth.scenario import build_root

    first, _ = synth_root
    second = tmp_path / "second"
    build_root(second, {"default": 30, "ops": 22}, now=now)
    result = invoke("--root", str(first), "--root", str(second), "usage", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc["roots"]) == {str(first), str(second)}
    for root, sums in doc["roots"].items():
        mine = [r for r in doc["profiles"] if r["root"] == root]
        assert sum(sums.values()) == sum(sum(r["files"].values()) for r in mine)
    assert doc["host_bytes"] == sum(sum(s.values()) for s in doc["roots"].values())
    assert len([r for r in doc["profiles"] if r["profile"] == "default"]) == 2  # two roots' defaults kept apart


def test_usage_with_an_export_folder_that_is_a_file_warns_and_goes_on(synth_root, invoke):
    """The export folder a file (a typo'd `export_dir`, a stray file): a warning naming it, never a crash."""
    root, _ = synth_root
    own = home_of(root, "work") / ".hermes-admin"
    own.mkdir(exist_ok=True)
    (own / "exports").write_text("not a folder")
    result = invoke("--root", str(root), "usage", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr  # a listing command: warnings leave it 0
    doc = json.loads(result.stdout)
    assert {r["profile"] for r in doc["profiles"]} == {"default", "work", "legacy"}
    [warning] = doc["warnings"]
    assert warning.startswith("profile 'work': ") and "exports: cannot list the export folder" in warning
    assert "[Errno" not in warning

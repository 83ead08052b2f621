"""Exports as an operator meets them: where each went (report and JSON), a copy restorable without
its manifest, `exports list` with short ids and the total, `exports prune` by age or size."""

from __future__ import annotations

import json
import os
import re
import shutil

from tests.conftest import counts
from tests.helpers import home_of, row_ids


def purge(invoke, root, *more):
    result = invoke("--root", str(root), "purge", "--older-than", "90d", "--yes", "--json", *more)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def test_the_report_and_the_json_say_where_each_export_went(synth_root, invoke):
    root, _ = synth_root
    doc = purge(invoke, root)
    exported = {r["profile"]: r["export"] for r in doc["results"] if r["rows"]}
    assert exported and all(os.path.isfile(path) for path in exported.values())
    assert exported["work"].startswith(str(home_of(root, "work") / ".hermes-admin" / "exports"))
    human = invoke("--root", str(root), "sessions", "delete", "--yes", "--source", "cli", "--before", "30d",
                   "-p", "work", "--force")
    assert "exported to " in human.stdout, human.stdout + human.stderr


def test_an_export_copied_without_its_manifest_restores(synth_root, invoke, tmp_path):
    root, _ = synth_root
    before = row_ids(home_of(root, "work") / "state.db")
    doc = purge(invoke, root, "-p", "work")
    (export,) = [r["export"] for r in doc["results"] if r["export"]]
    copy = tmp_path / "elsewhere" / "copy.jsonl.gz"
    copy.parent.mkdir()
    shutil.copy(export, copy)  # the .jsonl.gz alone, as a person copies it
    result = invoke("--root", str(root), "restore", str(copy), "-p", "work", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert row_ids(home_of(root, "work") / "state.db") == before


def test_exports_list_has_short_ids_and_the_total(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root)
    doc = json.loads(invoke("--root", str(root), "exports", "list", "--json").stdout)
    assert len(doc["exports"]) == 3 and all(len(e["id"]) == 8 for e in doc["exports"])
    assert doc["total_bytes"] == sum(os.stat(f).st_blocks * 512 for e in doc["exports"]
                                     for f in (e["file"], e["file"] + ".json"))  # on disk, with the manifests
    human = invoke("--root", str(root), "--plain", "exports", "list")
    assert all(e["id"] in human.stdout for e in doc["exports"])


def test_exports_prune_by_age_and_by_size(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root)
    listed = json.loads(invoke("--root", str(root), "exports", "list", "--json").stdout)["exports"]
    assert json.loads(invoke("--root", str(root), "exports", "prune", "--older-than", "30d", "--json").stdout)[
        "removed"] == []  # all made just now
    dry = invoke("--root", str(root), "exports", "prune", "--older-than", "0", "--dry-run", "--json")
    assert len(json.loads(dry.stdout)["removed"]) == 3 and all(os.path.exists(e["file"]) for e in listed)
    unforced = invoke("--root", str(root), "exports", "prune", "--older-than", "0", "--yes")  # 0 is "all", not "never"
    assert unforced.exit_code != 0 and "--force" in unforced.stderr and all(os.path.exists(e["file"]) for e in listed)
    biggest = max(e["bytes"] for e in listed)
    kept = invoke("--root", str(root), "exports", "prune", "--max-size", str(sum(e["bytes"] for e in listed) - 1),
                  "--yes", "--json")
    assert len(json.loads(kept.stdout)["removed"]) == 1 and biggest
    by_size = invoke("--root", str(root), "exports", "prune", "--max-size", "1B", "--yes", "--json")
    assert by_size.exit_code == 0, by_size.stderr
    assert json.loads(invoke("--root", str(root), "exports", "list", "--json").stdout)["exports"] == []
    assert all(counts(home_of(root, n) / "state.db")["sessions"] for n in ("default", "work", "legacy"))


def test_restore_takes_the_short_id(synth_root, invoke):
    root, _ = synth_root
    before = row_ids(home_of(root, "work") / "state.db")
    purge(invoke, root, "-p", "work")
    (export,) = json.loads(invoke("--root", str(root), "exports", "list", "--json").stdout)["exports"]
    result = invoke("--root", str(root), "restore", export["id"][:6], "--yes")
    assert result.exit_code == 0, result.stderr
    assert row_ids(home_of(root, "work") / "state.db") == before


def test_the_restore_prompt_names_the_sessions_it_is_limited_to(synth_root, invoke, monkeypatch):
    from hermes_admin.cli import mutate

    root, _ = synth_root
    doc = purge(invoke, root, "-p", "work")
    (result,) = [r for r in doc["results"] if r["rows"] and r["task"] == "purge"]
    wanted = result["done"][0]["session_id"]
    monkeypatch.setattr(mutate, "asks", lambda yes, dry_run: not (yes or dry_run))  # as on a terminal
    answered = invoke("--root", str(root), "restore", result["export"], "--session", wanted, input="n\n")
    assert answered.exit_code == 1
    assert f"holding session(s) {wanted} into profile 'work'?" in answered.stderr + answered.stdout


def test_a_restore_a_failure_cuts_short_reports_what_it_put_back(synth_root, invoke, monkeypatch):
    """The store fails under the restore after one session went back: that one is reported, with the
    error and what stopped it; the rest waits for the next restore, which leaves it alone."""
    from hermes_admin.profile.engine import restore

    root, _ = synth_root
    doc = purge(invoke, root, "-p", "work")
    (export,) = [r["export"] for r in doc["results"] if r["export"]]
    session, calls = restore.Restorer.session, []

    def failing(self, fields, messages, missing_only, dry_run=False):
        calls.append(fields["id"])
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return session(self, fields, messages, missing_only, dry_run)

    monkeypatch.setattr(restore.Restorer, "session", failing)
    result = invoke("--root", str(root), "restore", export, "-p", "work", "--yes", "--json")
    assert result.exit_code == 2
    (restored,) = json.loads(result.stdout)["results"]
    assert [d["session_id"] for d in restored["done"]] == calls[:1]
    assert any(note.startswith("stopped by: OSError") for note in restored["notes"])
    assert calls[0] in row_ids(home_of(root, "work") / "state.db")


def _files_of(folder) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), int(p.stat().st_mtime)) for p in folder.iterdir() if p.is_file()}


def test_restore_brings_back_the_transcript_files_the_delete_removed(synth_root, invoke):
    """The export carries each session's files in sessions/; restore puts them back, byte for byte,
    with their times (and a binary one too)."""
    root, _ = synth_root
    sessions = home_of(root, "work") / "sessions"
    before = _files_of(sessions)
    doc = purge(invoke, root, "-p", "work")
    removed = [path for r in doc["results"] for path in r["files_removed"]]
    assert removed and not any((sessions / os.path.basename(p)).exists() for p in removed)
    (export,) = [r["export"] for r in doc["results"] if r["export"]]

    dry = invoke("--root", str(root), "restore", export, "-p", "work", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "file(s) would be put back into" in dry.stdout and ": would be restored from " in dry.stdout  # never as done
    assert not any((sessions / os.path.basename(p)).exists() for p in removed)  # a dry run writes nothing

    back = invoke("--root", str(root), "restore", export, "-p", "work", "--yes")
    assert back.exit_code == 0, back.stdout + back.stderr
    assert "file(s) put back into" in back.stdout and "stay gone" not in back.stdout
    after = _files_of(sessions)
    for path in removed:
        name = os.path.basename(path)
        assert after[name] == before[name], name
        assert (sessions / name).stat().st_mode & 0o077 == 0
    again = invoke("--root", str(root), "restore", export, "-p", "work", "--yes", "--json")
    assert json.loads(again.stdout)["warnings"] == []  # its own files found there again are no news
    human = invoke("--root", str(root), "restore", export, "-p", "work", "--yes")
    assert human.exit_code == 1  # why, without -v:
    assert re.search(r"^  skipped \S+: exists", human.stdout, re.M), human.stdout


def test_a_file_not_utf8_goes_and_comes_back_byte_for_byte(synth_root, invoke):
    root, kinds = synth_root
    sessions = home_of(root, "work") / "sessions"
    sid = kinds["work"]["old_ended"][0]
    raw = bytes(range(256)) * 300  # more than one piece (transcripts.PIECE) of base64
    text = ('{"m": "é€😀 \\ \u2028 \\"x\\""}\n' * 9000).encode()  # pieces end inside characters
    (sessions / f"{sid}.jsonl").write_bytes(raw)
    (sessions / f"{sid}.json").write_bytes(text)
    doc = purge(invoke, root, "-p", "work")
    assert not (sessions / f"{sid}.jsonl").exists()
    (export,) = [r["export"] for r in doc["results"] if r["export"]]
    back = invoke("--root", str(root), "restore", export, "-p", "work", "--session", sid, "--yes")
    assert back.exit_code == 0, back.stderr
    assert (sessions / f"{sid}.jsonl").read_bytes() == raw
    assert (sessions / f"{sid}.json").read_bytes() == text


def test_an_export_made_before_files_were_carried_restores_and_says_so(synth_root, invoke, tmp_path):
    """Old exports stay restorable: the rows come back, and the restore says the files stay gone."""
    import gzip

    root, _ = synth_root
    before = row_ids(home_of(root, "work") / "state.db")
    doc = purge(invoke, root, "-p", "work")
    (export,) = [r["export"] for r in doc["results"] if r["export"]]
    records = [json.loads(line) for line in gzip.open(export, "rt")]
    assert all("files" in r for r in records)
    old = tmp_path / "old" / "20261101T000000Z-work-0badc0de.jsonl.gz"
    old.parent.mkdir()
    with gzip.open(old, "wt") as out:  # as an earlier version wrote it: no `files`, no manifest
        for record in records:
            record.pop("files")
            out.write(json.dumps(record) + "\n")
    back = invoke("--root", str(root), "restore", str(old), "-p", "work", "--yes")
    assert back.exit_code == 0, back.stderr
    assert row_ids(home_of(root, "work") / "state.db") == before
    assert "made before exports carried the files" in back.stdout


def test_an_export_naming_a_file_outside_its_session_puts_nothing_there(tmp_path):
    from hermes_admin.profile.transcripts import put_back

    folder = tmp_path / "sessions"
    folder.mkdir()
    sid = "20261201_120000_abcdef"
    items = [{"name": "../escape.json", "text": "x"}, {"name": "20261201_120000_other.json", "text": "x"},
             {"name": "sessions.json", "text": "x"}, {"name": f"{sid}.jsonl", "text": "ok", "mtime": 1e9},
             {"name": f"{sid}.json", "bytes": "not base64!"}]
    put, left = put_back(folder, sid, items, dry_run=False)
    assert put == 1 and [p.name for p in folder.iterdir()] == [f"{sid}.jsonl"]
    assert (folder / f"{sid}.jsonl").stat().st_mtime == 1e9
    assert len(left) == 4 and not (tmp_path / "escape.json").exists()
    (folder / f"{sid}.json").symlink_to(tmp_path / "target")
    put, left = put_back(folder, sid, [{"name": f"{sid}.json", "text": "x"}], dry_run=False)
    assert put == 0 and not (tmp_path / "target").exists()  # never through a link


def test_files_past_the_exports_bound_are_said_when_the_delete_removes_them(synth_root, invoke, monkeypatch):
    from hermes_admin.profile import transcripts

    root, kinds = synth_root
    monkeypatch.setattr(transcripts, "FILES_MAX", 1000)
    sessions = home_of(root, "work") / "sessions"
    sid = kinds["work"]["old_ended"][0]
    (sessions / f"{sid}.jsonl").write_bytes(b"x" * 2000)
    doc = purge(invoke, root, "-p", "work")
    assert doc["exit_code"] == 1
    [line] = [w for r in doc["results"] for w in r["files_skipped"] if f"{sid}.jsonl" in w]
    assert "not in the export" in line and "restore cannot bring it back" in line
    assert not (sessions / f"{sid}.jsonl").exists()


def test_prune_says_the_limit_it_went_by_apart_from_each_exports_own_size(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root)
    budget = invoke("--root", str(root), "exports", "prune", "--max-size", "1k", "--dry-run")
    lines = [line for line in budget.stdout.splitlines() if "would be removed (" in line]
    assert lines and all("(its owner's exports take over 1.0 KiB (--max-size); it takes " in line for line in lines)
    aged = invoke("--root", str(root), "exports", "prune", "--older-than", "0", "--force", "--dry-run")
    assert "(older than 0 (--older-than); it takes " in aged.stdout


def test_restore_of_a_file_that_is_not_there_says_so(synth_root, invoke, tmp_path):
    """A mistyped path is a usage error naming the path, not a request for -p."""
    root, _ = synth_root
    result = invoke("--root", str(root), "restore", str(tmp_path / "nope.jsonl.gz"))
    assert result.exit_code == 2  # click's code for a usage error here; the console script exits 64
    assert "nope.jsonl.gz: no such file" in result.stderr and "-p" not in result.stderr

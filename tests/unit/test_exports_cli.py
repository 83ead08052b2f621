"""Exports as an operator meets them: where each went (report and JSON), a copy restorable without
its manifest, `exports list` with short ids and the total, `exports prune` by age or size."""

from __future__ import annotations

import json
import os
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

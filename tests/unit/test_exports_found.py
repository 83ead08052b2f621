"""Exports as a production timer leaves them: every removal named with its reason, ids that end the
file names, a deleted session found by its id in the exports, a restore that pins, and the exports
of a renamed profile folder listed, pruned and restored like the others (with a flag)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hermes_admin.profile.exports import MANIFEST, STAMP, load_manifest
from tests.helpers import home_of, row_ids

DAY = 86400.0


def purge(invoke, root, *more) -> dict:
    result = invoke("--root", str(root), "purge", "--older-than", "90d", "--yes", "--json", *more)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def exports_of(invoke, root, *more) -> list[dict]:
    return json.loads(invoke("--root", str(root), "exports", "list", "--json", *more).stdout)["exports"]


def age(path: Path, days: float) -> Path:
    """The export as if begun `days` ago: its name's stamp and its manifest's `created`."""
    then = time.time() - days * DAY
    old = path.with_name(time.strftime(STAMP, time.gmtime(then)) + path.name[16:])
    doc = load_manifest(path)
    path.rename(old)
    Path(str(path) + MANIFEST).unlink()
    Path(str(old) + MANIFEST).write_text(json.dumps(dict(doc, created=then)))
    return old


def test_ids_are_the_ends_of_the_file_names(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root)
    listed = exports_of(invoke, root)
    assert listed and all(e["file"].endswith(f"-{e['id']}.jsonl.gz") for e in listed)
    assert len({e["id"] for e in listed}) == len(listed)


def test_the_run_names_every_export_its_retention_removes(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root, "-p", "work")
    (export,) = exports_of(invoke, root)
    old = age(Path(export["file"]), 8)  # past export_keep_days (7)
    dry = json.loads(invoke("--root", str(root), "run", "--dry-run", "--json").stdout)
    (would,) = dry["exports_removed"]
    assert would["file"] == str(old) and would["why"] == "age" and would["dry_run"] and old.exists()
    human = invoke("--root", str(root), "-q", "run", "--yes")
    assert f"old export removed (age: made over 7 day(s) ago, export_keep_days): {old}" in human.stdout
    assert "1 old export(s)" in human.stdout and not old.exists()


def test_exports_prune_says_why_each_went(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root)
    listed = exports_of(invoke, root)
    age(Path(listed[0]["file"]), 40)
    doc = json.loads(invoke("--root", str(root), "exports", "prune", "--older-than", "30d", "--max-size", "1B",
                            "--yes", "--json").stdout)
    assert doc["removed_by"] == {"age": 1, "budget": len(listed) - 1}
    assert sorted(r["why"] for r in doc["removed"]) == ["age"] + ["budget"] * (len(listed) - 1)


def test_a_deleted_session_is_found_by_its_id_and_restored_pinned(synth_root, invoke):
    root, _ = synth_root
    doc = purge(invoke, root, "-p", "work")
    sid = next(d["session_id"] for r in doc["results"] for d in r["done"] if r["profile"] == "work")
    (export,) = exports_of(invoke, root)
    shown = invoke("--root", str(root), "sessions", "show", sid[:-2])  # a prefix, as for live sessions
    assert shown.exit_code == 1
    assert f"{sid}: deleted from profile 'work'" in shown.stdout and "reason prune" in shown.stdout
    # the command as it was given its roots, to be pasted as it is
    assert f"hermes-admin --root {root} restore {export['id']} --session {sid} -p work" in shown.stdout
    as_json = json.loads(invoke("--root", str(root), "sessions", "show", sid, "--json").stdout)
    assert as_json["session"] is None and as_json["deleted"][0]["file"] == export["file"]
    assert abs(as_json["deleted"][0]["exported_at"] - time.time()) < 600  # the member's own time

    back = invoke("--root", str(root), "restore", export["id"], "--session", sid, "--pin", "--yes")
    assert back.exit_code == 0, back.stderr
    assert "pinned" in back.stdout
    db = home_of(root, "work") / "state.db"
    assert sid in row_ids(db, "SELECT id FROM sessions WHERE pinned = 1")
    purge(invoke, root, "-p", "work")
    assert sid in row_ids(db)  # retention leaves a pinned session alone


def test_a_restore_without_pin_says_the_next_run_deletes_it_again(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root, "-p", "work")
    (export,) = exports_of(invoke, root)
    back = invoke("--root", str(root), "restore", export["id"], "--yes")
    assert back.exit_code == 0 and "restore --pin" in back.stdout


def test_a_session_in_no_store_and_no_export(synth_root, invoke):
    root, _ = synth_root
    shown = invoke("--root", str(root), "sessions", "show", "no-such-session")
    assert shown.exit_code == 1 and "in the stores, in their exports" in shown.stderr


def test_exports_of_a_renamed_profile_folder(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root, "-p", "work")
    before = home_of(root, "work")
    (export,) = exports_of(invoke, root)
    moved = before.with_name("work2")
    before.rename(moved)
    (listed,) = exports_of(invoke, root)
    assert listed["profile"] == "work2" and listed["made_in"] == str(before) and listed["id"] == export["id"]
    human = invoke("--root", str(root), "exports", "list")
    assert f"work2\t{export['id']}" in human.stdout and f"\t{before}\t" in human.stdout
    usage = json.loads(invoke("--root", str(root), "usage", "-p", "work2", "--json").stdout)
    assert usage["profiles"][0]["files"]["exports"] == listed["bytes"]

    refused = invoke("--root", str(root), "restore", export["id"], "--yes")
    assert refused.exit_code == 2 and "--other-profile" in refused.stderr  # refused for safety (README's table)
    done = invoke("--root", str(root), "restore", export["id"], "--other-profile", "--yes")
    assert done.exit_code == 1, done.stderr  # done, and warned: another profile's conversations are here now
    assert "warning: profile 'work2': " in done.stderr and "restored into this one as asked" in done.stderr

    old = age(Path(listed["file"]), 8)
    ran = json.loads(invoke("--root", str(root), "run", "--yes", "--json").stdout)
    assert [r["file"] for r in ran["exports_removed"]] == [str(old)] and not old.exists()


def test_the_daemons_journal_names_each_export_removed_too():
    from hermes_admin import report
    from hermes_admin.results import Result, Run

    run = Run(dry_run=False, results=[Result("work", "delete", "prune", False, task="purge", home="/h/work")])
    run.data["exports_removed"] = [{"home": "/h/work", "profile": "work", "file": "/h/work/x-1a2b3c4d.jsonl.gz",
                                    "why": "age", "keep_days": 7.0, "bytes": 8192}]
    lines = report.summary_lines(run, only_changes=True)
    assert "work: old export removed (age: made over 7 day(s) ago, export_keep_days): /h/work/x-1a2b3c4d.jsonl.gz " \
           "(8.0 KiB)" in lines and "1 old export(s), 8.0 KiB removed" in lines


def test_malformed_manifests_never_fail_sessions_show(synth_root, invoke):
    """Her manifests are her text: of the wrong shape, a FIFO, a time past any clock; `sessions
    show` of a deleted id still answers from the sound ones, never with exit 70."""
    import os

    root, _ = synth_root
    doc = purge(invoke, root, "-p", "work")
    sid = next(d["session_id"] for r in doc["results"] for d in r["done"] if r["profile"] == "work")
    (export,) = exports_of(invoke, root)
    folder = Path(export["file"]).parent
    lines = Path(export["file"] + MANIFEST).read_text().splitlines()
    member = json.loads(lines[1])
    forged = folder / "20260101T000000Z-work-0badf00d.jsonl.gz"
    forged.write_bytes(b"")
    Path(str(forged) + MANIFEST).write_text("\n".join([lines[0], json.dumps(dict(member, at=1e300))]) + "\n")
    for n, text in enumerate(['{"format": 2, "home": ["x"], "members": [{"units": 5}]}', "[" * 5000]):
        bad = folder / f"2026010{n + 2}T000000Z-work-0000000{n}.jsonl.gz"
        bad.write_bytes(b"")
        Path(str(bad) + MANIFEST).write_text(text)
    fifo = folder / "20260105T000000Z-work-0000fifo.jsonl.gz"
    fifo.write_bytes(b"")
    os.mkfifo(str(fifo) + MANIFEST)
    shown = invoke("--root", str(root), "sessions", "show", sid, "--json")
    assert shown.exit_code == 1, shown.stderr
    found = json.loads(shown.stdout)["deleted"]
    assert {f["file"] for f in found} == {export["file"], str(forged)}
    assert all(f["exported_at"] is None or f["exported_at"] < time.time() + 1 for f in found)


def test_ids_of_every_kind_of_name():
    from hermes_admin.profile.exports import export_id

    assert export_id("/e/20261203T131325Z-work-1a2b3c4d.jsonl.gz") == "1a2b3c4d"
    assert export_id("/e/20261203T131325Z-my-1a2b3c4d-12345678.jsonl.gz") == "12345678"  # a profile named so
    assert export_id("/e/20261203T131325Z-work-3f9e0a12-4242.jsonl.gz") == "3f9e0a12-4242"  # an earlier version's
    assert export_id("/e/20261203T131325Z-work-3f9e0a12-4242-3.jsonl.gz") == "3f9e0a12-4242-3"
    assert len(export_id("/e/copy.jsonl.gz")) == 8  # named by hand: derived


def test_an_export_of_an_earlier_version_restores_by_the_id_in_its_name(synth_root, invoke):
    root, _ = synth_root
    purge(invoke, root, "-p", "work")
    (export,) = exports_of(invoke, root)
    path = Path(export["file"])
    older = path.with_name(path.name.replace(f"-{export['id']}.jsonl.gz", "-3f9e0a12-4242.jsonl.gz"))
    path.rename(older)
    Path(str(path) + MANIFEST).rename(str(older) + MANIFEST)
    (listed,) = exports_of(invoke, root)
    assert listed["id"] == "3f9e0a12-4242" and listed["file"] == str(older)
    assert invoke("--root", str(root), "restore", "3f9e0a12-42", "--yes").exit_code == 0

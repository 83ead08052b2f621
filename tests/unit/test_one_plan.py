"""One plan: the confirmation prompt, the dry run and the run count the same units on the same store.

A unit the size budget (`max_store_mb`) deletes is never also counted as archived; the size budget
weighs the store as the plan leaves it (its pages in use as the pass began, less the text of what
the earlier tasks delete), so the dry run and the run pick the same units; and the prompt lists the
old exports the run's retention removes (`export_keep_days`), not only sessions.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from hermes_admin.synth.builder import SynthStore
from tests.helpers import row_ids
from tests.unit.test_size_budget import _used_mb

DAY = 86400.0


def _store(root, now, sessions=60, first_age=10):
    """One ended session a day from `first_age` days back, a few hundred KB each, and an open one."""
    store = SynthStore(root / "state.db", version=30)
    for i in range(sessions):
        sid = f"s{i:03d}"
        age = first_age + i
        store.session(sid, started=now - age * DAY, ended=now - age * DAY + 60, end_reason="x")
        store.messages(sid, 20, now - age * DAY, text="tool output line " * 300)
    store.session("open_old", started=now - 200 * DAY, source="telegram")
    store.close()


def _by_task(doc) -> dict[str, set[str]]:
    """Each task's ids acted on (a dry run: would be)."""
    found: dict[str, set[str]] = {}
    for result in doc["results"]:
        found.setdefault(result["task"], set()).update(i for d in result["done"] for i in d["ids"])
    return found


# (name, policy given the store's size in MB -> the admin config's defaults)
CASES = [
    ("the size budget and the archive sweep want the same old units",
     lambda used: {"max_store_mb": round(used / 2, 2), "retention_days": 365, "auto_archive": True,
                   "auto_archive_days": 3}),
    ("a purge first, then the size budget over what it leaves",
     lambda used: {"max_store_mb": round(used / 3, 2), "retention_days": 40, "auto_archive": False}),
    ("purge, size budget and archive together",
     lambda used: {"max_store_mb": round(used / 3, 2), "retention_days": 50, "auto_archive": True,
                   "auto_archive_days": 3}),
    ("a budget the purge alone meets", lambda used: {"max_store_mb": round(used * 0.8, 2), "retention_days": 20}),
    ("no budget", lambda used: {"retention_days": 40, "auto_archive": True, "auto_archive_days": 3}),
]


@pytest.mark.parametrize("name, policy", CASES, ids=[c[0] for c in CASES])
def test_prompt_dry_run_and_run_count_the_same(name, policy, tmp_path, now, invoke, monkeypatch):
    from hermes_admin.cli import mutate

    root = tmp_path / "h"
    _store(root, now)
    db = root / "state.db"
    config = root / "admin.yaml"
    config.write_text(yaml.safe_dump({"defaults": {"auto_prune": True, **policy(_used_mb(db))}}))
    base = ("--root", str(root), "--config", str(config))
    shutil.copytree(root, tmp_path / "copy")

    dry = json.loads(invoke(*base, "run", "--dry-run", "--json").stdout)
    planned = _by_task(dry)
    budget, archived = planned.get("size_budget", set()), planned.get("auto_archive", set())
    assert not budget & archived, "a unit the size budget deletes is also counted as archived"
    assert not budget & planned.get("purge", set())

    asked = []
    monkeypatch.setattr(mutate, "asks", lambda yes, dry_run: not (yes or dry_run))  # as on a terminal
    monkeypatch.setattr(mutate.click, "confirm", lambda question, **kw: asked.append(question) or True)
    done = invoke(*base, "run", "--json")
    assert done.exit_code in (0, 1), done.stderr
    (question,) = asked
    acted = _by_task(json.loads(done.stdout))
    assert acted == planned  # the run did what the dry run said, task by task
    deleted = len(acted.get("purge", set()) | acted.get("size_budget", set()))
    archived = len(acted.get("auto_archive", set()))
    assert f"{deleted} session(s) in" in question
    assert (f"{archived} in" in question) if archived else ("archived" not in question)  # said only when some are
    assert row_ids(db) == row_ids(tmp_path / "copy" / "state.db") - acted.get("purge", set()) - budget


def test_the_prompt_lists_export_removals(tmp_path, now, invoke, monkeypatch):
    """With `export_keep_days: 0`, nothing to delete, the exports of earlier runs (restore copies)
    go at the end of the run: the prompt says so, with their count and size, as the dry run does."""
    from hermes_admin.cli import mutate

    root = tmp_path / "h"
    _store(root, now, sessions=6, first_age=100)
    config = root / "admin.yaml"
    config.write_text(yaml.safe_dump({"defaults": {"auto_prune": True, "retention_days": 90}}))
    base = ("--root", str(root), "--config", str(config))
    first = invoke(*base, "purge", "--yes", "--json")
    assert first.exit_code == 0 and json.loads(first.stdout)["results"][0]["rows"] == 6
    exports = list((root / ".hermes-admin" / "exports").glob("*.jsonl.gz"))
    assert exports
    config.write_text(yaml.safe_dump({"defaults": {"auto_prune": True, "retention_days": 90, "export_keep_days": 0}}))
    dry = json.loads(invoke(*base, "run", "--dry-run", "--json").stdout)
    assert len(dry["exports_removed"]) == len(exports)
    asked = []
    monkeypatch.setattr(mutate, "asks", lambda yes, dry_run: not (yes or dry_run))
    monkeypatch.setattr(mutate.click, "confirm", lambda question, **kw: asked.append(question) or False)
    answered = invoke(*base, "run")
    assert answered.exit_code == 1  # "no": nothing changed
    (question,) = asked
    assert re.search(rf"{len(exports)} old export\(s\) \([0-9.]+ [KM]?i?B\) removed", question), question
    assert all(path.exists() for path in exports)

"""Profile repair on synthetic stores of both schema versions."""

from __future__ import annotations

import json
import os
import sqlite3
import stat

import pytest

from hermes_admin.profile.repair import namespace_of
from hermes_admin.synth.builder import SynthStore
from tests.conftest import fk_rows, fts_problems, store_digest
from tests.helpers import events, install_plugins, needs_host_pids, row_ids, own_interpreter


@pytest.mark.parametrize("key, owner", [
    ("agent:main:telegram:dm:1", "default"), ("agent:work:cli", "work"), ("agent::x", None),
    ("telegram:dm:1", None), (None, None), ("agent:work", None), ("agent:main~:cli", "main"),
])
def test_namespace_of(key, owner):
    assert namespace_of(key) == owner


@pytest.fixture(params=[(22, 30), (30, 22), (30, 30)], ids=["v22-to-v30", "v30-to-v22", "v30-to-v30"])
def root(request, tmp_path, now):
    source_version, target_version = request.param
    root = tmp_path / "h"
    SynthStore(root / "state.db", version=30, profile="default").close()
    work = SynthStore(root / "profiles" / "work" / "state.db", version=source_version, profile="work")
    work.session("stray", started=now - 100, ended=now - 50, end_reason="idle", source="telegram",
                 session_key="agent:main:telegram:dm:42", title="greetings", system_prompt="You are kind.")
    work.messages("stray", 3, now - 100)
    work.usage("stray", when=now - 100)
    work.session("child", started=now - 40, parent="stray")
    work.session("foreign", started=now - 90, ended=now - 45, end_reason="idle", source="telegram",
                 session_key="agent:other:telegram:dm:7", title="hello", system_prompt="You are kind.")
    work.messages("foreign", 2, now - 90)
    work.session("adopt", started=now - 30, ended=now - 20, end_reason="x", profile_name="default")
    work.session("lost", started=now - 30)
    work.conn.execute("COMMIT")
    work.conn.execute("PRAGMA foreign_keys=OFF")
    work.conn.execute("UPDATE sessions SET parent_session_id = 'nowhere' WHERE id = 'lost'")
    work.conn.execute("BEGIN")
    work.close()
    target = SynthStore(root / "profiles" / "other" / "state.db", version=target_version, profile="other")
    target.session("x", started=now, title="hello")  # a title that collides with the moved row's
    target.close()
    (root / "sessions").mkdir(exist_ok=True)
    for home in (root, root / "profiles" / "work", root / "profiles" / "other"):
        install_plugins(home, ["recorder"], enabled=["recorder"])
    return root


def test_report_then_apply_then_nothing(root, invoke):
    work, other = root / "profiles" / "work", root / "profiles" / "other"
    os.chmod(work / "state.db", 0o644)
    before = store_digest(root)
    doc = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    found = {(f["profile"], f["kind"], f["subject"]) for f in doc["findings"]}
    assert {("work", "wrong_store", "foreign"), ("work", "legacy_main", "stray"), ("work", "mislabelled", "adopt"),
            ("work", "dangling_parent", "lost"), ("work", "loose_permissions", str(work / "state.db"))} <= found
    assert ("work", "missing_folder", str(work / "logs")) in found
    assert store_digest(root) == before and not (work / "logs").exists()

    result = invoke("--root", str(root), *own_interpreter(root.parent), "repair", "--apply", "--yes", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "foreign" not in row_ids(work / "state.db") and "foreign" in row_ids(other / "state.db")
    assert len(row_ids(other / "state.db", "SELECT id FROM messages WHERE session_id='foreign'")) == 2
    (title,) = row_ids(other / "state.db", "SELECT title FROM sessions WHERE id='foreign'")
    assert title.startswith("hello (")  # `other` has a session titled "hello" already
    assert "stray" in row_ids(work / "state.db") and "stray" not in row_ids(root / "state.db")  # ambiguous: stays
    assert row_ids(work / "state.db", "SELECT id FROM sessions WHERE parent_session_id IS NULL") >= {"lost"}
    assert row_ids(work / "state.db", "SELECT profile_name FROM sessions WHERE id='adopt'") == {"work"}
    assert stat.S_IMODE(os.stat(work / "state.db").st_mode) == 0o600 and (work / "logs").is_dir()
    assert [(e["session_id"], e["reason"]) for e in events(work)] == [("foreign", "profile_repair")]
    for db in (root / "state.db", work / "state.db", other / "state.db"):
        assert fk_rows(db) == set() and fts_problems(db) == []

    again = json.loads(invoke("--root", str(root), "repair", "--apply", "--yes", "--json").stdout)
    assert [(f["kind"], f["subject"], f["fix"], f["applied"]) for f in again["findings"]] == [
        ("legacy_main", "stray", "none", False)]  # reported every time, never moved unasked
    assert "--move-legacy-main" in again["findings"][0]["detail"] and len(events(work)) == 1


def test_an_ambiguous_row_moves_to_the_default_profile_only_when_asked(root, invoke):
    """Hermes' `repair-profiles` says of an `agent:main:` row in a named profile's store that it
    cannot tell whose it is: reported, and moved only by `--move-legacy-main`."""
    work = root / "profiles" / "work"
    preview = json.loads(invoke("--root", str(root), "repair", "--move-legacy-main", "--json").stdout)
    (finding,) = [f for f in preview["findings"] if f["subject"] == "stray"]
    assert (finding["kind"], finding["target"], finding["applied"]) == ("legacy_main", "default", False)
    assert finding["fix"].startswith("move to profile 'default'") and "ambiguous" in finding["detail"]
    assert "stray" in row_ids(work / "state.db")  # a report changes nothing

    moved = invoke("--root", str(root), *own_interpreter(root.parent), "repair", "--apply", "--move-legacy-main",
                   "--yes", "--json")
    assert moved.exit_code == 0, moved.stdout + moved.stderr
    assert "stray" not in row_ids(work / "state.db") and "stray" in row_ids(root / "state.db")
    assert len(row_ids(root / "state.db", "SELECT id FROM messages WHERE session_id='stray'")) == 3
    assert row_ids(root / "state.db", "SELECT title FROM sessions WHERE id='stray'") == {"greetings"}
    assert row_ids(root / "state.db", "SELECT profile_name FROM sessions WHERE id='stray'") == {"default"}
    assert row_ids(work / "state.db", "SELECT id FROM sessions WHERE parent_session_id IS NULL") >= {"child", "lost"}
    assert sorted((e["session_id"], e["reason"]) for e in events(work)) == [
        ("foreign", "profile_repair"), ("stray", "profile_repair")]
    for db in (root / "state.db", work / "state.db"):
        assert fk_rows(db) == set() and fts_problems(db) == []
    again = json.loads(invoke("--root", str(root), "repair", "--apply", "--move-legacy-main", "--yes",
                              "--json").stdout)
    assert again["findings"] == []


def test_an_interrupted_move_is_settled(root, invoke, now):
    # Each copy reached its profile's store, the delete from `work` never happened.
    for db, sid, count in ((root / "state.db", "stray", 3), (root / "profiles" / "other" / "state.db", "foreign", 2)):
        conn = sqlite3.connect(db)
        conn.execute("INSERT INTO sessions(id, source, started_at) VALUES (?, 'telegram', ?)", (sid, now))
        conn.executemany("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                         [(sid, f"m{i}", now) for i in range(count)])
        conn.commit(), conn.close()
    doc = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    kinds = {f["subject"]: f for f in doc["findings"] if f["subject"] in ("stray", "foreign")}
    assert kinds["foreign"]["kind"] == "duplicate"
    assert kinds["stray"]["kind"] == "legacy_main" and "holds a copy" in kinds["stray"]["detail"]
    invoke("--root", str(root), "repair", "--apply", "--yes")
    assert "foreign" not in row_ids(root / "profiles" / "work" / "state.db")
    assert "stray" in row_ids(root / "profiles" / "work" / "state.db")  # the move was asked once, not now
    invoke("--root", str(root), "repair", "--apply", "--move-legacy-main", "--yes")
    assert "stray" not in row_ids(root / "profiles" / "work" / "state.db")
    assert row_ids(root / "state.db", "SELECT id FROM messages WHERE session_id='stray'").__len__() == 3


def test_unusable_stores_are_reported_never_modified(tmp_path, invoke):
    root = tmp_path / "h"
    (root / "profiles" / "bad").mkdir(parents=True)
    SynthStore(root / "state.db", version=22).close()
    (root / "profiles" / "bad" / "state.db").write_bytes(b"\x00" * 4096)
    before = (root / "profiles" / "bad" / "state.db").read_bytes()
    result = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert result.exit_code == 2
    assert any(f["kind"] == "unusable_store" for f in json.loads(result.stdout)["findings"])
    assert (root / "profiles" / "bad" / "state.db").read_bytes() == before


def _broken_fts_root(tmp_path, now):
    """A root whose store's FTS index holds a row no message has."""
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    store.session("s", started=now)
    store.messages("s", 3, now)
    store.conn.execute("INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) VALUES (999, 'ghost', NULL, NULL)")
    store.close()
    return root


@needs_host_pids
def test_broken_fts_is_found_and_rebuilt(tmp_path, now, invoke):
    root = _broken_fts_root(tmp_path, now)
    assert fts_problems(root / "state.db")
    doc = json.loads(invoke("--root", str(root), "repair", "--check-fts", "--json").stdout)
    assert any(f["kind"] == "broken_fts" for f in doc["findings"])
    invoke("--root", str(root), "repair", "--check-fts", "--apply", "--yes")
    assert fts_problems(root / "state.db") == []
    assert list((root / "state-snapshots").glob("state.db.repair-*"))  # backed up first


@needs_host_pids
def test_what_repairs_engine_sets_aside_is_said_as_a_warning(tmp_path, now, invoke):
    """A folder where our lock file goes, met by the engine `repair --apply` opens: moved aside and
    said, as any run says it, not lost with the engine, nor counted among the findings."""
    root = _broken_fts_root(tmp_path, now)
    (root / ".hermes-admin" / "lock").mkdir(parents=True)
    result = invoke("--root", str(root), "repair", "--check-fts", "--apply", "--yes", "--json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    (said,) = [w for w in doc["warnings"] if "moved aside" in w]
    assert str(root / ".hermes-admin" / "lock") in said and "profile 'default'" in said
    assert fts_problems(root / "state.db") == []
    assert "broken_fts" in [f["kind"] for f in doc["findings"]]
    assert not any("moved aside" in json.dumps(f) for f in doc["findings"] + doc["results"])


def test_run_reports_repairs_and_applies_them_when_configured(root, invoke, tmp_path):
    work = root / "profiles" / "work"
    report = json.loads(invoke("--root", str(root), "run", "-p", "work", "--json").stdout)
    (step,) = [r for r in report["results"] if r["task"] == "repair"]
    assert any("wrong_store foreign" in n for n in step["notes"]) and "foreign" in row_ids(work / "state.db")
    assert any(n.startswith("legacy_main stray") and n.endswith("(report only)") for n in step["notes"])
    config = tmp_path / "admin.yaml"
    config.write_text("defaults: {repair: apply}\n")
    applied = json.loads(invoke("--root", str(root), "--config", str(config), "run", "-p", "work", "--json").stdout)
    (step,) = [r for r in applied["results"] if r["task"] == "repair"]
    assert [d["session_id"] for d in step["done"]] == ["foreign"]  # `repair: apply` never moves an ambiguous row
    assert "foreign" not in row_ids(work / "state.db") and "foreign" in row_ids(root / "profiles" / "other" / "state.db")
    assert "stray" in row_ids(work / "state.db") and "stray" not in row_ids(root / "state.db")
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: {repair: sometimes}\n")
    refused = invoke("--root", str(root), "--config", str(bad), "run", "-p", "work")
    assert refused.exit_code == 78 and "repair must be one of report, apply" in refused.stderr  # the admin config: nothing done


def test_run_reads_a_whole_store_once_a_day_and_again_when_it_is_replaced(synth_root, invoke, monkeypatch, tmp_path):
    """quick_check reads every page (seconds on a GB store): `run` does it when the last passing
    check is older than quick_check_hours, or the store is another file; `repair` always."""
    from hermes_admin.profile import repair

    root, _ = synth_root
    checked = []
    real = repair._quick_check
    monkeypatch.setattr(repair, "_quick_check", lambda store: checked.append(store.profile.name) or real(store))

    def run(*extra):
        checked.clear()
        assert invoke("--root", str(root), *extra, "run", "--json").exit_code == 0
        return sorted(checked)

    assert invoke("--root", str(root), "run", "--dry-run", "--json").exit_code == 0
    assert sorted(checked) == ["default", "legacy", "work"] and not (root / ".hermes-admin" / "quick-check").exists()
    assert run() == ["default", "legacy", "work"]  # a dry run records nothing
    assert run() == []
    work = root / "profiles" / "work" / "state.db"
    os.rename(work, work.with_suffix(".old"))  # a new file (another inode) in its place
    os.link(work.with_suffix(".old"), work.with_suffix(".new"))
    (work.with_suffix(".new")).rename(work)
    assert run() == []  # the same inode under another name is the same store
    work.write_bytes(work.with_suffix(".old").read_bytes())
    os.unlink(work.with_suffix(".old"))
    assert run() == []  # rewritten in place: same inode; the day decides
    copy = work.with_name("copy.db")
    copy.write_bytes(work.read_bytes())
    copy.rename(work)
    assert run() == ["work"]
    (root / ".hermes-admin" / "quick-check").write_text("{garbage")
    assert run() == ["default"]
    config = tmp_path / "admin.yaml"
    config.write_text("defaults:\n  quick_check_hours: 0\n")
    assert run("--config", str(config)) == ["default", "legacy", "work"]
    checked.clear()
    assert invoke("--root", str(root), "repair", "--json").exit_code in (0, 1)  # 1: it found things
    assert sorted(checked) == ["default", "legacy", "work"]


def test_run_counts_the_repair_findings_by_kind_from_the_findings(root, invoke):
    """`run`'s report-only repair is counted per profile and kind, not listed (each listed under -v)."""
    said = invoke("--root", str(root), "run", "--dry-run", "-p", "work").stdout
    line = next(line for line in said.splitlines() if line.startswith("work: repair: "))
    assert "finding(s)" in line
    summary = next(line for line in said.splitlines() if line.startswith("  ") and "dangling_parent" in line)
    assert "1 dangling_parent" in summary and "1 wrong_store" in summary and "repair -p work" in summary


def test_a_move_whose_delete_fails_says_so_on_its_finding_and_the_other_fixes_run(root, invoke, monkeypatch):
    """The row is copied, then the delete here fails (the disk, say): the copy is kept, the finding says
    it was not deleted here and why, and the profile's other fixes are applied all the same."""
    from hermes_admin.profile.engine.engine import Engine

    work, other = root / "profiles" / "work", root / "profiles" / "other"
    delete = Engine.delete

    def failing(self, units, reason, *args, **kwargs):
        if reason == "profile_repair":
            raise OSError(5, "Input/output error")
        return delete(self, units, reason, *args, **kwargs)

    monkeypatch.setattr(Engine, "delete", failing)
    result = invoke("--root", str(root), *own_interpreter(root.parent), "repair", "--apply", "--yes", "--json")
    findings = {f["subject"]: f for f in json.loads(result.stdout)["findings"]}
    assert findings["foreign"]["applied"] is False
    assert findings["foreign"]["error"] == "copied, but not deleted here: [Errno 5] Input/output error"
    assert "foreign" in row_ids(work / "state.db") and "foreign" in row_ids(other / "state.db")
    assert findings["lost"]["applied"] is True and findings["adopt"]["applied"] is True

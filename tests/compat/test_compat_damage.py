"""Issue 45: a damaged store is that profile's problem on every command, named by what is damaged.

Stores written by the real releases (0.19.0 in WAL, 0.22.2 in a rollback journal), with pages of
one kind overwritten (tests/damage.py finds them through SQLite's own page map), cut short, or
replaced by a file that is no database. Every command lists the damaged profile, says in one line
which structure is damaged, exits 2 (never 70) and goes on with the healthy profile beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from tests import damage
from tests.conftest import NOW, store_digest
from tests.helpers import home_of

PROFILES = ["default", "work"]
RELEASES = ["0.19.0", "0.22.2"]


@pytest.fixture(scope="module", params=RELEASES)
def built(request, tmp_path_factory, hermes_peer):
    root = tmp_path_factory.mktemp(f"hermes-{request.param}") / "hermes"
    hermes_peer.build_root(root, PROFILES, NOW, orphans=False, release=request.param, scenario="releases")
    for name in PROFILES:
        damage.settle(home_of(root, name) / "state.db")
    return request.param, root


def copy_of(built, folder):
    shutil.copytree(built[1], folder, symlinks=True)
    return folder


DAMAGES = {
    "table": (lambda db: damage.tear(db, "sessions"), "table sessions"),
    "messages": (lambda db: damage.tear(db, "messages", 2), "table messages"),
    "index": (lambda db: damage.tear(db, "idx_messages_session"), "index idx_messages_session"),
    "fts": (lambda db: damage.tear(db, "messages_fts_data"), "full-text index messages_fts"),
    "cut": (lambda db: damage.cut_short(db), "file length"),
}

VIEWS = [("profiles",), ("status",), ("usage",), ("sessions", "list"), ("exports", "list"), ("config", "show"),
         ("repair",), ("run", "--dry-run"), ("run",)]


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_every_command_names_the_damage_and_goes_on(built, tmp_path, invoke, kind):
    root = copy_of(built, tmp_path / "hermes")
    hurt, said = DAMAGES[kind]
    work = home_of(root, "work") / "state.db"
    hurt(work)
    before = store_digest(root)
    # `run` first when the view's own reads need not meet the damage: the last check is what they say then
    for args in [("run",), *VIEWS]:
        done = invoke("--root", str(root), *args, "--json")
        doc = json.loads(done.stdout)
        assert done.exit_code == 2, (args, done.exit_code, done.stdout[-2000:])
        errors = doc.get("errors", [])
        lines = [e for e in errors if "'work'" in e] + [p.get("error") or "" for p in doc.get("profiles", [])]
        assert any(said in line and str(work) in line for line in lines), (args, errors)
        assert not any("internal error" in e for e in errors), (args, errors)
        assert not any("'default'" in e for e in errors), (args, errors)
    listed = json.loads(invoke("--root", str(root), "profiles", "--json").stdout)["profiles"]
    assert {p["name"]: p["ok"] for p in listed} == {"default": True, "work": False}
    assert json.loads(invoke("--root", str(root), "sessions", "list", "-p", "default", "--json").stdout)["sessions"]
    assert store_digest(root)[str(work)] == before[str(work)]  # reports and dry runs write nothing to it


def test_repair_counts_what_can_still_be_read(built, tmp_path, invoke):
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    damage.tear(work, "messages", 1)
    doc = json.loads(invoke("--root", str(root), "repair", "--json").stdout)
    (finding,) = [f for f in doc["findings"] if f["profile"] == "work"]
    assert finding["kind"] == "damaged_store"
    assert "table messages (1 page unreadable)" in finding["detail"] and "rows still readable: sessions" in finding["detail"]
    assert "hermes sessions recover" in finding["detail"]


def test_not_a_database_gets_a_next_step_and_keeps_its_mode(built, tmp_path, invoke):
    """Issue 48, A7: no chmod of what repair says it leaves untouched; a next step."""
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    work.write_bytes(b"this is no database" * 300)
    os.chmod(work, 0o644)
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code == 2
    errors = json.loads(done.stdout)["errors"]
    (line,) = [e for e in errors if str(work) in e]
    assert "not a SQLite database" in line and "backup" in line and "left untouched" in line
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o644


def test_an_index_torn_keeps_every_row_readable_and_says_so(built, tmp_path, invoke):
    root = copy_of(built, tmp_path / "hermes")
    work = home_of(root, "work") / "state.db"
    damage.tear(work, "idx_messages_session")
    before = store_digest(root)[str(work)]
    done = invoke("--root", str(root), "repair", "--apply", "--yes", "--json")
    assert done.exit_code == 2
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["profile"] == "work"]
    assert "index idx_messages_session" in finding["detail"] and "every row is still readable" in finding["detail"]
    assert store_digest(root)[str(work)] == before  # nothing claimed, nothing changed

"""Every maintenance task, a part of the store at a time, does what one graph of every row does.

`_Pass._parts` feeds the pure rules the linked sessions together and the rest in
batches (memory bounded whatever the store's size). Here the batches hold two rows,
against a reference that hands the rules the whole store at once, on identical copies.
"""

from __future__ import annotations

import functools
import json
import shutil
import sqlite3

import pytest

from hermes_admin.profile import parts
from hermes_admin.profile.actions import maintenance
from hermes_admin.profile.lineage import Graph
from hermes_admin.profile.store.read import load_sessions
from tests.helpers import home_of, row_ids


def one_graph(self, task, result, only=None, total=None):
    yield Graph(load_sessions(self.engine.store))


def archived(store) -> set[str]:
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM sessions WHERE archived = 1")}


def outcome(stdout: str, root) -> dict:
    """Per (profile, task): ids acted on, kept (id or file -> why), files removed, rows; paths made relative."""
    def rel(path: str) -> str:
        return path.replace(str(root), "<root>")

    by_task = {}
    for r in json.loads(stdout)["results"]:
        by_task[(r["profile"], r["task"])] = (sorted(i for d in r["done"] for i in d["ids"]),
                                              {rel(k): why for k, why in r["kept"].items()},
                                              sorted(rel(f) for f in r["files_removed"]), r["rows"])
    return by_task


def run_both(command, root, tmp_path, invoke, monkeypatch, owner, name, whole_graph) -> tuple[dict, dict]:
    """The command on a copy of `root` with `owner.name` handing out one graph of every row, then
    on `root` in batches of two; checks both stores were left alike, returns both outcomes."""
    whole = tmp_path / "whole"
    shutil.copytree(root, whole, symlinks=True)
    args = (*command, "--yes", "--json")
    with monkeypatch.context() as patch:
        patch.setattr(owner, name, whole_graph)
        reference = invoke("--root", str(whole), *args)
    assert reference.exit_code in (0, 1), reference.stderr
    monkeypatch.setattr(parts, "session_batches", functools.partial(parts.session_batches, size=2))
    monkeypatch.setattr(maintenance, "CHUNK", 1)  # the ghost sweep's files, one at a time
    batched = invoke("--root", str(root), *args)
    assert batched.exit_code in (0, 1), batched.stderr
    for profile in ("default", "work", "legacy"):
        mine_db, ref_db = home_of(root, profile) / "state.db", home_of(whole, profile) / "state.db"
        assert (row_ids(mine_db), archived(mine_db)) == (row_ids(ref_db), archived(ref_db))
    return outcome(batched.stdout, root), outcome(reference.stdout, whole)


@pytest.mark.parametrize("command", [
    ("purge", "--older-than", "90"),
    ("purge", "--source", "cli", "--before", "1d"),  # filters: the guard counts over the parts first
    ("sweep-empty",),
    ("prune-ghosts",),
    ("archive-inactive", "--days", "30"),
    ("run",),
])
def test_tasks_by_parts_do_what_one_graph_does(command, synth_root, invoke, monkeypatch, tmp_path):
    root, kinds = synth_root
    mine, theirs = run_both(command, root, tmp_path, invoke, monkeypatch, maintenance._Pass, "_parts", one_graph)
    assert mine == theirs
    assert any(theirs[key][0] for key in theirs)  # the commands did act on something
    if "prune-ghosts" in command or "run" in command:
        files = [f for key in mine for f in mine[key][2]]
        kept = [k for key in mine for k in mine[key][1]]
        for name, k in kinds.items():
            assert all(any(sid in f for f in files) for sid in k["orphan_file_old"]), name
            assert all(any(sid in f for f in kept) for sid in k["orphan_file_fresh"]), name


def whole_store(store):
    yield Graph(load_sessions(store))


@pytest.mark.parametrize("command", [
    ("sessions", "delete", "--source", "cli", "--before", "1d"),
    ("sessions", "delete", "--min-messages", "1", "--force"),  # every candidate: the guard counted the parts
    ("sessions", "archive", "--before", "10d"),
])
def test_sessions_commands_by_parts_do_what_one_graph_does(command, synth_root, invoke, monkeypatch, tmp_path):
    from hermes_admin.profile.actions import sessions

    root, _ = synth_root
    mine, theirs = run_both(command, root, tmp_path, invoke, monkeypatch, sessions, "graph_parts", whole_store)
    assert mine == theirs and any(v[0] for v in theirs.values())

"""Each owner's job carries only what concerns that owner's homes, and no worker is told which
session ids were asked for, so none can answer for them (docs/design.md §10)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from hermes_admin.cli.mutate import matches_of
from hermes_admin.host.runner import only_theirs
from hermes_admin.model import Profile
from hermes_admin.protocol import Change, PruneExports, Resolve

ALICE = Profile(Path("/home/alice/.hermes"), "default", Path("/home/alice/.hermes"))
BOB = Profile(Path("/home/bob/.hermes"), "work", Path("/home/bob/.hermes/profiles/work"))


def test_a_change_and_an_exports_prune_carry_only_the_owners_homes():
    change = Change("delete", False, ids={str(ALICE.home): ("a1",), str(BOB.home): ("b1", "b2")})
    assert only_theirs(change, [BOB]).ids == {str(BOB.home): ("b1", "b2")}
    assert only_theirs(change, [ALICE]).ids == {str(ALICE.home): ("a1",)}
    prune = PruneExports(False, {str(ALICE.home): ("/home/alice/x.jsonl.gz",), str(BOB.home): ("/b/y.jsonl.gz",)})
    assert only_theirs(prune, [ALICE]).files == {str(ALICE.home): ("/home/alice/x.jsonl.gz",)}


def test_resolve_tells_no_worker_what_is_wanted():
    assert [f.name for f in fields(Resolve) if f.init] == []


def test_ids_are_matched_on_the_host_and_only_in_the_rows_own_home():
    rows = [{"home": str(ALICE.home), "ids": ["20261206_0001_aa", "20261206_0002_bb"]},
            {"home": str(BOB.home), "ids": ["20261206_0001_aa"]},
            {"home": "/elsewhere", "ids": ["20261206_0002_bbcc"]}]
    found = matches_of(["20261206_0002", "20261206_0001_aa", "nothing"], [ALICE, BOB], rows)
    assert found["20261206_0002"] == [(ALICE, "20261206_0002_bb")]
    assert found["20261206_0001_aa"] == [(ALICE, "20261206_0001_aa"), (BOB, "20261206_0001_aa")]
    assert found["nothing"] == []

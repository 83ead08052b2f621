"""Hostile and broken input: bounded YAML, escaped output, one bad profile never stops the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc

import pytest

from hermes_admin import yamlfile
from hermes_admin.shown import clean
from hermes_admin.synth.builder import SynthStore
from tests.helpers import home_of

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.mark.parametrize("text, says", [
    (BOMB, "unfold into over"),
    ("a: &a [*a]\n", "refers to a value that holds it"),
    ("[" * 5000 + "]" * 5000, "levels deep"),
    ("a: [1, 2\n", "not valid YAML (line 2)"),
], ids=["bomb", "recursive", "deep", "broken"])
def test_yaml_bombs_and_garbage_are_refused_fast(text, says):
    """Refused before anything unfolds: measured in memory, which no machine's load changes (the
    bomb unfolded would be 387 million values; refusing it takes some 25 KB)."""
    tracemalloc.start()
    try:
        with pytest.raises(yamlfile.YAMLRefused) as refused:
            yamlfile.parse(text, "/x/config.yaml")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert says in str(refused.value) and str(refused.value).startswith("/x/config.yaml: ")
    assert peak < 1 << 20


# 150 levels, within the bound libyaml is trusted with; under `sessions`, which a profile's config is read for
DEEP_BLOCK = "sessions:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 150)) + " " * 150 + "v\n"


@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "pure-python"])
@pytest.mark.parametrize("text, says", [
    (BOMB, "unfold into over"),
    ("a: &a [*a]\n", "refers to a value that holds it"),
    (DEEP_BLOCK, "levels deep"),
    ("- " * 5000 + "x\n", "levels deep"),  # past the bound libyaml is trusted with: always pure Python
    ("sessions: {a: 1\n", "not valid YAML"),
], ids=["bomb", "recursive", "deep-block", "deep-dashes", "broken"])
def test_both_loaders_refuse_the_same_files(monkeypatch, pure, text, says):
    if pure:
        monkeypatch.setattr(yamlfile, "C_NESTING", -1)
    for keys in (None, frozenset({"sessions"})):
        with pytest.raises(yamlfile.YAMLRefused, match=says):
            yamlfile.parse(text, "/x/config.yaml", keys)


CONFIGS = [
    "model: {default: m}\nsessions:\n  retention_days: 30\n  auto_prune: true\nplugins:\n  enabled: [a, b]\n",
    "base: &b {retention_days: 7, auto_prune: yes}\nsessions:\n  <<: *b\n  retention_days: 9\n",
    "<<: {sessions: {retention_days: 3}}\nplugins: {hook_callback_timeout: 0}\n",
    "sessions: {retention_days: 1}\nsessions: {retention_days: 2}\n",  # the last of a duplicated key wins
    "'sessions': !!map {auto_archive: on}\nother: [1, 2, {x: 2001-12-14}]\n",
    "sessions: [not, a, mapping]\n",
    "- a list\n",
    "",
]


@pytest.mark.parametrize("text", CONFIGS)
def test_both_loaders_read_the_same_values_and_keys_pick_only_their_sections(monkeypatch, text):
    keys = frozenset({"sessions", "plugins"})
    fast_all, fast_keys = yamlfile.parse(text, "x"), yamlfile.parse(text, "x", keys)
    monkeypatch.setattr(yamlfile, "C_NESTING", -1)
    assert (yamlfile.parse(text, "x"), yamlfile.parse(text, "x", keys)) == (fast_all, fast_keys)
    if isinstance(fast_all, dict):
        assert fast_keys == {k: v for k, v in fast_all.items() if k in keys}
    else:
        assert fast_keys == fast_all


def test_yaml_files_that_are_too_big_or_not_files_are_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("k: " + "v" * (yamlfile.MAX_BYTES + 10) + "\n")
    with pytest.raises(yamlfile.YAMLRefused, match="at most"):
        yamlfile.load(big)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(yamlfile.YAMLRefused, match="not a plain file"):
        yamlfile.load(fifo)  # never blocks on a fifo
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    with pytest.raises(yamlfile.YAMLRefused, match="not a plain file"):
        yamlfile.load(folder)


def test_a_bomb_in_one_profile_names_it_and_the_others_still_run(synth_root, invoke):
    root, _ = synth_root
    (home_of(root, "work") / "config.yaml").write_text(BOMB)
    started = time.monotonic()
    result = invoke("--root", str(root), "run", "--dry-run", "--json")
    assert time.monotonic() - started < 60  # refused, not expanded: a bomb expanded never ends (a hang guard)
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert any("profile 'work'" in e and "config.yaml" in e and "refused" in e for e in doc["errors"])
    assert {r["profile"] for r in doc["results"]} >= {"default", "legacy"}
    assert len(result.stderr) < 20_000


def test_escape_sequences_in_data_never_reach_the_terminal(tmp_path, now, invoke):
    root = tmp_path / "h"
    store = SynthStore(root / "state.db", version=30)
    evil = "\x1b]0;owned\x07\x1b[2J\rall profiles OK\n[link=http://x]click[/link]\u202e"
    store.session("s1", started=now - 200 * 86400, ended=now - 199 * 86400, end_reason="x", title=evil)
    store.close()
    listing = invoke("--root", str(root), "sessions", "list")
    shown = invoke("--root", str(root), "sessions", "show", "s1")
    purge = invoke("--root", str(root), "purge", "--older-than", "90", "--dry-run", "-v")
    for result in (listing, shown, purge):
        for stream in (result.stdout, result.stderr):
            assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream and "\u202e" not in stream
    assert "\\x1b" in listing.stdout or "\\x1b" in shown.stdout
    assert "[link=http://x]" in shown.stdout  # markup is shown as text, never interpreted
    as_json = json.loads(invoke("--root", str(root), "sessions", "show", "s1", "--json").stdout)
    assert as_json["session"]["title"] == evil  # --json stays exact


def test_clean_escapes_controls_and_bounds_length():
    assert clean("a\x1b[1mb\nc") == "a\\x1b[1mb\\x0ac"
    assert clean("x" * 50, limit=10) == "x" * 10 + "…"


@pytest.mark.parametrize("text", [
    "[']', " * 50000 + "x" + "]" * 50000 + "\n",  # a quoted `]` after each `[`: the nest is 50 000 deep
    "sessions: " + "[ #]\n" * 60000 + "x" + "]" * 60000,  # the same with comments
], ids=["quoted-brackets", "commented-brackets"])
def test_a_nest_hidden_behind_quotes_is_refused_not_a_crash(text, tmp_path):
    """libyaml recurses without a limit: such a text must never reach it (a crash would end every
    profile's run), so it is run in a process of its own here."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    code = ("import sys; from hermes_admin import yamlfile\n"
            "try:\n    yamlfile.load_mapping(__import__('pathlib').Path(sys.argv[1]), keys=frozenset({'sessions'}))\n"
            "except yamlfile.YAMLRefused as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "levels deep" in done.stdout, (done.returncode, done.stderr[-300:])


@pytest.mark.parametrize("text, expect", [
    ("sessions: {a:\t1}\n", {"sessions": {"a": 1}}),  # libyaml refuses it, PyYAML (as Hermes) reads it
    ("x: a\x7fb\n# " + "-" * 600 + "\n", "not valid YAML"),  # the pure-Python path, a forbidden character
    ("sessions: !!int abc\n", "not valid YAML"),
    ("sessions:\n  a: !!timestamp x\n", "not valid YAML"),
])
def test_what_hermes_reads_is_read_and_what_nobody_can_is_one_error(text, expect):
    keys = frozenset({"sessions", "plugins"})
    if isinstance(expect, dict):
        assert yamlfile.parse(text, "/x/config.yaml", keys) == expect
    else:
        with pytest.raises(yamlfile.YAMLRefused, match=expect):
            yamlfile.parse(text, "/x/config.yaml", keys)


def test_a_set_is_not_a_mapping(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("--- !!set\n? sessions\n? plugins\n")
    with pytest.raises(yamlfile.YAMLRefused, match="must be a mapping of keys, not set"):
        yamlfile.load_mapping(path, keys=frozenset({"sessions"}))

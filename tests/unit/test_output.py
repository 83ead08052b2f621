"""Output people and scripts read: tables that fit 80 columns without cutting what is copied, plain
lines when piped, and a closed pipe that changes neither the exit code nor what reaches stderr."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from hermes_admin import tables


@pytest.fixture
def terminal(monkeypatch):
    """The CLI's tables drawn as on a terminal of 80 columns (what they print is returned)."""
    screen = io.StringIO()
    monkeypatch.setattr(tables, "_terminal", lambda: True)
    monkeypatch.setattr(tables, "_console", lambda: Console(file=screen, width=80, force_terminal=True,
                                                            color_system=None, highlight=False))
    return screen


def purge_some(invoke, root):
    assert invoke("--root", str(root), "purge", "--older-than", "1d", "--yes", "--force").exit_code in (0, 1)


@pytest.mark.parametrize("command, key", [(["profiles", "--json"], "profiles"), (["sessions", "list", "--json"], "sessions"),
                                          (["exports", "list", "--json"], "exports")])
def test_at_80_columns_ids_names_and_paths_are_whole(synth_root, invoke, terminal, command, key):
    root, _ = synth_root
    if key == "exports":
        purge_some(invoke, root)
    rows = json.loads(invoke("--root", str(root), *command).stdout)[key]
    assert rows
    result = invoke("--root", str(root), *command[:-1])
    lines = terminal.getvalue().splitlines()
    assert lines and "│" not in terminal.getvalue()
    wanted = {"profiles": ("name", "home"), "sessions": ("profile", "id"), "exports": ("profile", "id", "file")}[key]
    for row in rows:
        for field in wanted:
            assert any(row[field] in line for line in lines), (field, row[field], terminal.getvalue())
    table_lines = [line for line in lines if not line.startswith("  ")]  # under its row: a whole path
    assert all(len(line) <= 80 for line in table_lines), terminal.getvalue()
    assert result.exit_code == 0


def test_a_long_title_is_cut_but_the_id_is_not(terminal):
    tables.show([tables.Column("id", whole=True), tables.Column("title", cut=True), tables.Column("n", drop=1)],
                [["20261202_165854_9fef1a2b3c", "a title far longer than any terminal " * 4, 3]])
    text = terminal.getvalue()
    assert "20261202_165854_9fef1a2b3c" in text and "…" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_a_long_reason_wraps_whole_at_80_columns(terminal):
    why = "not in plugins.enabled of this profile's config.yaml, so Hermes never imports it (nor do we)"
    tables.show([tables.Column("profile", whole=True), tables.Column("plugin", whole=True),
                 tables.Column("why", wrap=True)], [["work", "deletion-audit", why]])
    text = terminal.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()) and "…" not in text
    assert " ".join(" ".join(line.split()[2:] if "deletion-audit" in line else line.split())
                    for line in text.splitlines()[2:]) == why


def test_piped_tables_are_plain_tab_separated_lines(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "profiles")
    lines = result.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["profile", "home", "ok"]
    assert len(lines) == 4 and all(len(line.split("\t")) == 15 for line in lines)
    assert not set("│┃━─┏") & set(result.stdout)


def test_plain_on_a_terminal_too(synth_root, invoke, terminal):
    root, _ = synth_root
    result = invoke("--root", str(root), "--plain", "sessions", "list")
    assert terminal.getvalue() == "" and result.stdout.startswith("profile\tid\ttitle\t")


def test_a_cell_never_breaks_its_line(capsys):
    tables.PLAIN = True
    try:
        tables.show([tables.Column("a"), tables.Column("b")], [["x\ty", "two\nlines"]])
    finally:
        tables.PLAIN = False
    assert capsys.readouterr().out.splitlines() == ["a\tb", "x\\x09y\ttwo\\x0alines"]


def run_into_a_closed_pipe(*args, env=None, stderr_too=False):
    """The console script with a stdout whose reader is gone before it writes (what `| head -1` becomes;
    `stderr_too`: `2>&1 | head -1`)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "hermes_admin", *args], stdout=write,
                              stderr=write if stderr_too else subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_ADMIN_CONFIG="", **(env or {})), timeout=120)
    finally:
        os.close(write)
    return done


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["profiles"], ["profiles", "--json"], ["sessions", "list"]])
def test_a_closed_pipe_keeps_the_exit_code_and_the_errors(synth_root, command):
    root, _ = synth_root
    broken = root / "profiles" / "broken"
    broken.mkdir()
    (broken / "state.db").write_bytes(b"\x00garbage" * 512)
    done = run_into_a_closed_pipe("--root", str(root), *command)
    assert done.returncode == 2, done.stderr
    assert "profile 'broken'" in done.stderr and "Traceback" not in done.stderr


def test_both_streams_into_a_closed_pipe_keep_the_exit_code(synth_root):
    root, _ = synth_root
    broken = root / "profiles" / "broken"
    broken.mkdir()
    (broken / "state.db").write_bytes(b"\x00garbage" * 512)
    assert run_into_a_closed_pipe("--root", str(root), "run", "--dry-run", stderr_too=True).returncode == 2


def test_help_into_a_closed_pipe_is_fine():
    assert run_into_a_closed_pipe("--help").returncode == 0


def test_sessions_list_says_when_it_stops_at_the_limit(synth_root, invoke):
    root, _ = synth_root
    doc = json.loads(invoke("--root", str(root), "sessions", "list", "-n", "5", "--json").stdout)
    assert len(doc["sessions"]) == 5 and doc["total"] > 5
    human = invoke("--root", str(root), "sessions", "list", "-n", "5")
    assert f"5 of {doc['total']} sessions shown" in human.stderr


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as if stdout were a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert not tables._console().no_color
    monkeypatch.setenv("NO_COLOR", "1")
    assert tables._console().no_color


def test_stdout_never_says_nothing_to_do_where_stderr_says_why_it_stopped(synth_root, invoke, tmp_path):
    """A profile lock held, an export folder that cannot be made: stdout says nothing was done, and why."""
    import fcntl

    root, _ = synth_root
    lock = root / "profiles" / "work" / ".hermes-admin" / "lock"
    lock.parent.mkdir(exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        locked = invoke("--root", str(root), "run", "--yes")
    assert locked.exit_code == 3 and "another hermes-admin run holds this profile" in locked.stderr
    assert "work: nothing to do" not in locked.stdout
    assert "work: nothing done: " in locked.stdout and "holds this profile" in locked.stdout
    (tmp_path / "a-file").write_text("")
    folder = tmp_path / "a-file" / "exports"
    unwritable = invoke("--root", str(root), "run", "--yes", "-p", "work", "--export-dir", str(folder))
    assert unwritable.exit_code == 2 and "cannot make the export folder" in unwritable.stderr
    assert "nothing to do" not in unwritable.stdout
    assert "work: nothing done: " in unwritable.stdout and "cannot make the export folder" in unwritable.stdout
    quiet = invoke("--root", str(root), "-q", "run", "--yes", "-p", "work", "--export-dir", str(folder))
    assert quiet.stdout == ""  # -q: the problem is on stderr alone


def test_a_value_too_long_for_its_column_goes_under_its_row_and_the_short_ones_stay(terminal):
    """`config show --origin` at 80 columns: each value beside its key, a long path under its row."""
    path = "/home/alice/.hermes/profiles/work/.hermes-admin/exports-of-a-long-folder-name"
    origin = "/home/alice/.hermes/profiles/work/config.yaml: sessions.retention_days"
    tables.show([tables.Column(n, whole=True) for n in ("profile", "key", "value", "origin")],
                [["work", "retention_days", "90d", origin], ["work", "export_dir", path, "built-in"]])
    lines = terminal.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines if not line.startswith("  "))
    assert "retention_days" in lines[2] and "90d" in lines[2] and lines[3] == f"  origin: {origin}"
    assert "export_dir" in lines[4] and "built-in" in lines[4] and "↓" in lines[4]
    assert lines[5] == f"  value: {path}"


def test_a_column_whose_every_value_is_too_long_goes_under_the_rows_entire(terminal):
    """`sessions list` with long ROOT:NAME labels: the labels under each row, no column of ↓, and a
    column dropped for room comes back once they are gone."""
    label = "/srv/hermes/users/alice/a-long-root-folder/.hermes:default"
    tables.show([tables.Column("profile", whole=True), tables.Column("id", whole=True),
                 tables.Column("source", drop=1)],
                [[label, "20261203_144231_4d2ffb", "cli"], [label, "20261203_144231_2e56db", "telegram"]])
    lines = terminal.getvalue().splitlines()
    assert "↓" not in terminal.getvalue() and "source" in lines[0]
    assert lines[2].split() == ["20261203_144231_4d2ffb", "cli"] and lines[3] == f"  profile: {label}"


def test_at_80_columns_counts_and_sizes_stay_ahead_of_paths_and_hidden_columns_are_named(terminal):
    """`profiles` with a long home: the home goes under its row before a count or a size is hidden,
    and a line names the columns not shown."""
    from hermes_admin.cli.profiles_cmd import COLUMNS

    home = "/home/alice-with-a-long-name/.hermes/profiles/work"
    tables.show(COLUMNS, [["work", home, "yes", 31, "delete", 1234, 56789, 3, 1, 0, 2, "260.0 KiB", "0 B",
                           "2026-12-06 15:42", "0.22.2"]])
    lines = terminal.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), terminal.getvalue()
    assert lines[0].split()[:4] == ["profile", "ok", "sessions", "messages"] and "store" in lines[0]
    assert "1234" in lines[2] and "56789" in lines[2] and "260.0 KiB" in lines[2]
    assert lines[3] == f"  home: {home}"
    note = " ".join(lines[4:])
    assert note.startswith("(not shown at 80 columns: ") and "hermes" in note and "journal" in note
    assert "sessions" not in note and "home" not in note


def test_a_table_that_fits_says_nothing_of_hidden_columns(terminal):
    tables.show([tables.Column("profile", whole=True), tables.Column("n", drop=1)], [["work", 3]])
    assert "not shown" not in terminal.getvalue()

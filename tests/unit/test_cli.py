import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import counts, store_digest

KEYS = ["profile", "name", "home", "store", "ok", "error", "schema_version", "journal_mode", "sessions", "messages",
        "archived", "live", "empty", "store_bytes", "wal_bytes", "last_activity", "auto_vacuum",
        "reclaimable_bytes", "reclaim_waits_for", "hermes", "policy", "policy_error",
        "stale_open", "sqlite", "broken_holds"]


def add_garbage_profile(root, name="broken"):
    home = root / "profiles" / name
    home.mkdir(parents=True)
    (home / "state.db").write_bytes(b"\x00garbage" * 512)
    return home


def test_profiles_json_lists_every_profile_and_flags_the_broken_one(synth_root, invoke):
    root, _ = synth_root
    add_garbage_profile(root)
    (root / "profiles" / "fresh").mkdir()  # a home without a store yet
    before = store_digest(root)
    result = invoke("--root", str(root), "profiles", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert list(doc) == ["profiles", "errors", "exit_code"] and doc["exit_code"] == 2
    assert any("'broken'" in e for e in doc["errors"])
    rows = {r["name"]: r for r in doc["profiles"]}
    assert set(rows) == {"default", "work", "legacy", "broken", "fresh"}
    assert all(list(r) == KEYS for r in rows.values())
    for name in ("default", "work", "legacy"):
        r = rows[name]
        assert r["ok"] is True and r["error"] is None
        expected = counts(root / r["store"])
        assert {k: r[k] for k in expected} == expected
        assert r["journal_mode"] == "wal" and r["empty"] == 3
    assert rows["legacy"]["schema_version"] == 22 and rows["work"]["schema_version"] == 30
    assert rows["broken"]["ok"] is False and "not a database" in rows["broken"]["error"]
    assert "'broken'" in result.stderr
    assert rows["fresh"]["store"] is None and rows["fresh"]["ok"] is True
    assert store_digest(root) == before


def test_profiles_table_and_filter(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "profiles", "-p", "work")
    assert result.exit_code == 0
    assert "work" in result.stdout and "legacy" not in result.stdout
    missing = invoke("--root", str(root), "profiles", "-p", "nope")
    assert missing.exit_code == 2 and "profile 'nope': not found" in missing.stderr


def test_hermes_home_of_a_named_profile_means_its_root(synth_root, tmp_path):
    root, _ = synth_root
    env = dict(os.environ, HERMES_HOME=str(root / "profiles" / "work"), HOME=str(tmp_path),
               HERMES_ADMIN_CONFIG="")
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "profiles", "--json"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert {r["name"] for r in json.loads(done.stdout)["profiles"]} == {"default", "work", "legacy"}


def test_missing_root_is_an_error(invoke, tmp_path):
    result = invoke("--root", str(tmp_path / "nowhere"), "profiles", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"profiles": [], "errors": [f"root {tmp_path / 'nowhere'}: no such folder"],
                                         "exit_code": 2}
    assert "no such folder" in result.stderr


def test_sessions_list_orders_by_activity_and_limits(synth_root, invoke):
    root, kinds = synth_root
    result = invoke("--root", str(root), "sessions", "list", "-p", "work", "--limit", "5", "--json")
    assert result.exit_code == 0
    listed = json.loads(result.stdout)["sessions"]
    assert len(listed) == 5
    activity = [s["last_activity"] for s in listed]
    assert activity == sorted(activity, reverse=True)
    assert listed[0]["id"] in kinds["work"]["just_ended_empty"]
    human = invoke("--root", str(root), "sessions", "list", "-n", "3")
    assert human.exit_code == 0 and "profile" in human.stdout


def test_sessions_list_keeps_going_past_a_broken_store(synth_root, invoke):
    root, _ = synth_root
    add_garbage_profile(root)
    result = invoke("--root", str(root), "sessions", "list", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["sessions"] and len(doc["errors"]) == 1 and "broken" in doc["errors"][0]


def test_sessions_show_lineage_delegates_and_files(synth_root, invoke):
    root, kinds = synth_root
    k = kinds["work"]
    tip = k["lineage"][2]
    result = invoke("--root", str(root), "sessions", "show", tip[:-2], "-p", "work", "--json")
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)["session"]
    assert shown["id"] == tip and shown["lineage"] == k["lineage"]
    assert shown["compression_parent"] == k["lineage"][1] and shown["open"] is True
    parent = k["delegate_parent"][0]
    shown = json.loads(invoke("--root", str(root), "sessions", "show", parent, "--json").stdout)["session"]
    assert sorted(shown["delegates"]) == sorted(k["delegate_child"])
    names = sorted(os.path.basename(f["path"]) for f in shown["files"])
    assert names[0] == f"{parent}.json" and names[1].startswith(f"request_dump_{parent}_")
    human = invoke("--root", str(root), "sessions", "show", parent)
    assert human.exit_code == 0 and "delegates" in human.stdout


def test_sessions_show_names_the_profile_as_every_command_does(synth_root, invoke, tmp_path):
    """With several roots in view the profile is ROOT:NAME, in `sessions show` too."""
    root, kinds = synth_root
    other = tmp_path / "other"
    (other / "profiles" / "work").mkdir(parents=True)
    human = invoke("--root", str(root), "--root", str(other), "sessions", "show", kinds["work"]["recent"][0])
    assert human.exit_code == 0, human.stderr
    assert re.search(rf"^ +profile  {re.escape(str(root))}:work$", human.stdout, re.M), human.stdout


def test_sessions_show_not_found_and_ambiguous(synth_root, invoke):
    root, _ = synth_root
    missing = invoke("--root", str(root), "sessions", "show", "nope")
    assert missing.exit_code == 1 and "no session matches 'nope'" in missing.stderr
    ambiguous = invoke("--root", str(root), "sessions", "show", "2")
    assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.stderr


def test_config_roots_and_bad_config(tmp_path, synth_root, invoke):
    root, _ = synth_root
    good = tmp_path / "admin.yaml"
    good.write_text(f"roots: [{root}]\n")
    result = invoke("--config", str(good), "profiles", "--json")
    assert result.exit_code == 0 and len(json.loads(result.stdout)["profiles"]) == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("roots: [unclosed\n")
    result = invoke("--config", str(bad), "profiles")
    assert result.exit_code == 78 and "bad.yaml" in result.stderr and "not valid YAML" in result.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("rootz: []\n")
    result = invoke("--config", str(unknown), "profiles")
    assert result.exit_code == 78 and "unknown key(s) rootz" in result.stderr


def test_module_help_and_demo_with_empty_home(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), HERMES_HOME="", HERMES_ADMIN_CONFIG="", TMPDIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "profiles" in done.stdout
    demo = subprocess.run([sys.executable, "-m", "hermes_admin", "demo"], capture_output=True, text=True, env=env)
    assert demo.returncode == 0, demo.stderr  # its plugin runs in our interpreter on purpose: no warning
    assert "Demo root built in" in demo.stderr
    assert all(name in demo.stdout for name in ("default", "work", "legacy"))


def test_interrupt_exits_130_and_usage_errors_exit_64(tmp_path, synth_root):
    root, _ = synth_root
    code = ("import sys, hermes_admin.profile.views as v\n"
            "def stop(*a, **k): raise KeyboardInterrupt\n"
            "v.profile_summary = stop\n"
            "import hermes_admin.cli.profiles_cmd as p; p.profile_summary = stop\n"
            "from hermes_admin.cli.main import main\n"
            f"sys.argv = ['hermes-admin', '--root', {str(root)!r}, 'profiles']\n"
            "main()\n")
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 130 and "interrupted" in done.stderr
    usage = subprocess.run([sys.executable, "-m", "hermes_admin", "purge", "--older-than", "x"],
                           capture_output=True, text=True, env=env)
    assert usage.returncode == 64 and "older-than" in usage.stderr  # sysexits: never 2, "a profile failed"
    ok = subprocess.run([sys.executable, "-m", "hermes_admin", "--root", str(root), "profiles", "--json"],
                        capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and json.loads(ok.stdout)["profiles"]


def test_the_lazy_command_table_says_what_each_command_says():
    """`--help` lists the commands from a table (nothing imported); it must match their own help."""
    import click

    from hermes_admin.cli.main import COMMANDS, cli
    ctx = click.Context(cli)
    for name, (_, _, short) in COMMANDS.items():
        assert cli.get_command(ctx, name).help.strip().splitlines()[0] == short, name


@pytest.mark.parametrize("args, columns", [(["--help"], "80"), (["-h"], "200"), (["--version"], "20")])
def test_help_and_version_are_answered_without_click(args, columns):
    code = (f"import sys; sys.argv = ['hermes-admin'] + {args!r}\n"
            "from hermes_admin.cli.entry import main\n"
            "main()\n"
            "print(sorted(m for m in sys.modules if m == 'click' or m.startswith('hermes_admin.')), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS=columns))
    loaded = eval(done.stderr.strip().splitlines()[-1])
    assert set(loaded) <= {"hermes_admin.cli", "hermes_admin.cli.entry", "hermes_admin.cli.help_text"}, loaded
    full = subprocess.run([sys.executable, "-c", "from hermes_admin.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=dict(os.environ, COLUMNS=columns))
    assert done.stdout == full.stdout and full.returncode == 0  # the same bytes as click's own answer


def test_help_text_is_click_s_own():
    from hermes_admin.cli import help_text
    from hermes_admin.cli.main import help_text_source

    assert Path(help_text.__file__).read_text() == help_text_source(), (
        "cli/help_text.py is out of date: python -c 'from hermes_admin.cli.main import write_help_text; "
        "write_help_text()'")


def test_a_narrow_terminal_gets_click_s_own_help():
    done = subprocess.run([sys.executable, "-m", "hermes_admin", "--help"], capture_output=True, text=True,
                          env=dict(os.environ, COLUMNS="60"))
    assert done.returncode == 0 and max(map(len, done.stdout.splitlines())) <= 60

def test_every_listing_json_names_a_profile_by_the_same_key(synth_root, invoke):
    """`profile` everywhere; `profiles --json` keeps `name` beside it for scripts written against it."""
    root, _ = synth_root
    for command, key in ((["profiles"], "profiles"), (["usage"], "profiles"), (["sessions", "list"], "sessions"),
                         (["status"], "profiles"), (["plugins", "list"], "installations")):
        doc = json.loads(invoke("--root", str(root), *command, "--json").stdout)
        rows = doc[key]
        assert rows and all(isinstance(r.get("profile"), str) for r in rows), (command, rows[:1])
    profiles = json.loads(invoke("--root", str(root), "profiles", "--json").stdout)["profiles"]
    assert all(r["name"] == r["profile"] for r in profiles)

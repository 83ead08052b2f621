"""The policy a command applies is the one its dry run reports, and what it selects follows from it.

A table over every override a maintenance command has (`purge --older-than`, filters with and
without it, `archive-inactive --days`, `run` with none) and every shape of per-source window (none,
a shorter one, a longer one): the dry run's reported policy is the policy applied (`applied`), the
units the dry run selected are exactly the ones that reported policy picks by age, and the run
itself then takes exactly those.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
import yaml

from hermes_admin.synth.builder import SynthStore
from tests.helpers import own_interpreter, row_ids

DAY = 86400.0
SOURCES = ("cron", "cli")
AGES = (20, 40, 70, 100)  # days since each session's last activity: one session per source and age


def _root(path, now: float, sessions: dict) -> None:
    store = SynthStore(path / "state.db", version=30)
    for source in SOURCES:
        for age in AGES:
            sid = f"{source}_{age}"
            store.session(sid, started=now - age * DAY, ended=now - age * DAY + 60, end_reason="done", source=source)
            store.messages(sid, 1, now - age * DAY)
    store.close()
    (path / "config.yaml").write_text(yaml.safe_dump({"sessions": sessions}))


WINDOWS = {  # the profile's own sessions: section
    "no per-source window": {},
    "cron shorter (30)": {"cron": 30},
    "cron longer (120)": {"cron": 120},
}
COMMANDS = {  # the command line after the global options
    "run": ("run",),
    "purge": ("purge",),
    "purge --older-than 60": ("purge", "--older-than", "60"),
    "purge --older-than 30": ("purge", "--older-than", "30"),
    "purge --source cron (filters, no age)": ("purge", "--source", "cron", "--force"),
    "purge --source cron --older-than 50": ("purge", "--source", "cron", "--older-than", "50"),
    "archive-inactive": ("archive-inactive",),
    "archive-inactive --days 50": ("archive-inactive", "--days", "50"),
}


def _by_age(policy: dict, command: tuple, now_ids: set[str]) -> set[str]:
    """What the reported policy picks, by age alone (the rows are all ended, unpinned, not live)."""
    if command[0] == "archive-inactive" or (command[0] == "run" and policy["auto_archive"]):
        days = policy["auto_archive_days"]
        return {sid for sid in now_ids if int(sid.split("_")[1]) > days}
    if not policy["auto_prune"]:
        return set()
    source_only = command[command.index("--source") + 1] if "--source" in command else None
    picked = set()
    for sid in now_ids:
        source, age = sid.split("_")
        window = policy["source_retention_days"].get(source, policy["retention_days"])
        if int(age) > window and source_only in (None, source):
            picked.add(sid)
    return picked


@pytest.mark.parametrize("windows", list(WINDOWS), ids=list(WINDOWS))
@pytest.mark.parametrize("command", list(COMMANDS), ids=list(COMMANDS))
def test_the_dry_runs_policy_is_the_policy_applied(windows, command, tmp_path, invoke):
    now = time.time()
    root = tmp_path / "h"
    root.mkdir()
    sessions = {"auto_prune": True, "retention_days": 90, "auto_archive": False, "auto_archive_days": 60}
    if WINDOWS[windows]:
        sessions["source_retention_days"] = WINDOWS[windows]
    _root(root, now, sessions)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    args = COMMANDS[command]
    own = own_interpreter(tmp_path)

    dry = invoke("--root", str(root), *own, *args, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    doc = json.loads(dry.stdout)
    (policy,) = doc["policies"].values()
    selected = {i for r in doc["results"] if r["task"] in ("purge", "auto_archive") for d in r["done"]
                for i in d["ids"]}
    every = {f"{s}_{a}" for s in SOURCES for a in AGES}
    assert selected == _by_age(policy, args, every), policy["description"]
    if "--older-than" in args:  # the override is the window for every source, and the report says so
        assert policy["retention_days"] == float(args[args.index("--older-than") + 1])
        assert policy["source_retention_days"] == {} and "per source" not in policy["description"]
        assert policy["origins"]["source_retention_days"].startswith("--older-than")
    elif args[0] != "archive-inactive" and WINDOWS[windows]:
        assert policy["source_retention_days"] == ({} if "--source" in args else WINDOWS[windows])
    if "--days" in args:
        assert policy["auto_archive_days"] == 50 and policy["origins"]["auto_archive_days"] == "--days"

    done = invoke("--root", str(copy), *own, *args, "--yes", "--json")
    assert done.exit_code == 0, done.stderr
    after = json.loads(done.stdout)
    assert list(after["policies"].values())[0]["description"] == policy["description"]
    if args[0] == "archive-inactive":
        acted = {i for r in after["results"] for d in r["done"] for i in d["ids"]}
    else:
        acted = every - row_ids(copy / "state.db")
    assert acted == selected


def test_the_dry_run_predicts_the_pass_rows_closed_as_stale_are_archived_too(tmp_path, invoke):
    """close_stale runs before auto_archive: the rows it closes are archived in the same pass, and the
    dry run (which closes nothing) says so, as the prompt before the run does."""
    now = time.time()
    root = tmp_path / "h"
    root.mkdir()
    store = SynthStore(root / "state.db", version=30)
    for n in range(12):  # cron runs that died, idle 150+ days: closed, then archived
        store.session(f"cron_{n}", started=now - (150 + n) * DAY, source="cron")
        store.messages(f"cron_{n}", 2, now - (150 + n) * DAY)
    for n in range(11):  # ended chats idle 40 days: archived only
        store.session(f"chat_{n}", started=now - 40 * DAY, ended=now - 40 * DAY + 60, end_reason="done",
                      source="telegram")
        store.messages(f"chat_{n}", 1, now - 40 * DAY)
    store.close()
    (root / "config.yaml").write_text(yaml.safe_dump({"sessions": {
        "auto_prune": True, "retention_days": 90, "auto_archive": True, "auto_archive_days": 30}}))
    own = own_interpreter(tmp_path)

    def acted(result) -> dict:
        assert result.exit_code == 0, result.stderr
        return {r["task"]: sorted(i for d in r["done"] for i in d["ids"]) for r in json.loads(result.stdout)["results"]}

    predicted = acted(invoke("--root", str(root), *own, "run", "--dry-run", "--json"))
    done = acted(invoke("--root", str(root), *own, "run", "--yes", "--json"))
    assert len(done["close_stale"]) == 12 and len(done["auto_archive"]) == 23
    assert predicted == done

"""The values every layer shares: a profile, its owner, the maintenance tasks' records and reasons.

The bottom floor: it imports nothing of the package, so the host, the protocol, the worker's
tasks and the CLI all name these things from one place (docs/design.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path

STORE_FILE = "state.db"


@dataclass(frozen=True)
class Profile:
    """One Hermes profile: its name, its home folder and the root it lives in."""

    root: Path
    name: str
    home: Path
    display: str | None = field(default=None, compare=False)  # ROOT:NAME when several roots are in view

    @property
    def shown(self) -> str:
        """How messages name it: its name, or ROOT:NAME where two roots may both have that name."""
        return self.display or self.name

    @cached_property  # asked for many times per profile and run; a frozen instance never changes
    def store_path(self) -> Path:
        return self.home / STORE_FILE

    @cached_property
    def sessions_dir(self) -> Path:
        return self.home / "sessions"

    @property
    def config_path(self) -> Path:
        return self.home / "config.yaml"

    def has_store(self) -> bool:
        # Worker side only (it stats inside the home). os.stat: never open the file outside SQLite.
        return self.store_path.is_file()


@dataclass(frozen=True)
class Owner:
    """Who a worker becomes: the account that owns the homes it is given."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    home: str  # the account's own home folder (its HOME), not a profile home

    def as_dict(self) -> dict:
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups), "user": self.user, "home": self.home}


class Reason(StrEnum):
    """Why a unit was deleted or archived: the `reason` a plugin's `on_session_delete` receives (§7).

    A str: plugins compare it with plain text, and JSON, metrics labels, the outbox's rows and
    f-strings carry its value ("prune"), as they did when it was text."""

    PRUNE = "prune"
    EMPTY_SWEEP = "empty_sweep"
    GHOST_PRUNE = "ghost_prune"
    DELETE = "delete"
    PROFILE_REPAIR = "profile_repair"
    ARCHIVE = "archive"


@dataclass(frozen=True)
class TaskName:
    """A maintenance task as every layer names it: the one record of what it is called, why its deletes
    go, what turns it on and which command runs it. Every map of these (the order, the commands, the
    `sessions:` keys policy takes from Hermes) is derived from `TASKS` below, never written again.

    Its rule (select, and re-check inside the transaction) is its module in profile/tasks/; what the
    engine does with what it selects is its entry in profile/actions/maintenance.py, in this order."""

    name: str  # as requests, reports, metrics and the admin config's `schedule:` name it
    reason: Reason | None  # the reason its deletes carry; None: it deletes nothing (closes, archives)
    command: str | None = None  # the single-task command that runs it whatever the policy enables
    switch: str | None = None  # the policy key that turns it on for `run` (None: always on)
    # The keys of Hermes' own `sessions:` section that configure it (Hermes maintains by them too): for
    # these, a profile's config.yaml and the defaults of its Hermes are layers of the policy.
    hermes_keys: tuple[str, ...] = ()


REPAIR = TaskName("repair", Reason.PROFILE_REPAIR, switch="repair")
GHOST_PRUNE = TaskName("ghost_prune", Reason.GHOST_PRUNE, "prune-ghosts", "ghost_prune")
EMPTY_SWEEP = TaskName("empty_sweep", Reason.EMPTY_SWEEP, "sweep-empty", "empty_sweep")
PURGE = TaskName("purge", Reason.PRUNE, "purge", "auto_prune",
                 ("auto_prune", "retention_days", "vacuum_after_prune", "source_retention_days"))
CLOSE_STALE = TaskName("close_stale", None, switch="auto_prune",  # stale rows are closed with the purge, as Hermes does
                       hermes_keys=("auto_prune", "retention_days", "source_retention_days"))
SIZE_BUDGET = TaskName("size_budget", Reason.PRUNE, switch="max_store_mb")
AUTO_ARCHIVE = TaskName("auto_archive", None, "archive-inactive", "auto_archive", ("auto_archive", "auto_archive_days"))

# `run`'s order, the one every caller uses: repair reports first; ghosts and empties go before the
# purge weighs units; stale rows are closed after the purge, so that they age a further window first;
# the size budget weighs what is left; archiving comes last, over the rows every other task left.
TASKS = (REPAIR, GHOST_PRUNE, EMPTY_SWEEP, PURGE, CLOSE_STALE, SIZE_BUDGET, AUTO_ARCHIVE)


# What every layer reads of the tasks, derived from their records (a function of the records, so that
# tests/unit/test_tasks_are_records.py shows a new record is picked up with nothing else written).

def order(tasks: tuple[TaskName, ...]) -> tuple[str, ...]:
    """The tasks' names, in `run`'s order."""
    return tuple(task.name for task in tasks)


def by_command(tasks: tuple[TaskName, ...]) -> dict[str, TaskName]:
    """Each single-task command, with the task it runs."""
    return {task.command: task for task in tasks if task.command}


def command_of(tasks: tuple[TaskName, ...]) -> dict[str, str]:
    """Each task's name, with the command that runs it alone (how people read a task)."""
    return {task.name: task.command for task in tasks if task.command}


def hermes_keys(tasks: tuple[TaskName, ...]) -> tuple[str, ...]:
    """The keys of Hermes' `sessions:` section that configure some task, each once, in the tasks' order."""
    return tuple(dict.fromkeys(key for task in tasks for key in task.hermes_keys))


ORDER = order(TASKS)
BY_COMMAND = by_command(TASKS)
COMMAND_OF = command_of(TASKS)
HERMES_SESSIONS_KEYS = hermes_keys(TASKS)


# The `source` values Hermes writes (interactive, messaging, automation, other): a filter naming
# another is most likely a typo, said with the nearest (a newer Hermes may add one: never refused).
SOURCES = frozenset({"cli", "tui", "desktop", "telegram", "discord", "whatsapp", "slack", "signal", "cron",
                     "kanban", "acp", "api_server", "subagent", "tool", "oneshot", "recovered", "unknown"})

"""What follows a commit once it is durable: the units' files removed, then their events fired.

Files go first (a plugin sees them gone), removed by the remover process (remover.py); events go
through the outbox (outbox.py), so a crash right after a commit still delivers them on the next
start (`replay`). A dry run lists the files it would remove and fires nothing (docs/design.md §5).
"""

from __future__ import annotations

import os
import stat
import threading

from hermes_admin import hook_failures as failed
from hermes_admin import stopping
from hermes_admin.hook_failures import HookFailure
from hermes_admin.model import Profile
from hermes_admin.profile.engine import faults
from hermes_admin.profile.engine.decisions import Outcome
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.engine.outbox import Event, Outbox, OutboxError
from hermes_admin.profile.engine.remover import FileRemover
from hermes_admin.profile import installation
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.hermes_config import HermesConfig
from hermes_admin.profile.hooks.bus import DeliveryStopped, HookBus
from hermes_admin.profile.hooks.discovery import discover as discover_plugins, safe_mode
from hermes_admin.profile.store import unit_rows
from hermes_admin.profile.store.files import FileIndex, removable, unsafe_id
from hermes_admin.results import Action


def sessions_folder_notes(profile: Profile) -> list[str]:
    """A missing or odd `sessions/` is worth a warning: no transcript file can be removed there."""
    try:
        st = os.lstat(profile.sessions_dir)
    except FileNotFoundError:
        return [f"{profile.sessions_dir}: missing; no transcript files to remove"]
    except OSError as exc:
        return [f"{profile.sessions_dir}: {exc.strerror}; transcript files are left alone"]
    if stat.S_ISLNK(st.st_mode):
        return []  # the owner's own choice: followed as the owner, never as anyone else
    if not stat.S_ISDIR(st.st_mode):
        return [f"{profile.sessions_dir}: not a folder; transcript files are left alone"]
    return []


def hook_bus(profile: Profile, config: HermesConfig, env: Environment) -> HookBus:
    """The profile's plugins, as Hermes would load them. Opt-in: with nothing in plugins.enabled, no
    plugin Hermes loads that way hears anything, so no installation is looked for, no folder
    scanned, no plugin process started."""
    if not config.plugins_enabled or safe_mode(env.hermes):
        return HookBus(profile, [], config.hook_timeout, verbose=env.verbose, hermes_env=env.hermes)
    lookup = env.installations.for_profile(profile)
    timeout, _ = installation.hook_timeout(config, lookup)
    ours = [] if lookup.installation is not None else discover_plugins(profile.home, config, env.hermes)
    return HookBus(profile, ours, timeout, installation=lookup.installation, notes=lookup.notes,
                   verbose=env.verbose, hermes_env=env.hermes)


class Aftermath:
    """One profile's files and events. `outbox`, `bus`, `remover`: None in a dry run. `notes`: what
    its first look at `sessions/` found odd there, its own to report."""

    def __init__(self, profile: Profile, dry_run: bool, outbox: Outbox | None = None,
                 bus: HookBus | None = None, remover: FileRemover | None = None):
        self.profile, self.dry_run = profile, dry_run
        self.notes: list[str] = []
        self.outbox, self.bus, self.remover = outbox, bus, remover
        self._files: FileIndex | None = None
        self._scanning = threading.Lock()  # the export thread (export_ahead.py) may ask first

    @property
    def files(self) -> FileIndex:
        with self._scanning:
            if self._files is None:  # one scan of sessions/ per run; the first need of it says if it is odd
                self.notes = sessions_folder_notes(self.profile)
                self._files = FileIndex.scan(self.profile.sessions_dir)
            return self._files

    @property
    def listening(self) -> bool:
        """Events are kept (outbox) and delivered only when a plugin of this profile listens."""
        return self.bus is not None and self.bus.active

    def after_durable(self, work: list) -> Outcome:
        """Files, then events, of transactions whose commit is now on disk (see group_commit.py); what
        it did (the files answered so far: into the report as they come, on disk past its head)."""
        events, failures = [], []
        for item in work:
            if item is None:  # a commit with nothing to follow it (a step of a split delete)
                continue
            paths, fired = item
            self.remover.remove(paths)
            events += fired
        if events:
            self.remover.drain()  # files before events: a plugin sees the files gone
            failures = self.deliver(events)
        # taken last: after a failure they stay with the remover, for the call's last collect
        return self.collected(wait=False).plus(Outcome(hook_failures=tuple(failures)))

    def paths_of(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """The files in sessions/ of these sessions, and a line for each id that cannot name one (left alone)."""
        paths, left = [], []
        for sid in ids:
            if unsafe_id(sid):
                left.append(f"session id {sid!r} cannot name a file in sessions/: files left alone")
            else:
                paths += self.files.paths_of(sid)
        return paths, left

    def remove_files(self, ids: list[str]) -> Outcome:
        """These sessions' files queued for removal (a dry run lists them); the ids that cannot name one."""
        paths, left = self.paths_of(ids)
        return Outcome(files_skipped=tuple(left)).plus(self.remove_paths(paths))

    def remove_orphan_files(self, paths: list[str]) -> Outcome:
        """Per-session files whose session row is gone (no event: no rows went)."""
        names = [os.path.basename(path) for path in paths]
        queued = self.remove_paths([self.files.path_of(name) for name in names if self.files.is_session_file(name)])
        return queued.plus(self.collected())

    def remove_paths(self, paths: list[str]) -> Outcome:
        """Paths inside sessions/ only: built from safe ids, or from names checked by the index. A dry
        run lists them as removed; a real one queues them (`collected` says what went)."""
        if self.dry_run:
            return Outcome(files_removed=tuple(path for path in paths if removable(path)))
        self.remover.remove(paths)
        return Outcome()

    def collected(self, wait: bool = True) -> Outcome:
        """The removals answered so far; with `wait`, all those queued."""
        if self.remover is None:
            return Outcome()
        removed, skipped = self.remover.take() if wait else self.remover.answered()
        return Outcome(files_removed=tuple(removed), files_skipped=tuple(skipped))

    def deliver(self, events: list[Event]) -> list[HookFailure]:
        """Each event to the profile's plugins, in order; returns the plugin failures met doing it."""
        faults.point("before_delivery", events=events)
        if not self.listening:
            if events:  # replayed events whose plugins were disabled since: nothing to call
                self.outbox.delivered([e.id for e in events])
            return []
        failures: list[HookFailure] = []
        for n, event in enumerate(events):  # each marked as soon as its plugins ran: a crash repeats one
            if stopping.requested():  # a stop request: no new event is sent; the rest wait in the outbox
                return failures + [_stopped(len(events) - n)]
            try:
                failures += self.bus.fire(event.payload(self.profile))
                self.outbox.delivered([event.id])
            except DeliveryStopped:  # a stop request: this event and the rest wait for the next run
                return failures + [_stopped(len(events) - n)]
            except OutboxError as exc:  # disk full, read-only: no more deliveries (no repeats) this run
                return failures + [HookFailure(None, failed.OUTBOX, f"{exc}; deliveries stopped, {len(events) - n} "
                                                                    "event(s) left for the next run (the first may "
                                                                    "repeat)")]
        return failures

    def announce_lost(self, ids: list[str], reason: str) -> list[HookFailure]:
        """Sessions whose rows a repair could not bring back (gone already): one event each, kept in
        the outbox until delivered, as a deletion's are; their files in sessions/ are left, since they
        may be all that is left of them (an outbox kind of its own: a replay removes no file for it)."""
        if not ids or not self.listening:
            return []
        pending = self.outbox.add_pending("lost", reason, [Unit(sid, [sid]) for sid in ids])
        # remembered beside a kept look as our own deletes are: the next look must not announce them again
        self.outbox.settle({event: [sid] for event, sid in zip(pending, ids)}, [], gone=ids)
        wanted = set(pending)
        return self.deliver([event for event in self.outbox.undelivered() if event.id in wanted])

    def replay(self, db) -> list[HookFailure]:
        """Finish what a previous run left: verify pending events, deliver committed ones; returns
        the plugin failures met delivering them."""
        committed: dict[int, list[str]] = {}
        dropped: list[int] = []
        for event in self.outbox.pending():
            (committed.__setitem__(event.id, event.ids) if _done(db, event) else dropped.append(event.id))
        if committed or dropped:
            self.outbox.settle(committed, dropped)
        undelivered = self.outbox.undelivered()
        for event in undelivered:
            if event.kind == Action.DELETE:
                self.remove_files(event.ids)  # what went is not reported: an earlier run's
        self.collected()
        return self.deliver(undelivered)


def _stopped(left: int) -> HookFailure:
    """Deliveries a stop request ended: no one plugin's failure."""
    return HookFailure(None, failed.STOPPED, f"stopped on request; {left} event(s) left in the outbox for the next run")


def _done(db, event: Event) -> bool:
    """Did the transaction of a pending event commit (its rows gone, or archived)?"""
    ids = event.ids
    left = unit_rows.rows_left(db, ids) if event.kind == Action.DELETE else unit_rows.unarchived_left(db, ids)
    return left == 0

"""Deletions Hermes made itself, noticed and announced: the store compared with the last look at it.

No Hermes release (0.19.0, 0.20.1, 0.22.2) fires `on_session_delete`: a session deleted by `hermes
sessions delete`, the desktop app, `/exit --delete` or Hermes' own auto-prune leaves a plugin's
index holding it. So where Hermes' plugin manager does not know the hook and a plugin of the profile
listens, each maintenance pass looks at the store first (docs/design.md §7):

1. it reads which sessions the store holds now (id, parent, ended or not, last active: a page of
   rows at a time, store/read.session_marks);
2. the last look (outbox.db, `looks`: those same few values per session, packed and compressed,
   with the store file's device and inode) less what it holds now, less what our own deletes took
   since (`own_gone`, written with their events), is what was deleted outside hermes-admin;
3. those sessions are grouped as they went: a session with the gone ones under it by the parent
   links the last look knew (a compression lineage, a session with its delegates), one event each,
   with the hook's reason: `prune` when every member had ended and was idle past the profile's
   retention (what Hermes' own prune takes), else `delete`;
4. one outbox transaction writes those events (committed: the rows are gone already), records each
   session as noticed (for `sessions show`), replaces the look and forgets `own_gone`. Only then are
   the events delivered, through the same outbox and plugin process as our own: a run interrupted
   before that transaction finds the same sessions gone next time; one interrupted after it delivers
   the events from the outbox. Nothing is lost, nothing announced twice.

The first look announces nothing (there was none before it); a session that is back (restored) is
not gone; a store file replaced by another (a new inode holding none of the sessions remembered)
starts a new memory. Where Hermes fires the hook itself or the policy turns it off
(`announce_hermes_deletes`), no look is kept and a kept one is dropped: the next look starts anew.
Where no plugin listens (yet: none enabled; or now: `HERMES_SAFE_MODE`), no look is taken and a
kept one waits as it is, our own deletes still remembered beside it, for a pass that has someone
to tell. A dry run compares with the look read only and writes nothing. A session created and
deleted between two looks was never seen, and is not announced.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from bisect import bisect_left
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

from hermes_admin.model import Profile, Reason
from hermes_admin.profile.engine.aftermath import Aftermath
from hermes_admin.profile.engine.decisions import Outcome, noted
from hermes_admin.profile.engine.outbox import Event, Outbox, read_look
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.read import session_marks
from hermes_admin.results import Action, Done, Result

FORMAT = 1  # the packing of a look's sessions (pack/unpack)


@dataclass(frozen=True, slots=True)
class Mark:
    """One session as a look keeps it."""

    parent: str | None
    ended: bool
    active: float  # when it was last active, by its row


@dataclass(frozen=True)
class Gone:
    """Sessions deleted outside hermes-admin together: one event of the hook."""

    session_id: str  # the head: the one none of the others descends from
    ids: tuple[str, ...]  # every session of it, the head first
    reason: str


class Sessions(Mapping):
    """A look's sessions, column by column in id order, each Mark made only when asked for: a store
    of 100,000 sessions held as a few lists, not 100,000 objects (two looks are held at once)."""

    def __init__(self, ids: list[str], parents: list[int], ended: str, active: list[int]):
        self.ids, self.parents, self.ended, self.active = ids, parents, ended, active  # parents: index, or -1

    @classmethod
    def of(cls, marks: Iterable[tuple[str, str | None, bool, float]]) -> "Sessions":
        """From (id, parent, ended, last active) rows, taken column by column as they come (the store
        gives them in id order; any other order is sorted here)."""
        ids, parents, ended, active = [], [], [], []
        for sid, parent, done, when in marks:
            ids.append(sid)
            parents.append(parent)
            ended.append("1" if done else "0")
            active.append(int(when))
        if any(a >= b for a, b in zip(ids, ids[1:])):
            order = sorted(range(len(ids)), key=ids.__getitem__)
            ids, parents, ended, active = ([column[n] for n in order] for column in (ids, parents, ended, active))
        return cls(ids, [_index(ids, parent) for parent in parents], "".join(ended), active)

    def _at(self, sid) -> int:
        n = bisect_left(self.ids, sid) if isinstance(sid, str) else len(self.ids)
        return n if n < len(self.ids) and self.ids[n] == sid else -1

    def __getitem__(self, sid: str) -> Mark:
        n = self._at(sid)
        if n < 0:
            raise KeyError(sid)
        parent = self.parents[n]
        return Mark(self.ids[parent] if parent >= 0 else None, self.ended[n] == "1", float(self.active[n]))

    def __contains__(self, sid) -> bool:
        return self._at(sid) >= 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


def _index(ids: list[str], sid: str | None) -> int:
    n = bisect_left(ids, sid) if sid is not None else len(ids)
    return n if n < len(ids) and ids[n] == sid else -1


@dataclass(frozen=True)
class Look:
    """What the store held when it was looked at."""

    taken: float
    device: int
    inode: int
    sessions: Sessions


def pack(sessions: Sessions) -> bytes:
    """A look's sessions, compact: ids sorted (their shared prefixes compress well), parents as
    indexes into them, ended flags as one string, times in whole seconds; zlib over the JSON."""
    data = {"format": FORMAT, "ids": sessions.ids, "parents": sessions.parents, "ended": sessions.ended,
            "active": sessions.active}
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 6)


def unpack(blob: bytes) -> Sessions | None:
    """A packed look's sessions, or None when it is not one (damaged, another format)."""
    try:
        data = json.loads(zlib.decompress(blob))
        ids, parents, ended, active = data["ids"], data["parents"], data["ended"], data["active"]
        if data.get("format") != FORMAT or not len(ids) == len(parents) == len(ended) == len(active):
            return None
        if not (all(isinstance(i, str) for i in ids) and all(a < b for a, b in zip(ids, ids[1:]))
                and all(isinstance(p, int) and -1 <= p < len(ids) for p in parents) and set(ended) <= {"0", "1"}
                and all(isinstance(t, int) for t in active)):
            return None
        return Sessions(ids, parents, ended, active)
    except (zlib.error, ValueError, KeyError, TypeError, RecursionError):
        return None


def same_store(before: Look, device: int, inode: int, now: Container[str]) -> bool:
    """Is the store the one last looked at? The same file, or another that still holds a session of
    it (a copy put back, a recovered store); a new file holding none of them is another store."""
    return (before.device, before.inode) == (device, inode) or any(sid in now for sid in before.sessions)


def gone(before: Mapping[str, Mark], now: Container[str], own: set[str], at: float,
         retention_days: float) -> list[Gone]:
    """The sessions deleted outside hermes-admin since the look `before`: there then, not now, not taken
    by our own deletes; grouped by the parent links that look knew, heads in id order. A pure function."""
    missing = {sid for sid in before if sid not in now and sid not in own}
    groups: dict[str, list[str]] = {}
    for sid in sorted(missing):
        path = [sid]
        while (parent := before[path[-1]].parent) in missing:
            if parent in path:  # a loop of links (a damaged store): its least id heads it, for all its members
                path = [min(path[path.index(parent):])]
                break
            path.append(parent)
        groups.setdefault(path[-1], []).append(sid)
    cutoff = at - retention_days * 86400
    found = []
    for head in sorted(groups):
        ids = [head] + [sid for sid in groups[head] if sid != head]
        pruned = all(before[sid].ended and before[sid].active < cutoff for sid in ids)
        found.append(Gone(head, tuple(ids), Reason.PRUNE if pruned else Reason.DELETE))
    return found


def current(store: Store) -> Sessions:
    """What the store holds now, as a look keeps it."""
    return Sessions.of(row for page in session_marks(store) for row in page)


def identity(profile: Profile) -> tuple[int, int]:
    """The store file's device and inode (a stat: the file is never opened outside SQLite)."""
    st = os.stat(profile.store_path)
    return st.st_dev, st.st_ino


def looked(record: tuple[float, int, int, bytes] | None) -> tuple[Look | None, bool]:
    """The outbox's last look as a Look (None: none kept), and whether one was kept but unreadable."""
    if record is None:
        return None, False
    taken, device, inode, blob = record
    sessions = unpack(blob)
    return (Look(taken, device, inode, sessions), False) if sessions is not None else (None, True)


def last_look_ids(profile: Profile) -> set[str]:
    """The last look's sessions, only when it was taken of this very file (a rebuild keeps the
    file and its inode), less those our own deletes took since; read-only (lost_sessions.py)."""
    record, own = read_look(profile)
    look, _ = looked(record)
    if look is None:
        return set()
    try:
        if identity(profile) != (look.device, look.inode):
            return set()
    except OSError:
        return set()
    return {sid for sid in look.sessions if sid not in own}


def announce(profile: Profile, store: Store, outbox: Outbox | None, aftermath: Aftermath, now: float,
             retention_days: float, why_not: str | None) -> Result | None:
    """A maintenance pass's look at the store (the module's docstring): the sessions deleted outside
    hermes-admin since the last look announced, the look replaced. `why_not`: why no look is kept
    here (nobody listens, Hermes fires the hook itself, the policy has it off): a kept one is
    dropped. `outbox` None: a dry run, which says what the pass would announce and writes nothing.
    Returns the result to report (None when there is nothing to say)."""
    if why_not is not None:
        if outbox is not None:
            outbox.forget_look()
        return None
    if not aftermath.listening:  # nobody to tell now (safe mode, plugins off): a kept look waits as it is,
        return None             # our own deletes meanwhile remembered beside it (Outbox.settle)
    device, inode = identity(profile)
    sessions = current(store)
    held = sessions  # (looked up by id in place: no second copy of the ids)
    record, own = read_look(profile) if outbox is None else (outbox.look(), outbox.own_gone())
    before, unreadable = looked(record)
    fresh = before is None or not same_store(before, device, inode, held)  # a new memory: nothing announced
    units = [] if fresh else gone(before.sessions, held, own, now, retention_days)
    announced = Outcome(done=tuple(Done(unit.session_id, unit.ids, _rule(before.taken, unit.reason)) for unit in units))
    if outbox is None:  # a dry run: what the pass would announce, nothing written
        return _noticed(profile, True, announced) if units else None
    packed = pack(sessions)
    event_ids = outbox.remember(now, device, inode, packed, None if fresh else before.taken, units)
    if fresh and (before is not None or unreadable):  # (the very first look has nothing to say)
        why = ("the last look at the store could not be read" if unreadable else
               f"the store is another file than at the last look ({len(before.sessions)} session(s) remembered, "
               "none of them in it)")
        return _noticed(profile, False, announced.plus(noted(
            f"{why}: {len(sessions)} session(s) remembered ({len(packed)} bytes), nothing announced; "
            "sessions deleted outside hermes-admin from now on are announced to the plugins")))
    if not units:
        return None
    events = [Event(i, Action.NOTICED, unit.session_id, unit.reason, list(unit.ids))
              for i, unit in zip(event_ids, units)]
    failures = aftermath.deliver(events)  # after the outbox has them: a crash delivers them next time
    return _noticed(profile, False, announced.plus(Outcome(hook_failures=tuple(failures))))


def _noticed(profile: Profile, dry_run: bool, outcome: Outcome) -> Result:
    """The look's report, made once from what it did."""
    result = Result(profile.name, Action.NOTICED, None, dry_run)
    outcome.fold_into(result)
    return result


def _rule(looked_at: float, reason: str) -> str:
    """Why a unit is announced, as the report says it."""
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(looked_at))
    return f"deleted outside hermes-admin since the look at {since}; announced with reason {reason}"

"""Which sessions a live Hermes process is working on: its turn leases and compression locks,
keyed and aged the way Hermes 0.22.2 keys and ages them (docs/design.md §3, "Live").

Two tables of Hermes hold the rows, each with a `holder` and an `expires_at`:

- `session_turn_leases(conversation_id)`: one row per *conversation*. Hermes keys it by the
  root of the session's compression chain: from a session it climbs `parent_session_id` while
  the session is a continuation of its parent (`continues`), and the session it stops at is
  the key. So a lease named after a root covers every continuation below it.
- `compression_locks(session_id)`: one row per session being compressed, keyed by that
  session's own id.

A row is *stale* (Hermes may take it over, and so it protects nothing) once it expired, or once
its holder is a process that provably no longer exists (`stale`). A holder string reads
`pid=N[:pidns=M]:...`; its pid is only looked at when it names our own pid namespace (an
unstamped or foreign holder waits for its expiry), and only a pid the kernel says is gone
counts as dead.

What is guarded is wider than Hermes' own check, never narrower: every live row, lease or lock,
guards the whole conversation its key belongs to (the key's chain, from its root down), and the
key itself. Hermes guards a locked session only, and a leased conversation from its key down;
the units hermes-admin acts on are whole conversations, and 0.20.1 did not treat a reset child
as a new conversation (`continues(..., resets_split=False)` is the rule used here), so the
wider set covers the keys every release writes.

`stale` and `continues` are pure functions (a table of cases in tests/unit/test_guards.py);
`live_sessions` reads the two tables and the chains around their keys.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Callable, Iterable, Mapping

import peewee

from hermes_admin.profile.store.schema import Schema

CHUNK = 900

# Hermes' tables of live work: (table, the column naming what it guards, how a report names it).
LIVE_GUARDS = (("compression_locks", "session_id", "a live compression lock"),
               ("session_turn_leases", "conversation_id", "a live turn lease"))

_PID = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")
_PIDNS = re.compile(r"(?:^|:)pidns=(\d+)(?::|$)")


# -- staleness ----------------------------------------------------------------------

def holder_pid(holder: object) -> int | None:
    """The `pid=N` of a structured holder string, or None."""
    match = _PID.search(holder) if isinstance(holder, str) else None
    return int(match.group(1)) if match else None


def holder_pidns(holder: object) -> str | None:
    """The `pidns=M` stamp of a holder string (the inode of its writer's /proc/self/ns/pid), or None."""
    match = _PIDNS.search(holder) if isinstance(holder, str) else None
    return match.group(1) if match else None


def stale(holder: object, expires_at: object, now: float, *, own_pidns: str | None, own_pid: int,
          gone: Callable[[int], bool], namespaces: bool = True) -> bool:
    """May Hermes take this lease or lock over (so it protects nothing)?

    Expired (`expires_at <= now`), or held by a process provably gone: a `pid=N` other than ours,
    stamped with our own pid namespace (`own_pidns`, None when ours is unknown), which `gone`
    says does not exist. An unstamped or foreign holder waits for its expiry. `namespaces`: the
    platform has pid namespaces (Linux); without them a pid is evidence on its own. An
    `expires_at` that is not a number never expires (Hermes cannot read it either, and refuses).
    """
    try:
        if float(expires_at) <= now:  # type: ignore[arg-type]
            return True
    except (TypeError, ValueError):
        return False
    pid = holder_pid(holder)
    if pid is None or pid <= 0 or pid == own_pid:
        return False
    if namespaces:
        stamp = holder_pidns(holder)
        if stamp is None or own_pidns is None or stamp != own_pidns:
            return False
    return gone(pid)


def pid_gone(pid: int) -> bool:
    """Does the kernel say no process `pid` exists? Anything else (alive, another user's, a doubt) is no."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False
    return False


_OWN_PIDNS: str | None = None


def own_pid_namespace() -> str | None:
    """The inode of our pid namespace (`/proc/self/ns/pid` reads `pid:[4026531836]`), or None when
    it cannot be read (not cached then: every stamped holder waits for its expiry meanwhile)."""
    global _OWN_PIDNS
    if _OWN_PIDNS is None:
        try:
            match = re.search(r"\[(\d+)\]", os.readlink("/proc/self/ns/pid"))
        except OSError:
            return None
        _OWN_PIDNS = match.group(1) if match else None
    return _OWN_PIDNS


def stale_here(holder: object, expires_at: object, now: float) -> bool:
    """`stale` with this process's pid, pid namespace and the kernel's answer."""
    return stale(holder, expires_at, now, own_pidns=own_pid_namespace(), own_pid=os.getpid(), gone=pid_gone,
                 namespaces=sys.platform.startswith("linux"))


# -- conversations ----------------------------------------------------------------------

def _markers(model_config: object) -> Mapping:
    if isinstance(model_config, str):
        try:
            model_config = json.loads(model_config)
        except ValueError:
            return {}
    return model_config if isinstance(model_config, dict) else {}


def continues(child: Mapping, parent: Mapping | None, *, resets_split: bool = True) -> bool:
    """Is `child` a continuation of `parent` in one conversation, as Hermes decides it?

    Rows are mappings of `id`, `parent_session_id`, `source`, `model_config`, `end_reason`. The
    parent must exist and have ended by compression; the child must not be a fork of it: a `tool`
    session, or one whose `model_config` names this parent as `_branched_from` or `_delegate_from`
    (and `_reset_from`, unless `resets_split` is False, as in 0.20.1). A marker naming another
    session does not count (compression copies `model_config` onto the continuation), and a
    `model_config` that is not a JSON object has no markers.
    """
    if parent is None or not child.get("parent_session_id") or child.get("parent_session_id") != parent.get("id"):
        return False
    if parent.get("end_reason") != "compression" or child.get("source") == "tool":
        return False
    markers = _markers(child.get("model_config"))
    names = ("_branched_from", "_delegate_from") + (("_reset_from",) if resets_split else ())
    return all(markers.get(name) != parent["id"] for name in names)


_COLUMNS = "id, parent_session_id, source, model_config, end_reason"


def _rows(db: peewee.SqliteDatabase, where: str, values: list[str]) -> list[dict]:
    found = []
    for start in range(0, len(values), CHUNK):
        part = values[start:start + CHUNK]
        cursor = db.execute_sql(f"SELECT {_COLUMNS} FROM sessions WHERE {where} IN ({','.join('?' * len(part))})",
                                part)
        found += [dict(zip(("id", "parent_session_id", "source", "model_config", "end_reason"), r))
                  for r in cursor.fetchall()]
    return found


def conversations(db: peewee.SqliteDatabase, keys: Iterable[str]) -> dict[str, set[str]]:
    """Each key -> the sessions of its conversation: its chain climbed to the root, then every
    continuation below that root (stale sibling continuations too), and the key itself. A level of
    every chain at a time, a statement each way (an index lookup by id, one by parent)."""
    keys = list(dict.fromkeys(keys))
    rows: dict[str, dict] = {r["id"]: r for r in _rows(db, "id", keys)}
    # Climb: each key's current top, until no top continues a parent.
    top = {key: key for key in keys if key in rows}
    climbing = set(top)
    seen = {key: {key} for key in keys}
    while climbing:
        wanted = [p for k in climbing if (p := rows[top[k]].get("parent_session_id")) and p not in rows]
        rows.update((r["id"], r) for r in _rows(db, "id", sorted(set(wanted))))
        still = set()
        for key in climbing:
            child = rows[top[key]]
            parent = rows.get(child.get("parent_session_id") or "")
            if parent is not None and parent["id"] not in seen[key] and continues(child, parent, resets_split=False):
                seen[key].add(parent["id"])
                top[key] = parent["id"]
                still.add(key)
        climbing = still
    # Descend from each root, a level at a time.
    below = {key: {root} for key, root in top.items()}  # what the descent from each root reached
    frontier = {key: {root} for key, root in top.items()}
    while frontier:
        parents = sorted({p for level in frontier.values() for p in level})
        children: dict[str, list[dict]] = {}
        for row in _rows(db, "parent_session_id", parents):
            rows[row["id"]] = row
            children.setdefault(row["parent_session_id"], []).append(row)
        nxt = {}
        for key, level in frontier.items():
            new = {c["id"] for p in level for c in children.get(p, ())
                   if continues(c, rows.get(p), resets_split=False) and c["id"] not in below[key]}
            if new:
                below[key] |= new
                nxt[key] = new
        frontier = nxt
    return {key: below.get(key, set()) | {key} for key in keys}


def guard_rows(db: peewee.SqliteDatabase, schema: Schema) -> list[tuple[str, str, object, object, str]]:
    """Every row of Hermes' lock and lease tables: (table, key, holder, expires_at, how to name it)."""
    found = []
    for table, column, what in LIVE_GUARDS:
        if schema.has_table(table):
            found += [(table, key, holder, expires, what) for key, holder, expires in
                      db.execute_sql(f"SELECT {column}, holder, expires_at FROM {table}").fetchall()
                      if isinstance(key, str) and key]
    return found


def live_sessions(db: peewee.SqliteDatabase, schema: Schema, now: float,
                  is_stale: Callable[[object, object, float], bool] = stale_here) -> dict[str, str]:
    """Session id -> why a live Hermes process holds it: every session of a conversation that has a
    live lease or lock. Both tables are tiny; with no live row nothing else is read."""
    live = [row for row in guard_rows(db, schema) if not is_stale(row[2], row[3], now)]
    if not live:
        return {}
    chains = conversations(db, [key for _, key, _, _, _ in live])
    why: dict[str, str] = {}
    for table, key, _, _, what in live:
        for sid in sorted(chains.get(key, {key})):
            if sid == key:
                why.setdefault(sid, f"held by {what} ({table})")
            else:
                why.setdefault(sid, f"its conversation is held by {what} ({table}, on {key})")
    return why

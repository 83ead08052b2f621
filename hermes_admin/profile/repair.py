"""Profile repair (docs/design.md §8): find what is broken in a profile; with `apply`, fix it.

Findings, and what applying does:

| kind               | found when                                                  | fix (--apply)                          |
|--------------------|-------------------------------------------------------------|----------------------------------------|
| missing_folder     | a standard folder (sessions/, logs/, ...) is missing          | create it (owned by the home's owner)  |
| loose_permissions  | state.db, -wal, -shm or .env readable by group or others    | chmod 0600 on the path                 |
| dangling_parent    | parent_session_id names no row                              | set it NULL (silent)                   |
| mislabelled        | profile_name names another profile, nothing says it belongs there | relabel to this profile (silent) |
| wrong_store        | session_key `agent:<ns>:...` names another existing profile | copy into that store, verify, delete here (`profile_repair`) |
| duplicate          | the same row in both stores after an interrupted move       | verify the right copy, delete this one (`profile_repair`) |
| legacy_main        | session_key `agent:main:...` (the default profile) in a named profile's store: ambiguous | none, unless asked (`move_legacy_main`): as wrong_store / duplicate, into the default profile |
| unclaimed          | session_key names a profile that does not exist             | none (report only)                     |
| broken_fts         | an FTS index fails its integrity-check (--check-fts)        | backup, rebuild, only while unheld     |
| damaged_store      | SQLite cannot read pages of a table, an index, a full-text index or the schema, the file is cut short, or a migration was cut short (a leftover table, a version row its tables belie) (store/damage.py: which structure, the rows still readable, the sessions lost, the holder) | rebuild from every readable row into the same file, or finish the migration; only while unheld |
| unusable_store     | not a database, or unreadable otherwise                     | none: never modified (its mode either)  |

Everything is read with read-only connections until a fix is applied; writes
go through the engine's locks and transactions, and deletions through its
one deletion path, so they fire `on_session_delete` in the source profile.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from pathlib import Path


from hermes_admin.hook_failures import HookFailure
from hermes_admin.model import Profile, Reason
from hermes_admin.profile import integrity, lost_sessions
from hermes_admin.profile.engine import FTS_TABLES, Engine, fold, held_by_path, row_weight
from hermes_admin.profile.exports import UNIT_WEIGHT, Settings
from hermes_admin.profile.state_folder import LockHeld, ProfileLocks, RecordedFlock, state_folder
from hermes_admin.profile.environment import Environment
from hermes_admin.profile.lineage import Unit
from hermes_admin.profile.store import Store, StoreError, keep_wal
from hermes_admin.profile.store import damage, fts_index, rebuild, repairs
from hermes_admin.profile.store.connect import readonly_uri
from hermes_admin.profile.store.errors import SQLITE_ERRORS
from hermes_admin.profile.store.read import existing_ids
from hermes_admin.profile.store.restoring import put_row, session_exists, session_row
from hermes_admin.profile.store.unit_rows import all_messages, prompts_of, usage_rows
from hermes_admin.results import Action, Finding, Result

STANDARD_FOLDERS = ("sessions", "logs", "memories", "skills", "cron")
PRIVATE_FILES = ("state.db", "state.db-wal", "state.db-shm", ".env")
SILENT_KINDS = {"dangling_parent", "mislabelled"}
# rows copied into their profile's store and deleted here; legacy_main only when asked (`inspect`)
MOVES = ("wrong_store", "duplicate", "legacy_main")


def namespace_of(session_key: str | None) -> str | None:
    """The profile a gateway key names: `agent:<ns>:...`, where `main` means default (and `main~`,
    Hermes' escape for it, a profile named main)."""
    if not session_key or not session_key.startswith("agent:"):
        return None
    parts = session_key.split(":")
    if len(parts) < 3 or not parts[1]:
        return None
    return {"main": "default", "main~": "main"}.get(parts[1], parts[1])


# A row keyed to the default profile inside a named profile's store is ambiguous, as Hermes'
# `repair-profiles` says: the history of a gateway that ran on its own for this profile before keys
# named their profile, or a default chat written here by mistake. The row cannot tell which, and
# moving it wrongly hands a conversation to another bot: it moves only when the operator asks.
AMBIGUOUS_WHY = ("ambiguous: this profile's own history from before keys named their profile, or a default "
                 "chat that leaked in; the row cannot tell which")


# -- finding ------------------------------------------------------------------------

def _file_findings(profile: Profile) -> list[Finding]:
    found = []
    home = str(profile.home)
    for name in STANDARD_FOLDERS:
        if not os.path.isdir(os.path.join(home, name)):
            found.append(Finding(profile.name, "missing_folder", os.path.join(home, name),
                                 f"{name}/ is missing", "create it"))
    for name in PRIVATE_FILES:
        path = os.path.join(home, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
            found.append(Finding(profile.name, "loose_permissions", str(path),
                                 f"mode {stat.S_IMODE(st.st_mode):04o} is looser than 0600", "chmod 0600"))
    return found


def _quick_check(store: Store) -> str | None:
    rows = repairs.quick_check(store.db)
    return None if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows[:3])


def fts_problems(store_path: Path) -> list[str]:
    """FTS5 integrity-check needs a writable handle: run it on a private snapshot."""
    with tempfile.TemporaryDirectory(prefix="hermes-admin-fts-") as tmp:
        snapshot = Path(tmp) / "snapshot.db"
        source = keep_wal.connect(readonly_uri(store_path), keep_wal.READ_ONLY, 5000)
        try:
            keep_wal.copy_to(source, snapshot)
        finally:
            source.close()
        target = keep_wal.connect(snapshot)
        try:
            problems = fts_index.integrity_problems(target, FTS_TABLES)
        finally:
            target.close()
    return problems


def inspect(profile: Profile, siblings: dict[str, Profile], check_fts: bool = False,
            store: Store | None = None, quick_check: bool = True, move_legacy_main: bool = False,
            lock_wait_s: float | None = None, exports: Settings | None = None) -> list[Finding]:
    """Everything wrong with one profile; reads only. `store`: one the caller has open already
    (the engine's, in `run`: one connection per profile, not two), left open. `quick_check`: False
    when `run` checked this store recently (profile/integrity.py). `move_legacy_main`: the operator
    asked for the default profile's rows found here to move there (else they are reported only).
    `lock_wait_s`: how long the stores it opens wait for another process's lock (the job's).
    `exports`: where the profile's exports are (a lost session's restore command names one)."""
    found = _file_findings(profile)
    if not profile.has_store():
        return found
    if store is None:
        try:
            store = Store.open(profile, lock_wait_s=lock_wait_s)
        except StoreError as exc:
            if exc.kind == damage.DAMAGED_STORE:
                return _with_damage(profile, found, exc.problem, exports)
            return found + [Finding(profile.name, "unusable_store", str(profile.store_path), exc.problem, "none")]
        held = store
    else:
        held = contextlib.nullcontext()
    try:
        with held:
            return _inspect_store(profile, store, siblings, found, check_fts, quick_check, move_legacy_main,
                                  lock_wait_s)
    except SQLITE_ERRORS as exc:
        if not damage.is_damage(exc):
            raise
        return _with_damage(profile, found, " ".join(str(exc).split()), exports)


def _with_damage(profile: Profile, found: list[Finding], said: str, exports: Settings | None = None) -> list[Finding]:
    """The findings of a store SQLite cannot wholly read: what is damaged (store/damage.py), how
    many rows of each table can still be read (a count that writes nothing), who holds the store,
    and the fix; the store's own files' modes are left as they are with it (nothing of a store
    left untouched is changed)."""
    path = profile.store_path
    own = {str(path), f"{path}-wal", f"{path}-shm"}
    found = [f for f in found if not (f.kind == "loose_permissions" and f.subject in own)]
    diagnosis = damage.diagnose(path)
    step = damage.next_step(diagnosis, profile.shown, in_repair=True)
    if damage.NOT_A_DATABASE in diagnosis.kinds() or diagnosis.ok:
        what = diagnosis.line() if not diagnosis.ok else f"damaged: {said}"
        return found + [Finding(profile.name, "unusable_store", str(path), f"{what}; {step}", "none")]
    kept: set[str] = set()  # the session ids of the readable rows: what a rebuild keeps
    counts = damage.readable_rows(path, [t for t in damage.CANONICAL], kept)
    had = damage.indexed_counts(path, list(counts))  # what its intact indexes say it held
    readable = ", ".join(f"{table} {'?' if n is None else n}"
                         + (f" of {had[table]}" if n is not None and had.get(table, n) > n else "")
                         for table, n in counts.items())
    lost = "" if diagnosis.lossless else _would_lose(profile, kept, exports)
    holder = held_by_path(path, wal=os.path.exists(f"{path}-wal"))
    detail = (f"{diagnosis.line()}; rows still readable: {readable}{lost}"
              + (f"; {holder}" if holder else "; no other process holds it"))
    fix = (REBUILD_FIX if diagnosis.lossless else f"{REBUILD_FIX}; the rows on the damaged pages are lost")
    return found + [Finding(profile.name, "damaged_store", str(path), f"{detail}; " + (
        step if diagnosis.lossless else
        f"`hermes-admin repair --apply -p {profile.shown}` rebuilds it from the readable rows; {step}"), fix)]


def _would_lose(profile: Profile, kept: set[str], exports: Settings | None) -> str:
    """`; N session(s) would be lost: …`: the sessions the store's profile still has word of
    (lost_sessions.known) that a rebuild keeping `kept` cannot bring back, with the exports that hold them."""
    ids = lost_sessions.lost(lost_sessions.known(profile), kept)
    line = lost_sessions.said(profile, ids, lost_sessions.restorable(profile, exports, ids), would=True)
    return f"; {line}" if line else ""


REBUILD_FIX = ("rebuild the store from every readable row into the same file (its damaged bytes kept beside it), "
               "only while no other process holds it")


def _inspect_store(profile: Profile, store: Store, siblings: dict[str, Profile], found: list[Finding],
                   check_fts: bool, quick_check: bool, move_legacy_main: bool,
                   lock_wait_s: float | None) -> list[Finding]:
    problem = _quick_check(store) if quick_check else None
    if problem:
        return _with_damage(profile, found, f"quick_check: {problem}")
    # Row by row, and only the rows that may have something to say (SQLite leaves out those keyed
    # to this profile, labelled for it or not at all, with their parent there): memory stays flat.
    moved: list[tuple[str, str, str]] = []  # (id, session_key, owner) keyed to a sibling profile
    own = [prefix for prefix in ("agent:main:", "agent:default:", f"agent:{profile.name}:")
           if namespace_of(prefix + "x") == profile.name]
    for sid, parent, key, label, dangling in repairs.rows_worth_a_look(store.db, profile.name, own):
        owner = namespace_of(key)
        if owner and owner != profile.name:
            if owner in siblings:
                moved.append((sid, key, owner))
            elif owner == "default":  # no default profile of this owner to move it to
                found.append(Finding(profile.name, "legacy_main", sid, f"session_key {key!r} names the default "
                                     f"profile: {AMBIGUOUS_WHY} (no default profile here to move it to)", "none"))
            else:
                found.append(Finding(profile.name, "unclaimed", sid,
                                     f"session_key {key!r} names profile '{owner}', which does not exist", "none"))
        elif label is not None and label != profile.name:
            found.append(Finding(profile.name, "mislabelled", sid, f"profile_name is {label!r}",
                                 f"relabel to '{profile.name}'"))
        if dangling:
            found.append(Finding(profile.name, "dangling_parent", sid, f"parent {parent!r} does not exist",
                                 "clear parent_session_id"))
    # Which of the rows keyed to a sibling profile are there already (an interrupted move):
    # one read per sibling, not one per row.
    wanted: dict[str, list[str]] = {}
    for sid, _, owner in moved:
        wanted.setdefault(owner, []).append(sid)
    present = {owner: _ids_present(siblings[owner], ids, lock_wait_s) for owner, ids in wanted.items()}
    for sid, key, owner in moved:
        copied = sid in present[owner]
        fix = (f"delete this copy (profile '{owner}' holds the right one)" if copied
               else f"move to profile '{owner}' (copy, verify, delete here)")
        if owner == "default" and profile.name != "default":
            detail = f"session_key {key!r} names the default profile: {AMBIGUOUS_WHY}" + (
                "; profile 'default' holds a copy (a move cut short)" if copied else "")
            if move_legacy_main:
                found.append(Finding(profile.name, "legacy_main", sid, detail, fix, owner))
            else:
                found.append(Finding(profile.name, "legacy_main", sid,
                                     f"{detail} (`repair --apply --move-legacy-main` moves it)", "none", owner))
            continue
        kind = "duplicate" if copied else "wrong_store"
        found.append(Finding(profile.name, kind, sid, f"session_key {key!r} belongs to '{owner}'", fix, owner))
    if check_fts:
        for problem in fts_problems(profile.store_path):
            found.append(Finding(profile.name, "broken_fts", str(profile.store_path), problem,
                                 "back up the store, then rebuild the index (only while no other process holds it)"))
    return found


def _ids_present(profile: Profile, ids: list[str], lock_wait_s: float | None) -> set[str]:
    """Which of these session ids the profile's store holds (none if it has no usable store)."""
    if not profile.has_store():
        return set()
    try:
        with Store.open(profile, lock_wait_s=lock_wait_s) as store:
            return set(existing_ids(store, ids))
    except StoreError:
        return set()


# -- fixing -------------------------------------------------------------------------

def _fix_files(finding: Finding, profile: Profile) -> None:
    """As the home's owner (this worker is): a folder made is the owner's; nothing follows a link."""
    path = Path(finding.subject)
    if finding.kind == "missing_folder":
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise OSError(f"{path} exists and is not a folder") from None
        return
    # chmod through an O_PATH descriptor of the path itself (O_NOFOLLOW: a link is refused, never
    # followed). An O_PATH descriptor takes and drops no POSIX lock, so SQLite's locks stay intact.
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file any more")
        os.chmod(f"/proc/self/fd/{fd}", 0o600)
    finally:
        os.close(fd)


def _export(store: Store, sid: str) -> dict:
    """The session row, its messages (inactive ones too), usage rows and system prompt."""
    db, schema = store.db, store.schema
    session = session_row(db, sid)
    if session is None:
        raise RuntimeError(f"{sid} is no longer in profile '{store.profile.shown}': nothing to copy")
    return {"session": session, "messages": all_messages(db, sid),
            "usage": usage_rows(db, schema, [sid]).get(sid, []), "prompts": prompts_of(db, schema, session)}


def _import(target: Store, export: dict) -> None:
    """Into the target store, inside the caller's transaction: parents kept only when present,
    message ids and display order regenerated, a colliding title given the id's tail."""
    db, schema = target.db, target.schema
    session = dict(export["session"])
    sid = session["id"]
    if session.get("parent_session_id") and not session_exists(db, session["parent_session_id"]):
        session["parent_session_id"] = None
    if session.get("title") and repairs.title_taken(db, session["title"], sid):
        session["title"] = f"{session['title']} ({sid[-6:]})"
    if schema.has_table("system_prompts"):
        for prompt in export["prompts"]:
            put_row(db, "system_prompts", prompt, schema.columns["system_prompts"], keep_existing=True)
    elif export["prompts"] and "system_prompt" in schema.columns["sessions"]:
        session.setdefault("system_prompt", export["prompts"][0].get("prompt"))
    if not schema.has_column("sessions", "system_prompt_hash") or not schema.has_table("system_prompts"):
        session.pop("system_prompt_hash", None)
    session["profile_name"] = target.profile.name  # the row belongs here now
    put_row(db, "sessions", session, schema.columns["sessions"])
    columns = schema.columns["messages"] - {"id", "display_order"}
    for message in export["messages"]:
        put_row(db, "messages", message, columns)
    if schema.has_table("session_model_usage"):
        for usage in export["usage"]:
            put_row(db, "session_model_usage", usage, schema.columns["session_model_usage"], keep_existing=True)


def _move(source: Engine, target_profile: Profile, moves: list[Finding], result: Result) -> list[str]:
    """Copy each row into the right store and verify it there (the target opened once), then
    delete the verified rows here through the engine: one `profile_repair` event each. Returns what
    opening the target's engine set aside there (what its closing returned)."""
    verified: list[Finding] = []
    held = source.blocked([f.subject for f in moves])
    for finding in moves:  # a row a live Hermes is at work on stays where it is, uncopied
        if finding.subject in held:
            finding.error = f"not moved: {held[finding.subject]}"
    moves = [f for f in moves if not f.error]
    if not moves:
        return []
    target = Engine(target_profile, env=source.env)
    try:
        try:
            target.open()
            target.require_tokenizer("copy into")  # the rows copied in fire its CJK triggers
            for finding in moves:
                _attempt(finding, lambda f=finding: _copy(source.store, target, f.subject))
                if not finding.error:
                    verified.append(finding)
        finally:
            target_notes = list(target.close().notes)
    except (LockHeld, StoreError) as exc:
        for finding in moves:
            finding.error = " ".join(str(exc).split())
        return list(target.close().notes)  # (closed already: what that did)
    if not verified:
        return target_notes
    units = [Unit(f.subject, [f.subject], f"moved to profile '{target_profile.shown}'") for f in verified]
    moved, failed = Result(source.profile.name, Action.DELETE, Reason.PROFILE_REPAIR, False), None
    try:
        fold(moved, lambda: source.delete(units, Reason.PROFILE_REPAIR))
    except (OSError, RuntimeError, StoreError, LockHeld, *SQLITE_ERRORS) as exc:  # as a single fix fails
        failed = " ".join(str(exc).split())
    result.absorb(moved)  # what committed, a failure after it or not
    went = {d.session_id for d in moved.done}
    why = {s["session_id"]: s["why"] for s in moved.skipped}
    for finding in verified:
        if finding.subject in went:
            finding.applied = True
        else:  # the copy went (applied, by _attempt), the move did not
            finding.applied = False
            finding.error = f"copied, but not deleted here: {why.get(finding.subject) or failed or 'gone already'}"
    return target_notes


def _copy(source: Store, target: Engine, sid: str) -> None:
    """One row into the target store, in a transaction of its own paced like the engine's deletes
    (pacer.py: measured, group-committed, a turn for Hermes' writers after it); raises unless the
    target holds it whole."""
    export = _export(source, sid)

    def copy(db):
        if not session_exists(db, sid):
            _import(target.store, export)
    # its transactions are the target profile's, not in this profile's report
    target.write(copy, sum(row_weight(m) for m in export["messages"]) + UNIT_WEIGHT,
                 f"a copy of {sid} from profile '{source.profile.shown}'")
    held = target.read(lambda db: repairs.message_count(db, sid))
    if held < len(export["messages"]):
        raise RuntimeError(f"profile '{target.profile.shown}' holds {held} of {len(export['messages'])} messages "
                           f"of {sid}: this copy is kept")


# Hermes' markers of an index rebuild of its own under way or owed: while one is set, its triggers
# index only part of the rows (fts_rebuild_high_water/progress: a chunked backfill) or none
# (fts_stale: its triggers are dropped until it rebuilds), and only Hermes, which owns the index's
# DDL, can finish that. A plain 'rebuild' then would index rows twice, or leave a live index
# without triggers, so repair does not rebuild; Hermes' own rebuild finishes it.
REBUILD_MARKERS = ("fts_rebuild_high_water", "fts_rebuild_progress", "fts_stale")
REBUILD_LOCK_WAIT_S = 120.0  # as long as Hermes 0.22.2 waits for the same lock


def pending_rebuild(db, schema) -> list[str]:
    """Hermes' rebuild markers set in `state_meta` (REBUILD_MARKERS)."""
    if not schema.has_table("state_meta"):
        return []
    return repairs.meta_keys_set(db, REBUILD_MARKERS)


def _refuse_while_pending(db, schema) -> None:
    markers = pending_rebuild(db, schema)
    if markers:
        raise RuntimeError(f"Hermes has an index rebuild of its own under way or owed (state_meta: "
                           f"{', '.join(markers)}): it finishes it itself (or `hermes sessions optimize-storage`); "
                           "not rebuilt here")


def _rebuild_fts(engine: Engine) -> list[str]:
    """Back the store up, then rebuild its FTS indexes: only while no other process holds the store,
    under Hermes' `state.db.fts_rebuild.lock` taken as Hermes takes it (its holder record in it,
    a bounded wait, nothing done without it), and never while Hermes' rebuild markers are set
    (checked before, and again inside each rebuilding transaction). Returns what making the
    snapshots folder moved aside."""
    path = engine.profile.store_path
    schema = engine.store.schema
    engine.read(lambda db: _refuse_while_pending(db, schema))
    if engine.held_by_others():
        raise RuntimeError("another process holds the store: the index is rebuilt only while nobody else does")
    # The file lock first, then SQLite's (Hermes' order).
    with RecordedFlock(Path(f"{path}.fts_rebuild.lock"), "Hermes is rebuilding its FTS index", REBUILD_LOCK_WAIT_S):
        snapshots, notes = state_folder(engine.profile.home / "state-snapshots")
        backup = snapshots / f"state.db.repair-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        # Made new (O_EXCL, O_NOFOLLOW: never through a link at the name), 0600, then filled by SQLite.
        os.close(os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        engine.read(lambda db: keep_wal.copy_to(db.connection(), backup))

        def rebuild(db, table: str) -> None:
            _refuse_while_pending(db, schema)
            fts_index.rebuild(db, table)

        for table in FTS_TABLES:
            if schema.has_table(table):
                engine.transaction(lambda db, t=table: rebuild(db, t))
    return notes


def _rebuild_store(profile: Profile, env: Environment | None = None, step=lambda where: None,
                   exports: Settings | None = None, on_word: bool = False) -> tuple[str, list[HookFailure]]:
    """The damaged store made again from every readable row (store/rebuild.py), put into its own
    file only while no other process holds it, under our profile lock, Hermes' maintenance lock
    and its `state.db.repair.lock`; its damaged bytes kept beside it first (one copy per damage).
    Refused before anything is written when the disk lacks the room. A migration cut short is
    finished (its stranded rows copied into the live table, the leftover dropped), with or without
    a rebuild. `on_word`: the operator asked for it (`repair --apply`): a process that could not be
    looked into does not stop it (space.held_by_path). Returns what was done, and the plugin
    failures met announcing the sessions it could not bring back."""
    path = profile.store_path
    wal = os.path.exists(f"{path}-wal")
    holder = held_by_path(path, wal=wal, on_word=on_word)
    if holder:
        raise RuntimeError(f"{holder}: a damaged store is rebuilt only while no other process holds it")
    if damage.diagnose(path).kinds() == {damage.MIGRATION}:  # every page reads: only the migration to finish
        with ProfileLocks(profile), RecordedFlock(Path(f"{path}.repair.lock"), "Hermes is repairing its store",
                                                  REBUILD_LOCK_WAIT_S):
            finished = rebuild.finish_migration(path)
        integrity.passed(profile, time.time(), integrity.identity(profile))
        return finished, []
    try:
        rebuild.check_room(path)
    except rebuild.RebuildRefused as exc:
        raise RuntimeError(str(exc)) from None
    before = damage.readable_rows(path, ["sessions", "messages"])
    known = lost_sessions.known(profile)  # read from the damaged file, before it is rebuilt
    with ProfileLocks(profile), RecordedFlock(Path(f"{path}.repair.lock"), "Hermes is repairing its store",
                                              REBUILD_LOCK_WAIT_S):
        rebuild.remove_leftovers(path)
        kept = rebuild.keep_damaged(path)
        new = rebuild.new_path(path)
        try:
            try:
                done = rebuild.build(path, new)
            except rebuild.RebuildRefused as exc:
                raise RuntimeError(f"{exc}; the store is left as it was") from None
            holder = held_by_path(path, wal=wal, on_word=on_word)
            if holder:
                raise RuntimeError(f"{holder} since the rebuild began: the store is left as it was")
            step("put_in_place")
            rebuild.put_in_place(new, path, step)
        finally:
            rebuild.remove_new(new)
        finished = rebuild.finish_migration(path) if damage.MIGRATION in damage.diagnose(path).kinds() else ""
    after = damage.diagnose(path)
    if not after.ok:
        raise RuntimeError(f"the store still reads as {after.line()} after its rebuild (its damaged bytes are in {kept})")
    integrity.passed(profile, time.time(), integrity.identity(profile))  # the views stop saying it is damaged
    back = done.rows.get("sessions", 0)
    lost = lost_sessions.lost(known, _present(profile, sorted(known.ids())))
    failures = []
    if lost:  # announced to the profile's plugins as any session that leaves the store (docs/design.md §7)
        with Engine(profile, env=env) as engine:
            failures = engine.announce_lost(lost, Reason.PROFILE_REPAIR)
    return (f"rebuilt from its readable rows: {back} session(s) and {done.rows.get('messages', 0)} message(s) back"
            + (f", {len(done.recovered_sessions)} session row(s) made again (source 'recovered') for readable "
               f"messages, usage rows or guards whose own row was lost" if done.recovered_sessions else "")
            + (f"; {lost_sessions.said(profile, lost, lost_sessions.restorable(profile, exports, lost), would=False)}"
               if lost else "")
            + (f"; {finished}" if finished else "")
            + f"; the damaged file is kept as {kept}"
            + (f" (it read {before.get('sessions')} session(s) and {before.get('messages')} message(s))"
               if before else "")), failures


def _present(profile: Profile, ids: list[str]) -> list[str]:
    with Store.open(profile) as store:
        return existing_ids(store, ids)


def apply(profile: Profile, findings: list[Finding], siblings: dict[str, Profile],
          env: Environment, lossy: bool = True, exports: Settings | None = None) -> tuple[Result, list[str]]:
    """Fix one profile's findings, in the job's `env`. Raises LockHeld/StoreError for the profile as
    a whole; a single fix that fails is recorded on its finding and the others still run. Returns the
    result (its notes are the findings) and what the engines and the snapshots folder set aside.
    `lossy`: a damaged store with torn table pages is rebuilt from its readable rows (`repair
    --apply`); False (`run`'s `repair: apply`): only a store whose every row still reads."""
    result = Result(profile.name, Action.DELETE, Reason.PROFILE_REPAIR, False, task="repair")
    for finding in findings:
        if finding.kind in ("missing_folder", "loose_permissions"):
            _attempt(finding, lambda f=finding: _fix_files(f, profile))
    for finding in findings:
        if finding.kind == "damaged_store":  # nothing else of the store was inspected: the rebuild alone
            if finding.fix == REBUILD_FIX or lossy:  # `run`'s `repair: apply` loses no row
                def rebuild() -> None:  # what it did, into the report made here
                    note, failures = _rebuild_store(profile, env, exports=exports, on_word=lossy)
                    result.notes.append(note)
                    result.hook_failures += failures

                _attempt(finding, rebuild)
            return result, []
    store_fixes = [f for f in findings if f.kind in ("dangling_parent", "mislabelled", "wrong_store", "duplicate",
                                                      "legacy_main", "broken_fts")]
    if not store_fixes:
        return result, []
    notes: list[str] = []
    engine = Engine(profile, env=env)
    try:
        engine.open()
        silent = [f for f in store_fixes if f.kind in SILENT_KINDS]
        if silent:
            def fix(db):
                for f in silent:
                    if f.kind == "dangling_parent":  # re-checked inside the transaction
                        repairs.detach_if_dangling(db, f.subject)
                    else:
                        repairs.relabel(db, f.subject, profile.name)
            # paced like every write of the engine; its transaction is not one of the report's deletes
            _attempt_all(silent, lambda: engine.write(fix, None, "silent repairs", quiet=False))
        moves: dict[str, list[Finding]] = {}
        for finding in store_fixes:
            if finding.kind in MOVES and finding.fix != "none":
                moves.setdefault(finding.target, []).append(finding)
        for target, group in moves.items():
            notes += _move(engine, siblings[target], group, result)
        for finding in store_fixes:
            if finding.kind == "broken_fts":
                _attempt(finding, lambda: notes.extend(_rebuild_fts(engine)))
    finally:
        closed = engine.close()
    return result, list(closed.notes) + notes


def _attempt(finding: Finding, fix) -> None:
    try:
        fix()
        finding.applied = True
    except (OSError, RuntimeError, StoreError, LockHeld, *SQLITE_ERRORS) as exc:
        finding.error = " ".join(str(exc).split())
    except Exception as exc:  # peewee's errors, and anything unforeseen: recorded, not raised
        finding.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _attempt_all(findings: list[Finding], fix) -> None:
    try:
        fix()
        for finding in findings:
            finding.applied = True
    except Exception as exc:
        for finding in findings:
            finding.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"

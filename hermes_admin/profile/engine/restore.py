"""Putting exported units back into a store, in short transactions.

Two callers: `hermes-admin restore FILE` (a unit whose session id exists is left alone and
reported), and the engine itself, when a unit it was deleting in several steps changed meanwhile
(`missing_only`: the session rows are still there; the messages already deleted go back).

Rows go back as they were exported: every column the store still has, message ids included (Hermes'
message ids are AUTOINCREMENT, never reused), so `content` is byte-identical and Hermes' own
triggers index it again in both FTS tables. A parent that no longer exists is dropped from the
child's row, as Hermes' own import does. Order per session: its system prompts, the row, usage
rows, then its messages, as many per transaction as the engine's time budget allows; then its
files in `sessions/`, where the export carries them (transcripts.py).
"""

from __future__ import annotations

from pathlib import Path


from hermes_admin.profile.exports import ROW_WEIGHT, decode_value, manifest_or_recomputed, read_member
from hermes_admin.profile.engine.decisions import Outcome
from hermes_admin.profile.engine.pacer import MERGE_STEPS, Pacer
from hermes_admin.profile.transcripts import put_back as put_files
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.restoring import (message_owners, newest_message_id, pin, put_row,
                                                  session_exists, session_row)
from hermes_admin.profile.store.sql import column_names
from hermes_admin.profile.store.unit_rows import PROMPT_COLUMNS
from hermes_admin.results import Done, Result
from hermes_admin.profile.store.errors import SQLITE_ERRORS

EXTRAS = ("messages", "session_model_usage", "system_prompts", "files")  # an export record's fields that are no columns
MAX_ROWS_PER_TXN = 500  # a bound on one restore transaction whatever the weights (tiny rows)


def _insert(db, table: str, columns: list[str], row: dict, keep_existing: bool = False) -> None:
    put_row(db, table, {c: decode_value(v) for c, v in row.items()}, columns, keep_existing)


class Restorer:
    """Restores records into a store, paced like the deletes (pacer.py)."""

    def __init__(self, store: Store, pacer: Pacer, result: Result):
        self.store, self.pacer = store, pacer
        self.result = result  # what the pacing reports into (and what earlier commits released)
        self.db = store.db
        self.schema = store.schema
        self.columns = {t: column_names(self.db, t) for t in ("sessions", "messages", "session_model_usage",
                                                         "system_prompts") if self.schema.has_table(t)}

    def _exists(self, sid: str) -> bool:
        return session_exists(self.db, sid)

    def _same_row(self, fields: dict) -> bool:
        """Is the session row in the store the one exported (a restore that was cut short, say)?"""
        row = session_row(self.db, fields.get("id"))
        return row is not None and all(fields.get(n) == v for n, v in row.items() if n in fields)

    def session(self, fields: dict, messages, missing_only: bool, dry_run: bool = False) -> tuple[str, int]:
        """One record: ("restored"|"completed"|"exists"|"absent", messages put back).

        A session that exists exactly as exported (an earlier restore cut short) gets its missing
        messages: "completed". Any other existing session is left alone.
        """
        sid = fields.get("id")
        if not isinstance(sid, str) or not sid:
            raise ValueError("a session without an id")
        exists = self._exists(sid)
        state = "restored"
        if exists and not missing_only:
            if not self._same_row(fields):
                return "exists", 0
            missing_only, state = True, "completed"
        if missing_only and not exists:  # a roll-back never makes a row anew
            return "absent", 0
        if dry_run:
            return state, sum(1 for _ in messages)
        head = None if missing_only else fields
        batch: list[dict] = []
        weight, count = 0, 0
        for message in messages:
            message = dict(message, session_id=sid)  # never into another session, whatever the file says
            batch.append(message)
            weight += row_weight(message)
            if weight >= self.pacer.budget or len(batch) >= MAX_ROWS_PER_TXN:
                count += self._write(head, batch)
                head, batch, weight = None, [], 0
        if batch or head is not None:
            count += self._write(head, batch)
        return state, count

    def pin(self, ids: list[str]) -> None:
        """Pin sessions put back (Hermes' own `pinned` flag, which every task of ours honours)."""
        self.pacer.write(lambda db: pin(db, ids), ROW_WEIGHT * len(ids), self.result, "pinning the sessions put back")

    def _write(self, head: dict | None, messages: list[dict]) -> int:
        def work(db):
            if head is not None:
                self._session_row(db, head)
            ids = [m["id"] for m in messages if isinstance(m.get("id"), int) and not isinstance(m["id"], bool)]
            taken = message_owners(db, ids)
            newest = newest_message_id(db)
            put = 0
            for message in messages:
                mid = message.get("id")
                if taken.get(mid) == message["session_id"]:
                    continue  # already there (a roll-back meets the rows it never deleted): left as it is
                if mid in taken or not isinstance(mid, int) or isinstance(mid, bool) or not 0 < mid <= newest:
                    # an id another message holds now, or one Hermes never gave out: a new id, same content
                    message = {k: v for k, v in message.items() if k != "id"}
                _insert(db, "messages", self.columns["messages"], message)
                put += 1
            return put

        put = self.pacer.write(work, sum(map(row_weight, messages)), self.result, "a restore step").value
        self.pacer.merge_owed(self.result, MERGE_STEPS)
        return put

    def _session_row(self, db, fields: dict) -> None:
        row = {k: v for k, v in fields.items() if k not in EXTRAS}
        parent = row.get("parent_session_id")
        if parent and not session_exists(db, parent):
            row["parent_session_id"] = None  # detached, as Hermes' own import does
        referenced = {row.get(c) for c in PROMPT_COLUMNS} - {None}
        for prompt in _dicts(fields.get("system_prompts")):
            if "system_prompts" in self.columns and prompt.get("hash") in referenced:  # only the row's own
                _insert(db, "system_prompts", self.columns["system_prompts"], prompt, keep_existing=True)
        _insert(db, "sessions", self.columns["sessions"], row)
        for usage in _dicts(fields.get("session_model_usage")):
            if "session_model_usage" in self.columns:
                _insert(db, "session_model_usage", self.columns["session_model_usage"],
                        dict(usage, session_id=row["id"]), keep_existing=True)


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def row_weight(message: dict) -> int:
    """A row's weight for pacing: the bytes of its text (what FTS5 tokenizes) and a cost per row."""
    return sum(len(v) for v in message.values() if isinstance(v, str)) + ROW_WEIGHT


def units_of(manifest: dict, wanted: set[str] | None) -> list[tuple[dict, list]]:
    """(member, unit entries) to restore: every unit, or those holding a wanted session id."""
    chosen = []
    for member in manifest["members"]:
        units = [u for u in member["units"] if wanted is None or wanted.intersection(u[3])]
        if units:
            chosen.append((member, units))
    return chosen


def restore_file(store: Store, pacer: Pacer | None, path: Path, wanted: set[str] | None, dry_run: bool,
                 result: Result, pin: bool = False, other_profile: bool = False) -> str | None:
    """`hermes-admin restore FILE`: every (wanted) unit of the export back, existing ids left alone.

    An export another profile made (its `home` is not this one's: a renamed, moved or copied
    profile folder, or a mistake) is restored only when asked (`other_profile`): the caller warns.
    `pin`: the sessions put back are pinned, so that retention, which leaves pinned sessions
    alone, does not delete them again on the next run. Returns the other profile's home, if any."""
    manifest = manifest_or_recomputed(path)  # a copy without its manifest is restorable too
    made_in = manifest.get("home")
    other = None
    if not manifest.get("recomputed") and made_in != str(store.profile.home):
        if not other_profile:
            raise store.error(f"{path} is an export of the profile at {made_in}, not of this one; nothing "
                              "restored (--other-profile restores it here all the same)")
        other = str(made_in)
    restorer = Restorer(store, pacer, result)
    if pin and "pinned" not in restorer.columns["sessions"]:
        raise store.error(f"{store.path}: --pin: this store's sessions have no `pinned` column (a Hermes "
                          "before pinning); nothing restored")
    put_back: list[str] = []
    files = _Files(store.profile.sessions_dir, dry_run)
    for member, units in units_of(manifest, wanted):
        ids = {i for u in units for i in u[3]}
        unseen = set(ids)
        for fields, messages in read_member(path, member):
            sid = fields.get("id")
            if sid not in ids:
                continue
            unseen.discard(sid)
            one = _one(restorer, files, path, fields, messages, dry_run)
            one.fold_into(result)  # the moment it is back: a failure after it carries it
            put_back += [done.session_id for done in one.done]
        Outcome(skipped=tuple({"session_id": sid, "ids": [sid], "why": "not in the export"}
                              for sid in sorted(unseen))).fold_into(result)
    Outcome(notes=tuple(files.notes())).fold_into(result)
    if put_back and pin and not dry_run:
        restorer.pin(put_back)
    Outcome(notes=_pin_notes(put_back, pin)).fold_into(result)
    return other


def _pin_notes(put_back: list[str], pin: bool) -> tuple[str, ...]:
    """What a restore says of the retention of what it put back."""
    if put_back and pin:
        return (f"{len(put_back)} session(s) pinned: retention leaves them alone until unpinned in Hermes",)
    if put_back:
        return ("a session past its retention window is deleted again by the next run (and exported "
                "again): `restore --pin` keeps what it puts back",)
    return ()


def _one(restorer: Restorer, files: "_Files", path: Path, fields: dict, messages, dry_run: bool) -> Outcome:
    """One session's record back: what became of it (`_said`: done, or skipped with why), and its
    files not put back."""
    sid = fields.get("id")
    try:
        state, count = restorer.session(fields, messages, missing_only=False, dry_run=dry_run)
    except (ValueError, TypeError, *SQLITE_ERRORS) as exc:
        # a record this store cannot take (a hostile or damaged file): this session only
        return Outcome(skipped=({"session_id": sid, "ids": [sid], "why": f"not restored: {exc}"},))
    put, left = files.back(sid, fields) if state in ("restored", "completed") else (0, [])  # where the export has them
    said = _said(path, sid, state, count, put, dry_run)
    return Outcome(files_skipped=tuple(left)).plus(Outcome(done=(said,)) if isinstance(said, Done)
                                                   else Outcome(skipped=(said,)))


def _said(path: Path, sid: str, state: str, count: int, files: int, dry_run: bool = False) -> Done | dict:
    """One session's outcome: Done when it was put back (a dry run: would be), else why it was not."""
    if state == "completed" and count == 0 and not files:
        return {"session_id": sid, "ids": [sid], "why": "exists as exported: nothing to put back"}
    if state in ("restored", "completed"):
        return Done(sid, (sid,), f"{'would be ' if dry_run else ''}{state} from {path.name} ({count} messages"
                    + (f", {files} file(s) in sessions/)" if files else ")"))
    return {"session_id": sid, "ids": [sid], "why": "exists in the store: left alone"}


class _Files:
    """The sessions' files a restore puts back into `sessions/` (transcripts.py), and what it says of them."""

    def __init__(self, folder: Path, dry_run: bool):
        self.folder, self.dry_run = folder, dry_run
        self.put = self.without = 0  # files put back; sessions from an export that carries none

    def back(self, sid: str, fields: dict) -> tuple[int, list[str]]:
        """A session's files put back: how many, and each that was not (why)."""
        self.without += "files" not in fields  # an export made before exports carried them
        put, left = put_files(self.folder, sid, fields.get("files"), self.dry_run)
        self.put += put
        return put, left

    def notes(self) -> list[str]:
        would = "would be " if self.dry_run else ""  # a dry run puts nothing back: it says what it would
        return ([f"{self.put} file(s) {would}put back into {self.folder}"] if self.put else []) + (
            [f"{self.without} session(s) from an export made before exports carried the files in sessions/: "
             "their transcript files, if they had any, stay gone"] if self.without else [])

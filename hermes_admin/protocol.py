"""What crosses between the host (which may be root) and a worker (a home's owner).

The host sends one job; the worker answers with JSON lines on its stdout:

    -> {"kind", "params", "context", "owner": {"uid", "gid", "groups", "user", "home"},
        "profiles": [{"root", "name", "home", "display", "layers"}]}  (one line, on its own pipe)
       a profile's "layers": {"entry", "preset", "defaults": {"values", "origin": {"file", "section"}}
                              or null, "hermes_python": {"path", "origin"} or null}  (layers.PolicyLayers)
    <- {"t": "hello", "uid", "gid", "groups"}                         who the worker really is
    <- {"t": "result", "v": {...}}  then  {"t": "item", "f": FIELD, "v": ...} / {"t": "kept", ...}
                                       (a result's "hook_failures": each a HookFailure's fields)
    <- {"t": "data", "k": KEY, "v": ...}                               rows of list-type jobs
    <- {"t": "end", "v": {"dry_run", "problems", "policies", "findings", "internal"}}
                                       (each problem a Problem's fields, each finding a Finding's)
    <- {"t": "beat"}                                                   any time before the end: still alive

A worker beats every few seconds while it lives (`Writer.beating`), whatever its work: the host
kills one that goes silent past its idle deadline (stopped, traced), and any past its overall one
(host/workers.py).

A job's parameters are one frozen dataclass per kind (`Maintain`, `Change`, ...), checked
field by field when the worker reads them (`Job.decode`): a bad one is one ProtocolError naming it.
The worker runs a home's owner's code paths, so the host trusts nothing it reads:
every line is size-bounded, every field type-checked and bounded (decode.py, reading each
message into its dataclass: `Header`, `DoneItem`, `SkippedItem`, `End`, and the Problem,
HookFailure and Finding they hold, with the bounds declared on their fields), and a result
is accepted only for a home the job gave that worker (`Reader`). Long lists travel an item a line
and land in the host's Spills, so a report never has to fit in one message.
"""

from __future__ import annotations

import json
import sys
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, Union, get_args

from hermes_admin import decode as decoded
from hermes_admin.decode import Refusal, Scalar, decode
from hermes_admin.filters import Filters
from hermes_admin.hook_failures import HookFailure
from hermes_admin.layers import Managed, PolicyLayers
from hermes_admin.model import ORDER, Owner, Profile, Reason
from hermes_admin.problems import Problem
from hermes_admin.results import Action, Done, Finding, RepairRun, Result, Run
from hermes_admin.results import Status as ResultStatus  # `Status` here is the job of `status`

BEAT_THREAD = "hermes-admin-beat"
BEAT_S = 5.0  # how often a worker says it lives, at most (a quarter of its idle deadline, if shorter)
MAX_LINE = 1 << 20  # one message; a longer one ends the worker (an item is a few hundred bytes)
# A whole report: the long lists go to the host's Spills on disk, but rows and texts are in memory.
MAX_REPORT = 256 << 20
MAX_PROBLEMS = 100_000  # in one report
MAX_HOOK_FAILURES = 100_000  # in one result (one per plugin and kind of failure, and their repeats)
MAX_FINDINGS = 100_000  # in one report (repair finds one per odd row, folder or file)


# -- the job: one frozen dataclass per kind, read as strictly as a report -----------

@dataclass(frozen=True)
class Request:
    """What a maintenance pass does, the one shape the CLI, the daemon and the worker's
    actions/maintenance.py share: which tasks (named as in model.ORDER, which alone orders them)
    and what the command line overrides (docs/design.md §3, §4)."""

    tasks: tuple[str, ...]
    now: float
    explicit: bool = False  # a single-task command runs whatever the policy enables
    dry_run: bool = False  # the job's only dry_run (Maintain.dry_run reads it)
    force: bool = False
    older_than: float | None = None  # purge: days, overrides retention_days
    archive_days: float | None = None  # archive-inactive: days, overrides auto_archive_days
    filters: Filters = field(default_factory=Filters)
    vacuum: bool = False
    export_dir: str | None = None  # --export-dir, absolute: over the policy's

    def __post_init__(self):
        unknown = [t for t in self.tasks if t not in ORDER]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r} (known: {', '.join(ORDER)})")


@dataclass(frozen=True)
class Maintain:
    """Maintenance tasks over each profile (`run`, `purge`, ..., the daemon's jobs)."""

    KIND: ClassVar[str] = "maintain"
    CHANGES: ClassVar[bool] = True
    request: Request
    summaries: bool = False  # each profile's summary row too, for the host's metrics file
    command: str = "run"  # how the run record (`status`) names the command

    @property
    def dry_run(self) -> bool:
        return self.request.dry_run


@dataclass(frozen=True)
class Change:
    """`sessions delete|archive|unarchive`: ids the host resolved, per home, and/or filters."""

    KIND: ClassVar[str] = "change"
    CHANGES: ClassVar[bool] = True
    VERBS: ClassVar[tuple[Action, ...]] = (Action.DELETE, Action.ARCHIVE, Action.UNARCHIVE)
    verb: str
    dry_run: bool
    force: bool = False
    ids: dict[str, tuple[str, ...]] = field(default_factory=dict)  # home -> its session ids
    filters: Filters | None = None
    export_dir: str | None = None

    def __post_init__(self):
        if self.verb not in self.VERBS:
            raise ValueError(f"unknown verb {self.verb!r} (known: {', '.join(self.VERBS)})")


@dataclass(frozen=True)
class Repair:
    """`repair [--apply]`."""

    KIND: ClassVar[str] = "repair"
    CHANGES: ClassVar[bool] = True
    apply: bool = False
    check_fts: bool = False
    move_legacy_main: bool = False  # `agent:main:` rows in a named profile's store move to the default one

    @property
    def dry_run(self) -> bool:
        return not self.apply


@dataclass(frozen=True)
class Restore:
    """`restore FILE`: one profile, the file read as its owner."""

    KIND: ClassVar[str] = "restore"
    CHANGES: ClassVar[bool] = True
    file: str
    dry_run: bool
    sessions: tuple[str, ...] | None = None  # only the units holding these ids
    pin: bool = False  # the sessions put back are pinned (retention leaves them alone)
    other_profile: bool = False  # an export another profile made is restored all the same


@dataclass(frozen=True)
class PruneExports:
    """`exports prune`: the exports the host chose, per home."""

    KIND: ClassVar[str] = "exports_prune"
    CHANGES: ClassVar[bool] = True
    dry_run: bool
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    export_dir: str | None = None


@dataclass(frozen=True)
class Compact:
    """`compact`: each profile's free pages back to the file system, on the operator's word."""

    KIND: ClassVar[str] = "compact"
    CHANGES: ClassVar[bool] = True
    dry_run: bool
    force: bool = False  # a VACUUM even where a process is seen holding the store


@dataclass(frozen=True)
class _Looks:
    """A job that changes nothing."""

    CHANGES: ClassVar[bool] = False
    dry_run: ClassVar[bool] = True


@dataclass(frozen=True)
class ListProfiles(_Looks):
    KIND: ClassVar[str] = "profiles"


@dataclass(frozen=True)
class Status(_Looks):
    KIND: ClassVar[str] = "status"


@dataclass(frozen=True)
class ShowPolicy(_Looks):
    KIND: ClassVar[str] = "policy"


@dataclass(frozen=True)
class Usage(_Looks):
    KIND: ClassVar[str] = "usage"


@dataclass(frozen=True)
class ListPlugins(_Looks):
    KIND: ClassVar[str] = "plugins_list"


@dataclass(frozen=True)
class ListSessions(_Looks):
    KIND: ClassVar[str] = "sessions_list"
    limit: int


@dataclass(frozen=True)
class Resolve(_Looks):
    """Every session id of each profile, for the host to find the ids (or prefixes) it was asked
    for: no worker learns what an administrator asked for, so none can answer for it
    (cli/mutate.targets)."""

    KIND: ClassVar[str] = "resolve"


@dataclass(frozen=True)
class SessionDetail(_Looks):
    KIND: ClassVar[str] = "session_detail"
    session_id: str


@dataclass(frozen=True)
class ListExports(_Looks):
    KIND: ClassVar[str] = "exports_list"
    export_dir: str | None = None
    held: bool = False  # every unit the exports hold, with its ids: the host finds a session among them


Params = Union[Maintain, Change, Repair, Restore, PruneExports, Compact, ListProfiles, Status, ShowPolicy, Usage,
               ListPlugins, ListSessions, Resolve, SessionDetail, ListExports]
PARAMS: dict[str, type] = {cls.KIND: cls for cls in get_args(Params)}


@dataclass(frozen=True)
class Context:
    """What every job carries from the host besides its own parameters."""

    verbose: int = 0
    lock_wait: float | None = None  # --lock-wait: over the policy's
    safe_mode: str = ""  # the invoker's HERMES_SAFE_MODE: a worker's environment is clean
    bundled_plugins: str = ""  # the invoker's HERMES_BUNDLED_PLUGINS (Nix, packages)
    # Hermes' managed scope as the host read it (host/managed.py), merged over each profile's config.yaml
    # where its Hermes reads one, and the invoker's $HERMES_MANAGED_DIR, for Hermes' own code in the
    # plugin process to find the same folder (its environment is clean)
    managed: Managed | None = None
    managed_dir: str = ""
    processes: int = 2  # profile/fork.py; 1: every profile in one process
    # seconds a process of the worker's (profile/fork.py's copy) may go without a sign of life
    idle_timeout: float = 120.0
    # root -> {name: home} of the profiles that share the owner of its `default`: where repair may
    # move a wrong-store row (docs/design.md §8)
    siblings: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    """One kind of work (its params, see `profile/jobs.py`) over the profiles of one owner; made
    whole by the host (host/runner.py) and never changed after."""

    params: Params
    owner: Owner
    profiles: list[Profile]
    layers: dict[str, PolicyLayers] = field(default_factory=dict)  # home -> the admin config's part of its policy
    context: Context = field(default_factory=Context)

    @property
    def kind(self) -> str:
        return self.params.KIND

    def encode(self) -> bytes:
        return (json.dumps({
            "kind": self.kind, "params": asdict(self.params), "context": asdict(self.context),
            "owner": self.owner.as_dict(),
            "profiles": [{"root": str(p.root), "name": p.name, "home": str(p.home), "display": p.display,
                          "layers": self.layers_of(p).as_dict()} for p in self.profiles],
        }, default=str) + "\n").encode()

    def layers_of(self, profile: Profile) -> PolicyLayers:
        """The admin config's part of the profile's policy (none given: no layers at all)."""
        return self.layers.get(str(profile.home)) or PolicyLayers()

    @classmethod
    def decode(cls, line: bytes) -> "Job":
        """The job a worker was given, every field checked: a bad one is a ProtocolError naming it."""
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise ProtocolError("a job that is not JSON") from None
        kind = data.get("kind") if isinstance(data, dict) else None
        if not isinstance(kind, str) or kind not in PARAMS:
            raise ProtocolError(f"a job of no known kind ({str(kind)[:32]!r})")
        profiles, layers = _job_profiles(data.get("profiles"))
        return cls(_read_fields(PARAMS[kind], data.get("params"), f"job {kind}: params"),
                   _read_fields(Owner, data.get("owner"), "job: owner"), profiles, layers,
                   _read_fields(Context, data.get("context", {}), "job: context"))


@dataclass(frozen=True, kw_only=True)
class _JobProfile:
    """A profile as a job carries it: the Profile, and its policy layers (a layer's values are plain
    JSON: profile/policy.py checks them as it reads the policy)."""

    root: Path
    name: str
    home: Path
    display: str | None = None
    layers: PolicyLayers


def _job_profiles(value) -> tuple[list[Profile], dict[str, PolicyLayers]]:
    """The job's profiles, each with its policy layers, read once, field by field."""
    entries = _read_fields(tuple[_JobProfile, ...], value, "job: profiles")
    return [Profile(e.root, e.name, e.home, e.display) for e in entries], {str(e.home): e.layers for e in entries}


def _taken(value, where: str = ""):
    """`value` as `decode` read it, or the ProtocolError its Refusal says (prefixed by `where`)."""
    if isinstance(value, Refusal):
        raise ProtocolError(f"{where}: {value}" if where else str(value))
    return value


def _read_fields(cls, value, where: str):
    """An instance of the dataclass `cls` (or a tuple of them) from the host's JSON: every field of
    its type, no other field; one with a default may be absent. The host wrote it: its texts and lists are bounded
    by the job's line alone."""
    return _taken(decode(cls, value, where, absent_ok=True, max_len=MAX_LINE, max_items=sys.maxsize))


# -- the report's own shapes: what crosses, each field with its bounds (decode.py reads them) --

@dataclass(frozen=True)
class Header:
    """A result as it crosses, but for its long lists (each an item of its own) and what it kept."""

    profile: str = field(metadata={"max_len": 256})
    home: str
    task: str | None
    status: ResultStatus
    why: str | None
    action: Action
    reason: Reason | None
    dry_run: bool
    hook_failures: tuple[HookFailure, ...] = field(metadata={"max_items": MAX_HOOK_FAILURES})
    transactions: int
    longest_write_ms: float
    longest_write: str | None
    vacuumed: bool
    notes: tuple[str, ...]
    seconds: float
    export: str | None


@dataclass(slots=True)  # one a unit: made and dropped as each line is read, so no frozen checks
class DoneItem:
    """A unit acted on (results.Done) as it crosses."""

    session_id: str = field(metadata={"max_len": 1024})
    ids: tuple[str, ...]
    rule: str | None


@dataclass(slots=True)
class SkippedItem:
    """A unit skipped, and why, as it crosses."""

    session_id: str = field(metadata={"max_len": 1024})
    ids: tuple[str, ...] | None
    why: str


@dataclass(frozen=True)
class End:
    """A report's last message: what the whole run found (each profile's policy as a dict, checked
    against PolicyShown where it is read)."""

    dry_run: bool
    problems: tuple[Problem, ...] = field(metadata={"max_items": MAX_PROBLEMS})
    findings: tuple[Finding, ...] = field(metadata={"max_items": MAX_FINDINGS})
    policies: dict[str, object] = field(default_factory=dict, metadata={"optional": True})
    internal: bool = field(default=False, metadata={"optional": True})


WIRE = (Header, DoneItem, SkippedItem, End)  # what a worker's report holds


# -- the worker's side: writing a report -------------------------------------------

_SPILLS = ("done", "skipped", "files_removed", "files_skipped")


class Writer:
    """Writes a Run as protocol lines through `write` (a text stream's write); a line at a time,
    whichever thread writes (`beating` sends its beats from a thread of its own)."""

    def __init__(self, write):
        self._write = write
        self._lock = threading.Lock()
        self._ended = False

    def send(self, message: dict) -> None:
        line = json.dumps(message, default=_plain) + "\n"
        with self._lock:
            if message.get("t") == "end":
                self._ended = True
            self._write(line)

    def beat(self) -> None:
        with self._lock:
            if not self._ended:  # nothing follows the end
                self._write('{"t": "beat"}\n')

    @contextmanager
    def beating(self, every: float):
        """Beats every `every` seconds from a thread while the block runs (after hello): the sign of
        life the reading side's idle deadline waits for. A stopped or traced process beats no more."""
        done = threading.Event()

        def beat():
            while not done.wait(every):
                try:
                    self.beat()
                except (OSError, ValueError):  # the reader is gone: nothing left to tell
                    return

        thread = threading.Thread(target=beat, name=BEAT_THREAD, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()

    def hello(self, uid: int, gid: int, groups: list[int]) -> None:
        self.send({"t": "hello", "uid": uid, "gid": gid, "groups": groups})

    def run(self, run: Run) -> None:
        for result in run.results:
            whole = result.as_dict()
            header = {f.name: whole[f.name] for f in fields(Header)}
            header["hook_failures"] = [f.as_dict() for f in result.hook_failures]  # fields only: no line
            self.send({"t": "result", "v": header})
            for name in _SPILLS:
                for item in getattr(result, name):
                    self.send({"t": "item", "f": name, "v": item})
            for sid, why in result.kept.items():
                self.send({"t": "kept", "k": sid, "v": why})
        for key, rows in run.data.items():
            for row in rows:
                self.send({"t": "data", "k": key, "v": row})
        self.send({"t": "end", "v": {
            "dry_run": run.dry_run, "problems": [p.as_dict() for p in run.problems],
            "policies": run.policies, "findings": [f.as_dict() for f in run.findings],
            "internal": run.internal,
        }})


def beat_every(idle_timeout: float) -> float:
    """How often to beat for a reader that waits `idle_timeout` seconds for a sign of life."""
    return max(0.05, min(BEAT_S, idle_timeout / 4))


def _plain(value):
    return value.as_dict() if hasattr(value, "as_dict") else str(value)


# -- the host's side: reading a report, trusting nothing ----------------------------

class ProtocolError(Exception):
    """A worker said something that is not the protocol: it is stopped and its profiles failed."""


def _text(value, limit: int = 4096) -> str:
    return _taken(decoded.text(value, limit))


def _plain_json(value):
    """A JSON value of bounded depth whose texts are bounded (rows, policies, details)."""
    return _taken(decoded.plain_json(value))


# -- the rows of list-type jobs: each kind's fields, checked before any command reads one ------
#
# A row is a JSON object (bounded: _plain_json). Each kind's dataclass names the fields the host's
# commands read from it, each of its type (`None` too where it says `| None`; `Scalar`: any plain
# value; `object`: anything), present unless it may be absent (`_may_be_absent`), and `home` one of
# the homes that worker was given. Fields not named travel as plain JSON, shown as they are
# (`--json`): a row is checked against its class (decode's `extra_ok`) and kept as the object it
# came as. A row of no known kind, or one failing a check, is a broken protocol: its worker's
# profiles fail (exit 2), never a command (exit 70).

def _may_be_absent():
    """A field a row may leave out: checked when it is there."""
    return field(default=None, metadata={"optional": True})


@dataclass(frozen=True, kw_only=True)
class InstallationShown:
    """installation.Lookup.as_dict's installation."""

    python: str
    found_by: str
    hermes: Scalar = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class LookupShown:
    """installation.Lookup.as_dict."""

    installation: InstallationShown | None = _may_be_absent()
    notes: tuple[str, ...] | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class PolicyShown:
    """A profile's policy in a report's end (actions/maintenance: the policy as a dict, its origins
    and lookup)."""

    profile: Scalar = _may_be_absent()
    description: Scalar = _may_be_absent()
    origins: dict[str, object] | None = _may_be_absent()
    hermes: LookupShown | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class _Row:
    home: str  # one of the homes the worker was given (Reader.row)


@dataclass(frozen=True, kw_only=True)
class ProfileRow(_Row):
    name: str
    ok: bool
    error: str | None
    store: Scalar
    schema_version: Scalar
    journal_mode: Scalar
    sessions: float | None
    messages: float | None
    archived: float | None
    live: float | None
    empty: float | None
    stale_open: float | None = _may_be_absent()
    store_bytes: float | None
    wal_bytes: float | None
    last_activity: Scalar
    reclaimable_bytes: float | None = _may_be_absent()
    reclaim_waits_for: str | None = _may_be_absent()
    hermes: LookupShown | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class SummaryRow(_Row):
    name: str
    ok: object = _may_be_absent()
    store: Scalar = _may_be_absent()
    sessions: int | None = _may_be_absent()
    messages: int | None = _may_be_absent()
    store_bytes: int | None = _may_be_absent()
    wal_bytes: int | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class UsageFiles:
    state_db: int
    state_db_wal: int
    state_db_shm: int
    sessions_dir: int
    exports: int


@dataclass(frozen=True, kw_only=True)
class StorePart:
    kind: str
    name: str | None
    bytes: int


@dataclass(frozen=True, kw_only=True)
class LargeSession:
    id: str
    bytes: int
    source: Scalar


@dataclass(frozen=True, kw_only=True)
class SourceShare:
    source: Scalar
    sessions: int
    bytes: int
    share_sessions: float
    share_bytes: float


@dataclass(frozen=True, kw_only=True)
class UsageRow(_Row):
    profile: str
    files: UsageFiles
    total_bytes: int
    reclaimable_bytes: float | None = _may_be_absent()
    reclaim_waits_for: str | None = _may_be_absent()
    store_parts: tuple[StorePart, ...]
    largest_sessions: tuple[LargeSession, ...]
    sources: tuple[SourceShare, ...]


@dataclass(frozen=True, kw_only=True)
class SessionRow(_Row):
    profile: str
    id: str
    title: Scalar
    source: Scalar
    messages: int | None
    last_activity: str | None
    open: object
    archived: object
    pinned: object


@dataclass(frozen=True, kw_only=True)
class CountsRow(_Row):
    sessions: int | None


@dataclass(frozen=True, kw_only=True)
class SessionIdsRow(_Row):
    ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SessionFile:
    path: str
    symlink: bool


@dataclass(frozen=True, kw_only=True)
class SessionDetailRow(_Row):
    files: tuple[SessionFile, ...] = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class StatusRow(_Row):
    profile: str
    store: object = _may_be_absent()
    runs: object = _may_be_absent()  # checked by run_record where read


@dataclass(frozen=True, kw_only=True)
class PolicyNote:
    file: str | None = _may_be_absent()
    line: int | None = _may_be_absent()
    message: str


@dataclass(frozen=True, kw_only=True)
class PolicyRow(_Row):
    profile: str
    problems: tuple[PolicyNote, ...]
    warnings: tuple[PolicyNote, ...]
    values: dict[str, object] | None
    origins: dict[str, object] | None
    read: object = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class PluginRow(_Row):
    profile: str
    key: str
    source: str
    enabled: bool
    why: str
    kind: Scalar = _may_be_absent()
    loads: object = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class InstallationRow(_Row):
    profile: str
    installation: InstallationShown | None = _may_be_absent()
    notes: tuple[str, ...] | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class ExportRow(_Row):
    file: str
    profile: str
    created: object = _may_be_absent()
    units: int
    sessions: int
    messages: int
    reasons: tuple[str, ...]
    bytes: int
    made_in: str | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class RemovedRow(ExportRow):
    dry_run: bool = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class HeldRow(_Row):
    ids: tuple[str, ...]
    unit: Scalar = _may_be_absent()
    file: Scalar = _may_be_absent()
    profile: Scalar = _may_be_absent()
    made_in: str | None = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class NoticedRow(_Row):
    session_id: str
    unit: Scalar = _may_be_absent()
    reason: Scalar = _may_be_absent()
    profile: Scalar = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class ExportRemovedRow(_Row):
    file: Scalar = _may_be_absent()
    bytes: int | None = _may_be_absent()
    why: Scalar = _may_be_absent()
    profile: Scalar = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class ReclaimWaitRow(_Row):
    bytes: int | None = _may_be_absent()
    held_by: Scalar = _may_be_absent()
    rewrite_bytes: int | None = _may_be_absent()  # a store too big to VACUUM unasked: what one would rewrite
    profile: Scalar = _may_be_absent()


@dataclass(frozen=True, kw_only=True)
class CompactedRow(_Row):
    profile: str
    free_bytes: int
    given_back_bytes: int
    how: str | None
    journal_mode: Scalar
    refused: str | None
    file_bytes_before: int = _may_be_absent()
    file_bytes_after: int = _may_be_absent()
    not_looked_into: tuple[str, ...] = _may_be_absent()


ROWS: dict[str, type] = {
    "profiles": ProfileRow, "summaries": SummaryRow, "usage": UsageRow, "sessions": SessionRow,
    "counts": CountsRow, "session_ids": SessionIdsRow, "session": SessionDetailRow, "status": StatusRow,
    "policy": PolicyRow, "plugins": PluginRow, "installations": InstallationRow, "exports": ExportRow,
    "held": HeldRow, "noticed": NoticedRow, "removed": RemovedRow, "exports_removed": ExportRemovedRow,
    "reclaim_waits": ReclaimWaitRow, "compacted": CompactedRow,
}


def _checked_as(cls, value, where: str):
    """`value` (plain JSON) checked against `cls`'s fields, and returned as it is: its other fields
    travel unread. A row's lists are as long as the store makes them (a spill bounds the report)."""
    _taken(decode(cls, value, extra_ok=True, max_items=sys.maxsize), where)
    return value


class Reader:
    """Builds the worker's Run from its lines; `homes` are the only profiles it may report on."""

    def __init__(self, homes: set[str], repair: bool = False, max_report: int | None = MAX_REPORT):
        self.homes = homes
        self.max_report = max_report  # None: our own process's report (profile/fork.py), as long as it is
        self.run: Run = RepairRun(dry_run=False) if repair else Run(dry_run=False)
        self.hello: dict | None = None
        self.ended = False
        self.bytes_read = 0
        self._result: Result | None = None

    def line(self, raw: bytes) -> None:
        try:
            self._line(raw)
        except ProtocolError:
            raise
        except Exception as exc:  # whatever a malformed message trips over is the worker's fault
            raise ProtocolError(f"a malformed message ({type(exc).__name__})") from None

    def _line(self, raw: bytes) -> None:
        self.bytes_read += len(raw)
        if self.max_report is not None and self.bytes_read > self.max_report:
            raise ProtocolError(f"a report over {self.max_report >> 20} MiB")
        if len(raw) > MAX_LINE:
            raise ProtocolError(f"a message of {len(raw)} bytes (at most {MAX_LINE})")
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            raise ProtocolError("a line that is not JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("t"), str):
            raise ProtocolError("a message without a type")
        kind = message["t"]
        if kind == "beat":  # a sign of life (the host's idle deadline), nothing else
            return
        if self.ended:
            raise ProtocolError("a message after the end")
        if kind == "hello":
            self.hello = {k: message.get(k) for k in ("uid", "gid", "groups")}
        elif self.hello is None:
            raise ProtocolError("a report before the worker said who it is")
        elif kind == "result":
            self._result = self._header(message.get("v"))
            self.run.results.append(self._result)
        elif kind == "item":
            self._item(message.get("f"), message.get("v"))
        elif kind == "kept":
            if self._result is None:
                raise ProtocolError("a kept entry outside a result")
            self._result.kept[_text(message.get("k"), 1024)] = _text(message.get("v"))
        elif kind == "data":
            key = _text(message.get("k"), 64)
            self.run.data.setdefault(key, []).append(self.row(key, message.get("v")))
        elif kind == "end":
            self._end(message.get("v"))
        else:
            raise ProtocolError(f"unknown message type {kind[:32]!r}")

    def row(self, key: str, value) -> dict:
        """One row of a list-type job: of a known kind, with that kind's fields (ROWS), and of a
        profile this worker was given."""
        kind = ROWS.get(key)
        if kind is None:
            raise ProtocolError(f"a row of no known kind ({key[:32]!r})")
        row = _checked_as(kind, _plain_json(value), f"a row of {key}")
        if row["home"] not in self.homes:
            raise ProtocolError("a row for a profile this worker was not given")
        return row

    def problem(self, value) -> Problem:
        """One problem, every field of its type and bounds (problems.Problem's), no other field,
        and only of a profile this worker was given."""
        problem = _taken(decode(Problem, value), "a problem")
        if problem.home is not None and problem.home not in self.homes:
            raise ProtocolError("a problem for a profile this worker was not given")
        return problem

    @staticmethod
    def hook_failure(value) -> HookFailure:
        """One plugin failure, every field of its type and bounds, no other field (its profile is
        the result's, whose home was checked)."""
        return _taken(decode(HookFailure, value), "a hook failure")

    def finding(self, value) -> Finding:
        """One repair finding, every field of its type and bounds, no other field, and only of a
        profile this worker was given."""
        finding = _taken(decode(Finding, value), "a finding")
        if finding.home not in self.homes:
            raise ProtocolError("a finding for a profile this worker was not given")
        return finding

    def _header(self, v) -> Result:
        head = _taken(decode(Header, v), "a result")
        if head.home not in self.homes:
            raise ProtocolError("a result for a profile this worker was not given")
        return Result(head.profile, head.action, head.reason, head.dry_run, task=head.task, status=head.status,
                      why=head.why, hook_failures=list(head.hook_failures), transactions=head.transactions,
                      longest_write_ms=head.longest_write_ms, longest_write=head.longest_write,
                      vacuumed=head.vacuumed, notes=list(head.notes), seconds=head.seconds, home=head.home,
                      export=head.export)

    def _item(self, name, value) -> None:
        if self._result is None or name not in _SPILLS:
            raise ProtocolError("an item outside a result")
        spill = getattr(self._result, name)
        if name == "done":
            unit = _taken(decode(DoneItem, value), "a unit")
            spill.append(Done(unit.session_id, unit.ids, unit.rule or ""))
        elif name == "skipped":
            unit = _taken(decode(SkippedItem, value), "a skipped entry")
            spill.append({"session_id": unit.session_id, "ids": list(unit.ids or ()), "why": unit.why})
        else:
            spill.append(_text(value))

    def _end(self, v) -> None:
        end = _taken(decode(End, v), "an end")
        if any(p.home is not None and p.home not in self.homes for p in end.problems):
            raise ProtocolError("a problem for a profile this worker was not given")
        if any(f.home not in self.homes for f in end.findings):
            raise ProtocolError("a finding for a profile this worker was not given")
        if any(home not in self.homes for home in end.policies):
            raise ProtocolError("a policy for a profile this worker was not given")
        policies = {home: _checked_as(PolicyShown, policy, "a policy") for home, policy in end.policies.items()}
        run = self.run
        run.dry_run = end.dry_run
        run.add(*end.problems)
        run.internal = run.internal or end.internal
        run.policies.update(policies)
        run.findings += end.findings
        self.ended = True

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
every line is size-bounded, every field type-checked, and a result is accepted only
for a home the job gave that worker (`Reader`). Long lists travel an item a line
and land in the host's Spills, so a report never has to fit in one message.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from types import UnionType
from typing import ClassVar, Union, get_args, get_origin, get_type_hints

from hermes_admin.filters import Filters
from hermes_admin.hook_failures import HookFailure
from hermes_admin.layers import Managed, PolicyLayers
from hermes_admin.model import ORDER, Owner, Profile
from hermes_admin.problems import SEVERITIES, Problem
from hermes_admin.results import Done, Finding, RepairRun, Result, Run

BEAT_THREAD = "hermes-admin-beat"
BEAT_S = 5.0  # how often a worker says it lives, at most (a quarter of its idle deadline, if shorter)
MAX_LINE = 1 << 20  # one message; a longer one ends the worker (an item is a few hundred bytes)
# A whole report: the long lists go to the host's Spills on disk, but rows and texts are in memory.
MAX_REPORT = 256 << 20
MAX_PROBLEMS = 100_000  # in one report
MAX_HOOK_FAILURES = 100_000  # in one result (one per plugin and kind of failure, and their repeats)
MAX_FINDINGS = 100_000  # in one report (repair finds one per odd row, folder or file)
_PROBLEM_FIELDS = {f.name for f in fields(Problem)}
_HOOK_FAILURE_FIELDS = {f.name for f in fields(HookFailure)}
_FINDING_FIELDS = {f.name for f in fields(Finding)}


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
    VERBS: ClassVar[tuple[str, ...]] = ("delete", "archive", "unarchive")
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


def _job_profiles(value) -> tuple[list[Profile], dict[str, PolicyLayers]]:
    """The job's profiles, each with its policy layers, read once, field by field (a layer's values
    are plain JSON: profile/policy.py checks them as it reads the policy)."""
    if not isinstance(value, list):
        raise ProtocolError("job: profiles: expected a list")
    profiles, layers = [], {}
    for n, entry in enumerate(value):
        if not isinstance(entry, dict):
            raise ProtocolError(f"job: profiles[{n}]: expected an object")
        if "layers" not in entry:
            raise ProtocolError(f"job: profiles[{n}].layers: missing")
        profile = _read_fields(Profile, {k: v for k, v in entry.items() if k != "layers"}, f"job: profiles[{n}]")
        profiles.append(profile)
        layers[str(profile.home)] = _read_fields(PolicyLayers, entry["layers"], f"job: profiles[{n}].layers")
    return profiles, layers


def _read_fields(cls, value, where: str):
    """An instance of the dataclass `cls` from a JSON object: every field of its type, no other field."""
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected an object")
    known = {f.name: f for f in fields(cls) if f.init}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ProtocolError(f"{where}: unknown field {str(unknown[0])[:64]!r}")
    hints = get_type_hints(cls)
    given = {}
    for name, spec in known.items():
        if name in value:
            given[name] = _read_value(hints[name], value[name], f"{where}.{name}")
        elif spec.default is MISSING and spec.default_factory is MISSING:
            raise ProtocolError(f"{where}.{name}: missing")
    try:
        return cls(**given)
    except ValueError as exc:  # what the class itself checks (a task's name, a verb)
        raise ProtocolError(f"{where}: {exc}") from None


def _read_value(hint, value, where: str):
    """One value of the type `hint` (text, a number, a flag, X | None, tuple[X, ...],
    dict[str, X] or Mapping[str, X], a path, a dataclass, or `object`: any plain JSON value);
    anything else is a ProtocolError saying where."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):
        inner = [a for a in args if a is not type(None)]
        return None if value is None and len(inner) < len(args) else _read_value(inner[0], value, where)
    if is_dataclass(hint):
        return _read_fields(hint, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list")
        return tuple(_read_value(args[0], v, f"{where}[{n}]") for n, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object")
        return {_read_value(args[0], k, where): _read_value(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    try:
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProtocolError("expected a whole number")
            return value
        read = {str: lambda v: _text(v, MAX_LINE), Path: lambda v: Path(_text(v, MAX_LINE)),
                float: lambda v: float(_number(v)), bool: _flag, object: _plain_json}[hint]
        return read(value)
    except ProtocolError as exc:
        raise ProtocolError(f"{where}: {exc}") from None


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
            header = {k: v for k, v in result.as_dict().items() if k not in _SPILLS and k != "kept"}
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
    if not isinstance(value, str):
        raise ProtocolError(f"expected text, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a file name's undecodable byte) would crash whoever prints it
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value if len(value) <= limit else value[:limit] + "…"


def _opt_text(value, limit: int = 4096) -> str | None:
    return None if value is None else _text(value, limit)


def _texts(value, limit: int = 100_000) -> list[str]:
    if not isinstance(value, list) or len(value) > limit:
        raise ProtocolError("expected a list of text")
    return [_text(v) for v in value]


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError("expected a finite number")
    return value


def _flag(value) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError("expected true or false")
    return value


def _plain_json(value, depth: int = 0):
    """A JSON value of bounded depth whose texts are bounded (rows, policies, details)."""
    if depth > 8:
        raise ProtocolError("nested too deep")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return _text(value, 65536)
    if isinstance(value, list):
        return [_plain_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {_text(k, 256): _plain_json(v, depth + 1) for k, v in value.items()}
    raise ProtocolError("not a JSON value")


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
            row = _plain_json(message.get("v"))
            if isinstance(row, dict) and "home" in row and row["home"] not in self.homes:
                raise ProtocolError("a row for a profile this worker was not given")
            self.run.data.setdefault(key, []).append(row)
        elif kind == "end":
            self._end(message.get("v"))
        else:
            raise ProtocolError(f"unknown message type {kind[:32]!r}")

    def problem(self, value) -> Problem:
        """One problem, field by field: each of its type and bounds, no other field, and only of a
        profile this worker was given."""
        if not isinstance(value, dict) or set(value) != _PROBLEM_FIELDS:
            raise ProtocolError("a problem that is not an object of its fields")
        severity = value["severity"]
        if severity not in SEVERITIES:
            raise ProtocolError("a problem of an unknown severity")
        home = _opt_text(value["home"])
        if home is not None and home not in self.homes:
            raise ProtocolError("a problem for a profile this worker was not given")
        line = value["line"]
        if line is not None and (isinstance(line, bool) or not isinstance(line, int) or not 0 < line < 1 << 31):
            raise ProtocolError("a problem whose line is not a line number")
        return Problem(severity, _text(value["message"]), profile=_opt_text(value["profile"], 256), home=home,
                       kind=_text(value["kind"], 64), path=_opt_text(value["path"]),
                       key=_opt_text(value["key"], 256), line=line, skipped=_flag(value["skipped"]))

    @staticmethod
    def hook_failure(value) -> HookFailure:
        """One plugin failure, field by field: each of its type and bounds, no other field (its
        profile is the result's, whose home was checked)."""
        if not isinstance(value, dict) or set(value) != _HOOK_FAILURE_FIELDS:
            raise ProtocolError("a hook failure that is not an object of its fields")
        repeats = value["repeats"]
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 0 <= repeats < 1 << 31:
            raise ProtocolError("a hook failure whose repeats is not a count")
        return HookFailure(_opt_text(value["plugin"], 256), _text(value["kind"], 64), _text(value["message"]),
                           repeats=repeats)

    def finding(self, value) -> Finding:
        """One repair finding, field by field: each of its type and bounds, no other field, and only
        of a profile this worker was given."""
        if not isinstance(value, dict) or set(value) != _FINDING_FIELDS:
            raise ProtocolError("a finding that is not an object of its fields")
        home = _opt_text(value["home"])
        if home not in self.homes:
            raise ProtocolError("a finding for a profile this worker was not given")
        return Finding(_text(value["profile"], 256), _text(value["kind"], 64), _text(value["subject"]),
                       _text(value["detail"]), _text(value["fix"]), target=_opt_text(value["target"], 256),
                       applied=_flag(value["applied"]), error=_opt_text(value["error"]), home=home)

    def _header(self, v) -> Result:
        if not isinstance(v, dict):
            raise ProtocolError("a result that is not an object")
        home = _text(v.get("home") or "")
        if home not in self.homes:
            raise ProtocolError("a result for a profile this worker was not given")
        result = Result(_text(v.get("profile"), 256), _text(v.get("action"), 32), _opt_text(v.get("reason")),
                        _flag(v.get("dry_run")), task=_opt_text(v.get("task")))
        result.home = home
        result.status = _text(v.get("status"), 32)
        result.why = _opt_text(v.get("why"))
        failures = v.get("hook_failures")
        if not isinstance(failures, list) or len(failures) > MAX_HOOK_FAILURES:
            raise ProtocolError(f"hook failures that are not a list of at most {MAX_HOOK_FAILURES}")
        result.hook_failures = [self.hook_failure(f) for f in failures]
        result.notes = _texts(v.get("notes"))
        result.transactions = int(_number(v.get("transactions")))
        result.longest_write_ms = float(_number(v.get("longest_write_ms")))
        result.longest_write = _opt_text(v.get("longest_write"))
        result.vacuumed = _flag(v.get("vacuumed"))
        result.seconds = float(_number(v.get("seconds")))
        result.export = _opt_text(v.get("export"))
        return result

    def _item(self, name, value) -> None:
        if self._result is None or name not in _SPILLS:
            raise ProtocolError("an item outside a result")
        spill = getattr(self._result, name)
        if name == "done":
            if not isinstance(value, dict):
                raise ProtocolError("a unit that is not an object")
            spill.append(Done(_text(value.get("session_id"), 1024), tuple(_texts(value.get("ids"))),
                              _text(value.get("rule") or "")))
        elif name == "skipped":
            if not isinstance(value, dict):
                raise ProtocolError("a skipped entry that is not an object")
            spill.append({"session_id": _text(value.get("session_id"), 1024),
                          "ids": _texts(value.get("ids") or []), "why": _text(value.get("why"))})
        else:
            spill.append(_text(value))

    def _end(self, v) -> None:
        if not isinstance(v, dict):
            raise ProtocolError("an end that is not an object")
        run = self.run
        run.dry_run = _flag(v.get("dry_run"))
        found = v.get("problems")
        if not isinstance(found, list) or len(found) > MAX_PROBLEMS:
            raise ProtocolError(f"problems that are not a list of at most {MAX_PROBLEMS}")
        run.add(*(self.problem(p) for p in found))
        run.internal = run.internal or v.get("internal") is True
        policies = v.get("policies") or {}
        if not isinstance(policies, dict):
            raise ProtocolError("policies that are not an object")
        for key, policy in policies.items():
            if _text(key, 4096) not in self.homes:
                raise ProtocolError("a policy for a profile this worker was not given")
            run.policies[key] = _plain_json(policy)
        findings = v.get("findings")
        if not isinstance(findings, list) or len(findings) > MAX_FINDINGS:
            raise ProtocolError(f"findings that are not a list of at most {MAX_FINDINGS}")
        run.findings += [self.finding(f) for f in findings]
        self.ended = True

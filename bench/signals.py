"""Signals against deletions: kill -9, SIGINT and SIGTERM at random moments, then the delivery contract.

Each trial copies one prebuilt profile home (a v30 store with the standard synthetic scenario
plus ~1,200 old ended sessions, some of them compression lineages and parents with delegates,
some with transcript files, one under a live compression lock; rows dated as if written two hours
ago, so none crosses an age threshold while the trials run; a recording plugin `rec` enabled),
starts one deleting command on it

    purge --older-than 90 --yes --json
    sessions delete --before 100d --yes --json
    run --yes --json                      (config.yaml: sessions: {auto_prune: true, retention_days: 90})

sends it SIGKILL, SIGINT or SIGTERM after a delay drawn uniformly over that command's measured
run time, then runs the same command again without signals (the follow-up) and checks:

 1. every session row that was in the store before and is gone after the follow-up was announced
    by some event (`deleted_ids or [session_id]`) the plugin recorded, under one event_id only;
 2. no event names a row that still exists, neither after the interrupted command nor after the
    follow-up (an event never fires for a transaction that did not commit);
 3. repeats (the same event_id delivered more than once): at most one per kill -9, none for
    SIGINT/SIGTERM; the follow-up leaves no pending/committed event in the outbox;
 4. SIGINT/SIGTERM: stdout is exactly one JSON document whose `done` ids are the rows that went,
    and the exit code is 130 (0/1 only when the command had nothing left to do: the follow-up
    deleted nothing and delivered nothing); the follow-up exits 0/1 with a valid report too;
 5. after the interrupted command and after the follow-up: `PRAGMA integrity_check` is ok,
    `PRAGMA foreign_key_check` shows no row the base store did not already have (the scenario
    plants orphan message/usage rows on purpose), and no unit is split (a compression lineage
    with its delegates for purge/run, a session with its delegates for `sessions delete`: wholly
    present or wholly gone); finally the follow-up leaves the same sessions a clean run leaves.

A SIGINT/SIGTERM that lands before hermes-admin has installed its handlers (interpreter start and
imports) kills the process by the signal: reported as `early`, a pass when nothing was changed.
One that lands in interpreter shutdown, after the report and all the work (Python has restored
the default handlers by then), also ends it by the signal: `late`, a pass when the report is
valid and the follow-up finds nothing left to do. With --strict both are failures.

    cd /work/main && python bench/signals.py --trials 120 --seed 1 [--jobs 2] [--keep] [--strict]

One line per trial, then `N passed, M failed`; the exit status is 1 if any trial failed. Temporary
folders (under $TMPDIR) are removed unless --keep. Only the standard library and hermes_admin
(its synthetic-store builder) are used; the commands run as `python -m hermes_admin` from the
repository root with HERMES_ADMIN_CONFIG="" and a private HOME and XDG_RUNTIME_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hermes_admin.synth.builder import DAY, SynthStore, session_id_at, write_session_files  # noqa: E402
from hermes_admin.synth.scenario import populate  # noqa: E402

COMMANDS = {
    "purge": ["purge", "--older-than", "90", "--yes", "--json"],
    "delete": ["sessions", "delete", "--before", "100d", "--yes", "--json"],
    "run": ["run", "--yes", "--json"],
}
SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}
EVENTS_FILE = "recorded-events.jsonl"
COMMAND_TIMEOUT_S = 120.0
BUILT_AGO_S = 2 * 3600.0  # the store's rows are dated as if written this long ago

RECORDER = '''\
"""Records every on_session_delete event, one fsynced JSON line each."""
import json
import os


def register(ctx):
    def on_delete(session_id, reason, profile, deleted_ids, sessions_dir, event_id):
        line = json.dumps({"event_id": event_id, "session_id": session_id, "reason": reason,
                           "profile": profile, "deleted_ids": deleted_ids, "pid": os.getpid()})
        with open(os.path.join(os.environ["HERMES_HOME"], "%s"), "a") as f:
            f.write(line + "\\n")
            f.flush()
            os.fsync(f.fileno())

    ctx.register_hook("on_session_delete", on_delete)
''' % EVENTS_FILE

CONFIG = """\
model:
  default: synth/model-1
plugins:
  enabled: [rec]
sessions:
  auto_prune: true
  retention_days: 90
"""


# -- the store ------------------------------------------------------------------

def build_home(home: Path, bulk: int, now: float) -> None:
    """The standard scenario plus `bulk` old ended units (plain, lineages of 3, parents with 2 delegates)."""
    for folder in ("sessions", "logs", "memories", "skills", "cron"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    store = SynthStore(home / "state.db", version=30, profile="default")
    populate(store, home / "sessions", now, tag="default")
    for i in range(bulk):
        started = now - 200 * DAY + i * 60
        sid = session_id_at(started, f"bulk:{i}")
        kind = i % 10
        store.session(sid, started=started, ended=started + 30,
                      end_reason="compression" if kind == 3 else "user_exit", title=f"bulk {i}")
        store.messages(sid, 3, started)
        if i % 4 == 0:
            write_session_files(home / "sessions", sid, ("jsonl",), mtime=started)
        if i == 1:  # under a live compression lock (the scenario's own expires an hour after `now`)
            store.compression_lock(sid, expires=now + BUILT_AGO_S + 2 * DAY)
        if kind == 3:  # a compression lineage: root -> middle -> tip, all old and ended
            mid = store.session(session_id_at(started + 31, f"bulk:{i}:mid"), started=started + 31,
                                ended=started + 40, end_reason="compression", parent=sid)
            store.messages(mid, 2, started + 31)
            tip = store.session(session_id_at(started + 41, f"bulk:{i}:tip"), started=started + 41,
                                ended=started + 50, end_reason="user_exit", parent=mid)
            store.messages(tip, 2, started + 41)
        elif kind == 7:  # a parent with two delegates
            for d in range(2):
                child = store.session(session_id_at(started + 5 + d, f"bulk:{i}:d{d}"), started=started + 5 + d,
                                      source="subagent", ended=started + 20, end_reason="done",
                                      parent=sid, delegate_from=sid)
                store.messages(child, 2, started + 5 + d)
    store.close()
    plugin = home / "plugins" / "rec"
    plugin.mkdir(parents=True)
    (plugin / "plugin.yaml").write_text("name: rec\nversion: 0.0.1\nhooks: [on_session_delete]\n")
    (plugin / "__init__.py").write_text(RECORDER)
    (home / "config.yaml").write_text(CONFIG)


@dataclass
class Snapshot:
    """What the checks need of a store at one moment."""
    ids: set[str]
    integrity: str
    fk: set[tuple]
    dangling: set[str]  # sessions whose parent_session_id names a missing row


def snapshot(db: Path) -> Snapshot:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT id, parent_session_id FROM sessions").fetchall()
        ids = {r[0] for r in rows}
        integrity = "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
        fk = {tuple(r) for r in conn.execute("PRAGMA foreign_key_check")}
    finally:
        conn.close()
    return Snapshot(ids, integrity, fk, {sid for sid, parent in rows if parent and parent not in ids})


def units_of(db: Path, command: str) -> list[set[str]]:
    """Units as docs/design.md §2 defines them, computed here independently of hermes_admin's lineage code:
    a session with its delegates (recursively); for purge/run also the whole compression lineage."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, parent_session_id, end_reason, model_config FROM sessions").fetchall()
    finally:
        conn.close()
    end_reason = {sid: reason for sid, _, reason, _ in rows}
    up: dict[str, str] = {sid: sid for sid, *_ in rows}

    def find(x: str) -> str:
        while up[x] != x:
            up[x] = up[up[x]]
            x = up[x]
        return x

    def join(a: str, b: str) -> None:
        if a in up and b in up:
            up[find(a)] = find(b)

    for sid, parent, _, config in rows:
        try:
            delegate_from = (json.loads(config) or {}).get("_delegate_from") if config else None
        except ValueError:
            delegate_from = None
        if delegate_from:
            join(sid, delegate_from)
            if parent:
                join(sid, parent)
        elif parent and command != "delete" and end_reason.get(parent) == "compression":
            join(sid, parent)
    groups: dict[str, set[str]] = {}
    for sid in up:
        groups.setdefault(find(sid), set()).add(sid)
    return [g for g in groups.values() if len(g) > 1]


# -- running one command ------------------------------------------------------------

@dataclass
class Outcome:
    rc: int | None
    stdout: str
    stderr: str
    seconds: float
    signalled: bool = False  # the signal was sent while the process still ran
    hung: bool = False


def environment(trial: Path) -> dict[str, str]:
    env = dict(os.environ, HERMES_ADMIN_CONFIG="", HOME=str(trial / "user"),
               XDG_RUNTIME_DIR=str(trial / "xdg"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("HERMES_HOME", None)
    (trial / "user").mkdir(exist_ok=True)
    (trial / "xdg").mkdir(mode=0o700, exist_ok=True)
    return env


def run_command(trial: Path, root: Path, command: str, name: str, sig: int | None = None,
                delay: float = 0.0) -> Outcome:
    out_path, err_path = trial / f"{name}.stdout", trial / f"{name}.stderr"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        began = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "hermes_admin", "--root", str(root), *COMMANDS[command]],
                                cwd=str(REPO), env=environment(trial), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err)
        signalled = hung = False
        if sig is not None:
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(sig)  # the process we started, and only it
                signalled = True
        try:
            rc = proc.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
            hung = True
        seconds = time.monotonic() - began
    return Outcome(rc, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"), seconds,
                   signalled, hung)


def one_json(text: str):
    """The one JSON document `text` holds, or raise ValueError."""
    document, end = json.JSONDecoder().raw_decode(text.lstrip())
    if text.lstrip()[end:].strip():
        raise ValueError("more than one JSON document (or trailing text) on stdout")
    if not isinstance(document, dict) or "results" not in document:
        raise ValueError("not a report (no `results`)")
    return document


def done_ids(report: dict, known: set[str]) -> set[str]:
    """The session ids a report says it deleted (orphan-row units name rows that never existed)."""
    ids = set()
    for result in report.get("results", []):
        if result.get("action") == "delete" and not result.get("dry_run"):
            for done in result.get("done", []):
                ids.update(done.get("ids", []))
    return ids & known


def recorded(home: Path) -> list[dict]:
    path = home / EVENTS_FILE
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event_id": None, "session_id": None, "broken_line": line[:200]})
    return events


def outbox_left(home: Path) -> dict[str, int]:
    path = home / ".hermes-admin" / "outbox.db"
    if not path.exists():
        return {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT state, COUNT(*) FROM events WHERE state != 'delivered' GROUP BY state"))
    finally:
        conn.close()


def tail(text: str, lines: int = 6) -> str:
    return "\n".join("      | " + line for line in text.strip().splitlines()[-lines:])


# -- one trial --------------------------------------------------------------------

@dataclass
class Base:
    home: Path
    before: Snapshot
    units: dict[str, list[set[str]]]  # command -> units of the base store
    clean_after: dict[str, set[str]] = field(default_factory=dict)  # command -> sessions a clean run leaves
    seconds: dict[str, float] = field(default_factory=dict)  # command -> run time of a clean run


@dataclass
class Trial:
    n: int
    command: str
    signal: str
    delay: float
    rc: int | None = None
    first: int = 0  # rows deleted by the interrupted command
    second: int = 0  # by the follow-up
    events: int = 0
    repeats: int = 0
    verdict: str = "ok"
    problems: list[str] = field(default_factory=list)
    stderr: str = ""
    stderr_followup: str = ""

    def line(self) -> str:
        rc = "-" if self.rc is None else str(self.rc)
        return (f"#{self.n:<4} {self.command:<6} SIG{self.signal:<5} delay {self.delay:5.2f}s  rc {rc:>4}  "
                f"deleted {self.first:>5}+{self.second:<5} events {self.events:>5}  repeats {self.repeats}  "
                f"{self.verdict}")


def check_store(snap: Snapshot, base: Base, units: list[set[str]], when: str) -> list[str]:
    problems = []
    if snap.integrity != "ok":
        problems.append(f"{when}: integrity_check: {snap.integrity[:300]}")
    new_fk = snap.fk - base.before.fk
    if new_fk:
        problems.append(f"{when}: {len(new_fk)} new foreign_key_check row(s), e.g. {sorted(new_fk)[:3]}")
    new_dangling = snap.dangling - base.before.dangling
    if new_dangling:
        problems.append(f"{when}: parent_session_id names a missing row: {sorted(new_dangling)[:3]}")
    split = [u for u in units if (u & snap.ids) and not u <= snap.ids]
    if split:
        u = split[0]
        problems.append(f"{when}: {len(split)} unit(s) split, e.g. kept {sorted(u & snap.ids)} "
                        f"gone {sorted(u - snap.ids)}")
    return problems


def run_trial(trial: Trial, base: Base, work: Path, strict: bool) -> Trial:
    folder = work / f"trial-{trial.n:04d}"
    folder.mkdir()
    home = folder / "root"
    shutil.copytree(base.home, home, symlinks=True)
    db = home / "state.db"
    before = base.before
    units = base.units[trial.command]
    sig = SIGNALS[trial.signal]
    p = trial.problems

    first = run_command(folder, home, trial.command, "interrupted", sig, trial.delay)
    trial.rc, trial.stderr = first.rc, first.stderr
    if first.hung:
        p.append(f"interrupted command did not end within {COMMAND_TIMEOUT_S:.0f} s after the signal; killed")
    if trial.signal == "KILL":
        time.sleep(0.05)  # a plugin process the kill orphaned finishes its one callback, then sees EOF
    mid = snapshot(db)
    trial.first = len(before.ids - mid.ids)
    mid_events = recorded(home)
    p += check_store(mid, base, units, "after the signal")
    named_mid = {i for e in mid_events for i in (e.get("deleted_ids") or [e.get("session_id")])}
    if named_mid & mid.ids:
        p.append(f"after the signal: {len(named_mid & mid.ids)} event(s) name rows still in the store, "
                 f"e.g. {sorted(named_mid & mid.ids)[:3]}")

    early = late = False
    report = None
    if trial.signal != "KILL" and first.signalled:
        if not first.stdout.strip() and (first.rc == -sig or (
                first.rc == 1 and first.stderr.rstrip().endswith("KeyboardInterrupt"))):
            # killed by the signal's default action (or Python's KeyboardInterrupt while it was
            # still importing): the handlers of cli.main.main() were not set yet
            early = True
            if mid.ids != before.ids or mid_events:
                p.append(f"killed by SIG{trial.signal} before its handlers were set, yet "
                         f"{trial.first} row(s) went and {len(mid_events)} event(s) fired")
            elif strict:
                p.append(f"killed by SIG{trial.signal} before its handlers were set (no report, rc {first.rc})")
        else:
            try:
                report = one_json(first.stdout)
            except ValueError as exc:
                p.append(f"stdout is not one JSON report: {exc}: {first.stdout[:200]!r}")
            if report is not None and done_ids(report, before.ids) != before.ids - mid.ids:
                said, went = done_ids(report, before.ids), before.ids - mid.ids
                p.append(f"the report lists {len(said)} deleted row(s), {len(went)} went "
                         f"(listed, not gone: {sorted(said - went)[:3]}; gone, not listed: {sorted(went - said)[:3]})")
            if first.rc == -sig and report is not None:
                # the report is out, and the signal's default action ended the process: it landed in
                # interpreter shutdown, after the work (checked below: the follow-up finds none left)
                late = True
                if strict:
                    p.append(f"killed by SIG{trial.signal} in interpreter shutdown, after its report (rc {first.rc})")
            elif first.rc not in (130, 0, 1):
                p.append(f"exit code {first.rc}, expected 130")
    elif not first.hung and first.rc not in (0, 1) and not (trial.signal == "KILL" and first.signalled):
        p.append(f"exit code {first.rc} (the command finished before the signal)")

    second = run_command(folder, home, trial.command, "followup")
    trial.stderr_followup = second.stderr
    if second.hung:
        p.append("follow-up did not end")
    if second.rc not in (0, 1):
        p.append(f"follow-up exit code {second.rc}")
    after = snapshot(db)
    trial.second = len(mid.ids - after.ids)
    try:
        followup_report = one_json(second.stdout)
        if done_ids(followup_report, before.ids) != mid.ids - after.ids:
            p.append("the follow-up's report does not list exactly the rows it deleted")
    except ValueError as exc:
        p.append(f"follow-up stdout is not one JSON report: {exc}")
    events = recorded(home)
    trial.events = len(events)
    follow_events = len(events) - len(mid_events)
    if first.signalled and not early and (late or first.rc in (0, 1)) and (trial.second or follow_events):
        p.append(f"exit code {first.rc} after SIG{trial.signal}, but work was left: the follow-up deleted "
                 f"{trial.second} row(s) and delivered {follow_events} event(s) (expected 130)")
    p += check_store(after, base, units, "after the follow-up")
    if after.ids != base.clean_after[trial.command]:
        extra, missing = after.ids - base.clean_after[trial.command], base.clean_after[trial.command] - after.ids
        p.append(f"after the follow-up the store differs from a clean run's: {len(extra)} more row(s) "
                 f"{sorted(extra)[:3]}, {len(missing)} fewer {sorted(missing)[:3]}")

    # Events: what was announced, and how often.
    broken = [e for e in events if e.get("event_id") is None]
    if broken:
        p.append(f"{len(broken)} recorded event(s) without an event_id or unreadable: {broken[0]}")
    counts = Counter(e.get("event_id") for e in events)
    trial.repeats = sum(c - 1 for c in counts.values())
    allowed = 1 if (trial.signal == "KILL" and first.signalled) else 0
    if trial.repeats > allowed:
        twice = [(eid, c) for eid, c in counts.items() if c > 1]
        where = []
        for eid, _ in twice[:3]:
            firsts = [i for i, e in enumerate(mid_events) if e.get("event_id") == eid]
            where.append(f"{eid}: {sum(1 for e in mid_events if e.get('event_id') == eid)}x by the interrupted "
                         f"command" + (" (its last event)" if firsts and firsts[-1] == len(mid_events) - 1 else "")
                         + f", {sum(1 for e in events[len(mid_events):] if e.get('event_id') == eid)}x by the follow-up")
        p.append(f"{trial.repeats} repeat(s), at most {allowed} allowed: {'; '.join(where)}")
    by_id: dict[str, dict] = {}
    for e in events:
        first_seen = by_id.setdefault(e.get("event_id"), e)
        if (first_seen.get("session_id"), first_seen.get("deleted_ids")) != (e.get("session_id"), e.get("deleted_ids")):
            p.append(f"event {e.get('event_id')} delivered with different contents: {first_seen} / {e}")
    announced: Counter = Counter()
    for eid, e in by_id.items():
        for sid in set(e.get("deleted_ids") or [e.get("session_id")]):
            announced[sid] += 1
    gone = before.ids - after.ids
    silent = gone - set(announced)
    if silent:
        by_first = silent - mid.ids
        p.append(f"{len(silent)} deleted row(s) never announced ({len(by_first)} deleted by the interrupted "
                 f"command, {len(silent) - len(by_first)} by the follow-up), e.g. {sorted(silent)[:3]}")
    twice = [sid for sid, c in announced.items() if c > 1]
    if twice:
        p.append(f"{len(twice)} row(s) announced under two event ids, e.g. {sorted(twice)[:3]}")
    alive = set(announced) & after.ids
    if alive:
        p.append(f"{len(alive)} event(s) name rows that still exist, e.g. {sorted(alive)[:3]}")
    try:
        left = outbox_left(home)
    except sqlite3.Error as exc:
        left = {"unreadable": str(exc)}
    if left:
        p.append(f"the follow-up left events in the outbox: {left}")

    if p:
        trial.verdict = "FAIL"
    elif early:
        trial.verdict = "ok (early: died by the signal before its handlers, nothing changed)"
    elif late:
        trial.verdict = "ok (late: died by the signal in shutdown, after its report and all its work)"
    elif not first.signalled:
        trial.verdict = "ok (finished before the signal)"
    return trial


# -- the driver ---------------------------------------------------------------------

def prepare(work: Path, bulk: int, jobs: int) -> Base:
    home = work / "base" / "root"
    home.mkdir(parents=True)
    began = time.monotonic()
    # Two hours back: no row then sits just at a threshold the clock would move it across while the
    # trials run (the scenario's old_archived session was last active 100 days + 3 minutes ago).
    build_home(home, bulk, time.time() - BUILT_AGO_S)
    before = snapshot(home / "state.db")
    base = Base(home, before, {c: units_of(home / "state.db", c) for c in COMMANDS})
    print(f"base store: {len(before.ids)} sessions, {len(base.units['purge'])} multi-row units, "
          f"built in {time.monotonic() - began:.1f} s", flush=True)

    def clean(command: str) -> tuple[str, Outcome, Snapshot, int]:
        folder = work / f"clean-{command}"
        folder.mkdir()
        shutil.copytree(home, folder / "root", symlinks=True)
        outcome = run_command(folder, folder / "root", command, "clean")
        return command, outcome, snapshot(folder / "root" / "state.db"), len(recorded(folder / "root"))

    with ThreadPoolExecutor(jobs) as pool:  # measured under the load the trials will run under
        for command, outcome, snap, events in pool.map(clean, COMMANDS):
            if outcome.rc not in (0, 1):
                raise SystemExit(f"a clean `{command}` failed (exit {outcome.rc}); nothing to measure against:\n"
                                 + tail(outcome.stderr, 10))
            base.clean_after[command] = snap.ids
            base.seconds[command] = outcome.seconds
            print(f"clean {command:<6}: {outcome.seconds:.2f} s, {len(before.ids - snap.ids)} rows deleted, "
                  f"{events} events, exit {outcome.rc}", flush=True)
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders (their path is printed)")
    parser.add_argument("--jobs", type=int, default=2, help="trials run at once (default 2)")
    parser.add_argument("--sessions", type=int, default=1200, help="old bulk units in the base store")
    parser.add_argument("--strict", action="store_true", help="an early or late signal (before the handlers are set, in shutdown) fails")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="hermes-signals-"))
    print(f"seed {seed}, {args.trials} trials, {args.jobs} at a time, in {work}", flush=True)
    started = time.monotonic()
    try:
        base = prepare(work, args.sessions, args.jobs)
        trials = []
        for n in range(1, args.trials + 1):
            command = rng.choice(sorted(COMMANDS))
            trials.append(Trial(n, command, rng.choice(sorted(SIGNALS)),
                                round(rng.uniform(0.0, base.seconds[command]), 3)))
        printed = threading.Lock()
        failed: list[Trial] = []

        def go(trial: Trial) -> Trial:
            try:
                run_trial(trial, base, work, args.strict)
            except Exception as exc:  # a fault of this script is a failed trial too, never a silent one
                trial.verdict = "FAIL"
                trial.problems.append(f"the check itself raised {type(exc).__name__}: {exc}")
            with printed:
                print(trial.line(), flush=True)
                if trial.problems:
                    failed.append(trial)
                    for problem in trial.problems:
                        print(f"      - {problem}")
                    print("      stderr of the interrupted command:\n" + tail(trial.stderr))
                    if trial.stderr_followup.strip():
                        print("      stderr of the follow-up:\n" + tail(trial.stderr_followup))
                    sys.stdout.flush()
                if not args.keep:
                    shutil.rmtree(work / f"trial-{trial.n:04d}", ignore_errors=True)
            return trial

        with ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(go, trials))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    early = sum(1 for t in done if t.verdict.startswith("ok (early"))
    late = sum(1 for t in done if t.verdict.startswith("ok (late"))
    unsent = sum(1 for t in done if t.verdict.startswith("ok (finished"))
    by_signal = Counter(t.signal for t in done)
    print(f"seed {seed}: {len(done) - len(failed)} passed, {len(failed)} failed "
          f"({', '.join(f'SIG{s} {c}' for s, c in sorted(by_signal.items()))}; {early} early, {late} late, "
          f"{unsent} finished before the signal; {time.monotonic() - started:.0f} s)"
          + (f"; kept in {work}" if args.keep else ""))
    if failed:
        print("failed trials: " + ", ".join(f"#{t.n}" for t in sorted(failed, key=lambda t: t.n)))
    print(f"{len(done) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

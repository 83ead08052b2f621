"""The job a host hands a worker: one frozen dataclass per kind (protocol.py), checked field by field
when read; and the one host runner (host/runner.py) that both the CLI and the daemon call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from hermes_admin.layers import HermesPython, Layer, Origin, PolicyLayers
from hermes_admin import child
from hermes_admin.filters import Filters
from hermes_admin.model import ORDER
from hermes_admin.protocol import (PARAMS, Change, Compact, Context, Job, ListExports, ListPlugins, ListProfiles, ListSessions,
                                   Maintain, Owner, Profile, ProtocolError, PruneExports, Repair, Request, Resolve,
                                   Restore, SessionDetail, ShowPolicy, Status, Usage)
from hermes_admin.results import Run

OWNER = Owner(1000, 1000, (1000, 27), "ann", "/home/ann")
# a profile's admin layers, each kind of field set (a nested value included, as YAML gives them)
LAYERS = PolicyLayers(entry=Layer({"retention_days": 30, "preset": "lean"}, Origin("/etc/a.yaml", "profiles.work")),
                      preset=Layer({"auto_archive_days": 7}, Origin("/usr/share/hermes-admin/profiles/lean.yaml")),
                      defaults=Layer({"source_retention_days": {"cron": 30}, "export_dir": None},
                                     Origin("/etc/a.yaml", "defaults")),
                      hermes_python=HermesPython("/v/bin/python", Origin("/etc/a.yaml", "hermes_python./r")))
PROFILES = [Profile(Path("/r"), "default", Path("/r")),
            Profile(Path("/r"), "work", Path("/r/profiles/work"), "/r:work")]

EVERY_KIND = [
    Maintain(Request(ORDER, 1.5e9, force=True, older_than=30, filters=Filters(source="cli", min_messages=2,
                                                                              before=1.4e9), export_dir="/x"),
             summaries=True, command="daemon: run"),
    Maintain(Request(("purge",), 1.5e9, explicit=True, dry_run=True, vacuum=True)),
    Change("delete", False, force=True, ids={"/r": ("a", "b")}, filters=Filters(title="old"), export_dir="/e"),
    Change("unarchive", True, ids={"/r/profiles/work": ("c",)}),
    Repair(apply=True, check_fts=True, move_legacy_main=True),
    Restore("/r/.hermes-admin/exports/x.jsonl", False, ("s1",)),
    Restore("/tmp/y.jsonl", True),
    PruneExports(True, {"/r": ("/r/.hermes-admin/exports/x.jsonl",)}, "/e"),
    ListProfiles(), Status(), ShowPolicy(), Usage(), ListPlugins(), ListExports("/e"), ListExports(),
    ListSessions(20), Resolve(), SessionDetail("s1"), Compact(True), Compact(False, force=True),
]


def _job(params) -> Job:
    return Job(params, OWNER, PROFILES, {"/r": LAYERS, "/r/profiles/work": PolicyLayers()},
               Context(verbose=2, lock_wait=4.5, safe_mode="1", processes=1,
                       siblings={"/r": {"work": "/r/profiles/work"}}))


@pytest.mark.parametrize("params", EVERY_KIND, ids=lambda p: p.KIND)
def test_every_kind_of_job_comes_back_whole(params):
    job = _job(params)
    back = Job.decode(job.encode())
    assert back == job and type(back.params) is type(params) and back.kind == params.KIND
    assert back.profiles[1].display == "/r:work" and back.layers["/r"] == LAYERS


def test_every_kind_is_covered_and_dry_run_is_carried_once():
    from hermes_admin.profile import jobs

    assert {p.KIND for p in EVERY_KIND} == set(PARAMS) == set(jobs.KINDS)  # a worker does every kind
    maintain = json.loads(_job(EVERY_KIND[1]).encode())["params"]
    assert "dry_run" not in maintain and maintain["request"]["dry_run"] is True  # the request's, once
    assert EVERY_KIND[1].dry_run and not EVERY_KIND[0].dry_run
    assert "dry_run" not in json.loads(_job(Repair(apply=True)).encode())["params"]  # what --apply says
    assert not Repair(apply=True).dry_run and Repair().dry_run and ListProfiles().dry_run
    with pytest.raises(FrozenInstanceError):
        EVERY_KIND[1].request.dry_run = False  # type: ignore[misc]


def _with(job: Job, where: str, value) -> bytes:
    """The job's line with the field at the dotted path `where` set to `value` (absent: removed)."""
    data = json.loads(job.encode())
    *path, last = where.split(".")
    target = data
    for key in path:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is _ABSENT:
        del target[last]
    else:
        target[last] = value
    return json.dumps(data).encode()


_ABSENT = object()
MAINTAIN, CHANGE = _job(EVERY_KIND[0]), _job(EVERY_KIND[2])


@pytest.mark.parametrize("job, where, value, says", [
    (MAINTAIN, "kind", "format_disk", "no known kind"),
    (MAINTAIN, "kind", ["maintain"], "no known kind"),
    (MAINTAIN, "params.request.tasks", ["purge", "rm_rf"], "params.request: unknown task 'rm_rf'"),
    (MAINTAIN, "params.request.tasks", "purge", "params.request.tasks: expected a list"),
    (MAINTAIN, "params.request.now", "noon", "params.request.now: expected a finite number"),
    (MAINTAIN, "params.request.dry_run", "yes", "params.request.dry_run: expected true or false"),
    (MAINTAIN, "params.request.dry_run", _ABSENT, None),  # a default: absent is fine
    (MAINTAIN, "params.request", _ABSENT, "params.request: missing"),
    (MAINTAIN, "params.request.filters.min_messages", 2.5, "filters.min_messages: expected a whole number"),
    (MAINTAIN, "params.request.filters.colour", "red", "filters: unknown field 'colour'"),
    (MAINTAIN, "params.dry_run", True, "params: unknown field 'dry_run'"),  # carried once, in the request
    (MAINTAIN, "params.summaries", 1, "params.summaries: expected true or false"),
    (CHANGE, "params.verb", "shred", "params: unknown verb 'shred'"),
    (CHANGE, "params.ids", ["a"], "params.ids: expected an object"),
    (CHANGE, "params.ids./r", "a", "params.ids['/r']: expected a list"),
    (CHANGE, "params.filters", None, None),  # no filters: named ids only
    (CHANGE, "params.filters", "all", "params.filters: expected an object"),
    (MAINTAIN, "context.verbose", True, "context.verbose: expected a whole number"),
    (MAINTAIN, "context.lock_wait", float("inf"), "context.lock_wait: expected a finite number"),
    (MAINTAIN, "context.siblings", {"/r": ["work"]}, "context.siblings['/r']: expected an object"),
    (MAINTAIN, "owner.uid", "0", "owner.uid: expected a whole number"),
    (MAINTAIN, "owner.groups", [1, "wheel"], "owner.groups[1]: expected a whole number"),
    (MAINTAIN, "profiles", {}, "profiles: expected a list"),
    (MAINTAIN, "profiles.1.home", None, "profiles[1].home: expected text"),
    (MAINTAIN, "profiles.0.layers", [], "profiles[0].layers: expected an object"),
    (MAINTAIN, "profiles.0.layers", _ABSENT, "profiles[0].layers: missing"),
    (MAINTAIN, "profiles.0.layers.entry_where", "a: profiles.x", "layers: unknown field 'entry_where'"),
    (MAINTAIN, "profiles.0.layers.entry", ["not", "a", "mapping"], "layers.entry: expected an object"),
    (MAINTAIN, "profiles.0.layers.entry", None, None),  # no entry: the layer is not there
    (MAINTAIN, "profiles.0.layers.entry.values", ["x"], "layers.entry.values: expected an object"),
    (MAINTAIN, "profiles.0.layers.entry.values", _ABSENT, "layers.entry.values: missing"),
    (MAINTAIN, "profiles.0.layers.entry.where", "a", "layers.entry: unknown field 'where'"),
    (MAINTAIN, "profiles.0.layers.entry.origin", "/etc/a.yaml: profiles.work", "layers.entry.origin: expected an object"),
    (MAINTAIN, "profiles.0.layers.entry.origin", _ABSENT, "layers.entry.origin: missing"),
    (MAINTAIN, "profiles.0.layers.entry.origin.file", None, "layers.entry.origin.file: expected text"),
    (MAINTAIN, "profiles.0.layers.entry.origin.section", 3, "layers.entry.origin.section: expected text"),
    (MAINTAIN, "profiles.0.layers.entry.origin.line", 3, "layers.entry.origin: unknown field 'line'"),
    (MAINTAIN, "profiles.0.layers.preset.origin.section", _ABSENT, None),  # a preset is a file of its own
    (MAINTAIN, "profiles.0.layers.defaults.values.retention_days", [[[[[[[[[[30]]]]]]]]]],
     "layers.defaults.values['retention_days']: nested too deep"),
    (MAINTAIN, "profiles.0.layers.defaults.values.retention_days", float("nan"),
     "layers.defaults.values['retention_days']: expected a finite number"),
    (MAINTAIN, "profiles.0.layers.hermes_python", "/v/bin/python", "layers.hermes_python: expected an object"),
    (MAINTAIN, "profiles.0.layers.hermes_python.path", 5, "layers.hermes_python.path: expected text"),
    (MAINTAIN, "profiles.0.layers.hermes_python.origin", None, "layers.hermes_python.origin: expected an object"),
    (MAINTAIN, "profiles.0.layers.hermes_python", None, None),  # none configured: the finder searches
    (MAINTAIN, "profiles.0.uid", 0, "profiles[0]: unknown field 'uid'"),
])
def test_a_bad_field_is_one_clear_error_naming_it(job, where, value, says):
    line = _with(job, where, value)
    if says is None:
        Job.decode(line)
        return
    with pytest.raises(ProtocolError) as refused:
        Job.decode(line)
    assert says in str(refused.value)


@pytest.mark.parametrize("line", [b"", b"not json", b"[]", b"{" * 5000, b'{"kind": "status"}'])
def test_a_job_that_is_not_one_is_a_protocol_error(line):
    with pytest.raises(ProtocolError):
        Job.decode(line)


def test_the_host_cannot_build_a_request_the_worker_would_refuse():
    with pytest.raises(ValueError, match="unknown task"):
        Request(("purge", "everything"), 0.0)
    with pytest.raises(ValueError, match="unknown verb"):
        Change("shred", False)


def test_a_worker_given_a_bad_job_refuses_it_in_one_line():
    read, write = os.pipe()
    bad = json.loads(_job(Status()).encode())
    bad["owner"]["uid"] = "root"
    os.write(write, json.dumps(bad).encode() + b"\n")
    os.close(write)
    try:
        done = subprocess.run(child.argv("hermes_admin.profile.worker", str(read), private=True), pass_fds=(read,),
                              capture_output=True, text=True, timeout=60)
    finally:
        os.close(read)
    assert done.returncode == 70 and not done.stdout
    assert done.stderr.strip() == "worker refuses the job: job: owner.uid: expected a whole number"


def test_a_worker_its_owner_could_trace_refuses_to_read_its_job():
    """Started without the boot line that makes it not dumpable, a worker reads nothing and says why;
    with it, the worker is not dumpable by the time its own code runs."""
    read, write = os.pipe()
    os.write(write, _job(Status()).encode())
    os.close(write)
    try:
        done = subprocess.run(child.argv("hermes_admin.profile.worker", str(read)), pass_fds=(read,),
                              capture_output=True, text=True, timeout=60)
    finally:
        os.close(read)
    assert done.returncode == 70 and not done.stdout
    assert done.stderr.strip() == "worker refuses to run: its owner could trace it (still dumpable)"
    probe = "from hermes_admin import child; print(child.dumpable())"
    private = child.argv("hermes_admin.profile.worker", private=True)
    boot = private[3].replace("from hermes_admin.profile.worker import main; sys.exit(main())", probe)
    assert subprocess.run([*private[:3], boot, private[4]], capture_output=True, text=True,
                          timeout=60).stdout.strip() == "False"




@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another account needs root")
def test_a_worker_root_starts_becomes_its_owner_before_anything_else_and_is_never_dumpable():
    """Root's boot for another account's worker (child.becoming): exec'd as root, it ends with every
    id the owner's, her groups, and not dumpable, before it imports anything of ours; its saved uid
    stayed root's until it was not dumpable (so no instant of it was hers and dumpable)."""
    nobody = 65534
    argv = child.argv("hermes_admin.profile.worker", become=(nobody, nobody, [nobody]))
    boot = argv[3]
    assert boot.index(f"os.setresuid({nobody}, {nobody}, 0)") < boot.index("prctl(4, 0, 0, 0, 0)") \
        < boot.index(f"os.setresuid({nobody}, {nobody}, {nobody})") < boot.index("import main")
    probe = boot[:boot.index("sys.path.insert")] + (
        "print(prctl(3, 0, 0, 0, 0), os.getresuid(), os.getresgid(), os.getgroups())")
    done = subprocess.run([*argv[:3], probe, *argv[4:]], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"0 {(nobody,) * 3} {(nobody,) * 3} [{nobody}]"

# -- the one host runner ----------------------------------------------------------------

def _recording(monkeypatch) -> list:
    from hermes_admin.host import runner

    calls = []

    def work(host, params, profiles, with_policy=False):
        calls.append((type(host).__name__, params, [p.name for p in profiles], with_policy))
        return Run(dry_run=params.dry_run)

    monkeypatch.setattr(runner.Host, "work", work)
    return calls


def test_the_cli_hands_its_work_to_the_host_runner(monkeypatch, tmp_path):
    from hermes_admin.cli.context import App
    from hermes_admin.host.config import AdminConfig
    from hermes_admin.synth.scenario import build_root

    calls = _recording(monkeypatch)
    build_root(tmp_path / "h", {"default": 30}, now=time.time())
    app = App(roots_given=(str(tmp_path / "h"),), _config=AdminConfig())
    app.work(Status(), app.discover(quiet=True).profiles)
    assert calls == [("Host", Status(), ["default"], False)]


def test_the_daemon_hands_its_job_to_the_same_runner(monkeypatch, tmp_path):
    from hermes_admin.host.config import AdminConfig
    from hermes_admin.host.daemon import Daemon
    from hermes_admin.synth.scenario import build_root

    calls = _recording(monkeypatch)
    build_root(tmp_path / "h", {"default": 30}, now=time.time())
    Daemon(load_config=AdminConfig, roots_given=(str(tmp_path / "h"),)).job("sweep-empty")
    ((host, params, names, with_policy),) = calls
    assert host == "Host" and names == ["default"] and with_policy
    assert params.request.tasks == ("empty_sweep",) and params.request.explicit and not params.dry_run
    assert params.command == "daemon: sweep-empty"


def test_the_daemons_job_runs_without_the_cli(tmp_path):
    """A scheduled pass, in a process of its own, does its work and never imports hermes_admin.cli."""
    from hermes_admin.synth.scenario import build_root

    build_root(tmp_path / "h", {"default": 30, "work": 30}, now=time.time())
    script = (
        "import sys\n"
        "from hermes_admin.host.config import AdminConfig\n"
        "from hermes_admin.host.daemon import Daemon\n"
        f"daemon = Daemon(load_config=AdminConfig, roots_given=({str(tmp_path / 'h')!r},))\n"
        "run = daemon.work('run', __import__('time').time(), False)\n"
        "assert run.results and not run.errors, (run.errors, run.locked)\n"
        "cli = sorted(m for m in sys.modules if m.startswith('hermes_admin.cli'))\n"
        "assert not cli, cli\n"
        "print('ok', len(run.results))\n")
    env = dict(os.environ, PYTHONPATH=child.package_parent(), HERMES_ADMIN_PROCESSES="1")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")

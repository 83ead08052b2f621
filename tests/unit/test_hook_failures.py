"""A plugin (hook) failure is one value: made where delivery meets it, carried whole across the
worker boundary and read there field by field, folded to one line per failing plugin per run, and
counted by its plugin."""

from __future__ import annotations

import json

import pytest

from hermes_admin import hook_failures as failed
from hermes_admin.hook_failures import HookFailure
from hermes_admin.protocol import ProtocolError, Reader, Writer
from hermes_admin.report import plugin_failures
from hermes_admin.results import Result, Run

HOME = "/h/w"


def result(*failures: HookFailure, profile="w", home=HOME, task="purge") -> Result:
    done = Result(profile, "delete", "prune", False, task=task, home=home)
    done.hook_failures += failures
    return done


def raised(plugin: str, what: str = "ValueError: x") -> HookFailure:
    return HookFailure(plugin, failed.RAISED, f"on_session_delete raised {what}")


def timed_out(plugin: str) -> HookFailure:
    return HookFailure(plugin, failed.TIMED_OUT, "on_session_delete timed out after 2 s; plugin process restarted")


STOPPED = HookFailure(None, failed.STOPPED, "stopped on request; 3 event(s) left in the outbox for the next run")
MANAGER = HookFailure(None, failed.NOT_LOADED, "plugins not loaded: Hermes' plugin manager failed in /opt/hermes: "
                                               "RuntimeError: boom")
OUTBOX_FULL = HookFailure(None, failed.OUTBOX, "disk full; deliveries stopped, 2 event(s) left for the next run "
                                               "(the first may repeat)")


# -- one line per failing plugin per run ------------------------------------------

@pytest.mark.parametrize("results, lines", [
    pytest.param([], [], id="none"),
    pytest.param([result(raised("a"))], ["profile 'w': plugin a: on_session_delete raised ValueError: x"],
                 id="one"),
    pytest.param([result(raised("a"), HookFailure("a", failed.RAISED, "on_session_delete raised ValueError: x",
                                                  repeats=3))],
                 ["profile 'w': plugin a: on_session_delete raised ValueError: x (and 3 more time(s) this run)"],
                 id="first and its repeats"),
    pytest.param([result(raised("a"), task="purge"),
                  result(HookFailure("a", failed.RAISED, "on_session_delete raised ValueError: x", repeats=2),
                         task="auto_archive"),
                  result(timed_out("a"), task="empty_sweep")],
                 ["profile 'w': plugin a: on_session_delete raised ValueError: x (and 3 more time(s) this run)"],
                 id="across tasks, another kind counted as one more"),
    pytest.param([result(HookFailure("a", failed.RAISED, "on_session_delete raised ValueError: x", repeats=4))],
                 ["profile 'w': plugin a: failed 4 more time(s) this run"],
                 id="repeats of a failure said before (replayed)"),
    pytest.param([result(raised("a"), timed_out("b")), result(raised("a", "KeyError: y"), task="auto_archive")],
                 ["profile 'w': plugin a: on_session_delete raised ValueError: x (and 1 more time(s) this run)",
                  "profile 'w': plugin b: on_session_delete timed out after 2 s; plugin process restarted"],
                 id="several plugins"),
    pytest.param([result(raised("a")), result(raised("a", "ValueError: y"), profile="v", home="/h/v")],
                 ["profile 'w': plugin a: on_session_delete raised ValueError: x",
                  "profile 'v': plugin a: on_session_delete raised ValueError: y"],
                 id="one plugin in two profiles"),
    pytest.param([result(raised("a"), STOPPED), result(STOPPED, task="auto_archive")],
                 ["profile 'w': stopped on request; 3 event(s) left in the outbox for the next run"
                  " (and 1 more time(s) this run)",
                  "profile 'w': plugin a: on_session_delete raised ValueError: x"],
                 id="no one plugin's failures are folded by kind, and said first"),
    pytest.param([result(MANAGER), result(HookFailure(None, failed.NOT_LOADED, MANAGER.message, repeats=2),
                                          task="auto_archive")],
                 [f"profile 'w': {MANAGER.message} (and 2 more time(s) this run)"],
                 id="Hermes' plugin manager failing at each start: one line"),
    pytest.param([result(HookFailure(None, failed.NOT_LOADED, MANAGER.message, repeats=2))],
                 ["profile 'w': failed to load 2 more time(s) this run"],
                 id="no one plugin's repeats of a failure said before"),
    pytest.param([result(MANAGER, STOPPED, OUTBOX_FULL), result(STOPPED, OUTBOX_FULL, task="auto_archive")],
                 [f"profile 'w': {MANAGER.message}",
                  "profile 'w': stopped on request; 3 event(s) left in the outbox for the next run"
                  " (and 1 more time(s) this run)",
                  f"profile 'w': {OUTBOX_FULL.message} (and 1 more time(s) this run)"],
                 id="no one plugin's: a line per kind"),
    pytest.param([result(MANAGER), result(MANAGER, profile="v", home="/h/v")],
                 [f"profile 'w': {MANAGER.message}", f"profile 'v': {MANAGER.message}"],
                 id="no one plugin's: a line per profile"),
    pytest.param([result(raised("a"), HookFailure(None, failed.NOT_LOADED, MANAGER.message, repeats=1))],
                 ["profile 'w': failed to load 1 more time(s) this run",
                  "profile 'w': plugin a: on_session_delete raised ValueError: x"],
                 id="no one plugin's repeats are said before the plugins'"),
    pytest.param([result(HookFailure("a", failed.NOT_LOADED, "failed to load in x: E"),
                         HookFailure(None, failed.NOT_LOADED, MANAGER.message))],
                 [f"profile 'w': {MANAGER.message}", "profile 'w': plugin a: failed to load in x: E"],
                 id="a plugin's and no one's failure of one kind are two lines"),
    pytest.param([result(HookFailure(failed.EVERY_PLUGIN, failed.NOT_RUN, "plugin process did not start")),
                  result(HookFailure(failed.EVERY_PLUGIN, failed.NOT_RUN, "plugin process did not start", repeats=1),
                         task="auto_archive")],
                 ["profile 'w': plugin *: plugin process did not start (and 1 more time(s) this run)"],
                 id="none ran"),
    pytest.param([result(HookFailure("a", failed.RAISED, "on_session_delete raised E: 5 more time(s)"))],
                 ["profile 'w': plugin a: on_session_delete raised E: 5 more time(s)"],
                 id="a message that looks like a count is a message"),
])
def test_plugin_failures_fold_to_one_line_per_plugin_per_run(results, lines):
    assert plugin_failures(results) == lines


def test_a_result_with_a_label_is_said_by_it():
    labelled = result(raised("a"))
    labelled.label = "/r2:w"
    assert plugin_failures([labelled]) == ["profile '/r2:w': plugin a: on_session_delete raised ValueError: x"]


@pytest.mark.parametrize("failure, line", [
    (raised("a"), "profile 'w': plugin a: on_session_delete raised ValueError: x"),
    (HookFailure("a", failed.TIMED_OUT, "whatever", repeats=2), "profile 'w': plugin a: timed out 2 more time(s)"),
    (STOPPED, "profile 'w': stopped on request; 3 event(s) left in the outbox for the next run"),
])
def test_one_line_says_a_hook_failure_as_it_always_was_said(failure, line):
    assert failure.text("w") == line


def test_the_json_report_carries_the_fields_and_the_line():
    (entry,) = result(raised("a")).as_dict()["hook_failures"]
    assert entry == {"plugin": "a", "kind": "raised", "message": "on_session_delete raised ValueError: x",
                     "repeats": 0, "text": "profile 'w': plugin a: on_session_delete raised ValueError: x"}


# -- across the worker boundary ---------------------------------------------------

def through_the_protocol(run: Run) -> Run:
    out: list[str] = []
    writer = Writer(out.append)
    writer.hello(1000, 1000, [1000])
    writer.run(run)
    reader = Reader({HOME})
    for line in out:
        reader.line(line.encode())
    assert reader.ended
    return reader.run


def test_hook_failures_cross_the_boundary_unchanged():
    sent = [raised("a"), HookFailure("a", failed.RAISED, "m", repeats=7), STOPPED,
            HookFailure(failed.EVERY_PLUGIN, failed.NOT_RUN, "plugin process did not start")]
    (got,) = through_the_protocol(Run(dry_run=False, results=[result(*sent)])).results
    assert got.hook_failures == sent


GOOD = raised("a").as_dict()


@pytest.mark.parametrize("field, value", [
    ("plugin", 5), ("plugin", ["a"]), ("kind", None), ("kind", 1), ("message", None), ("message", {}),
    ("repeats", -1), ("repeats", "2"), ("repeats", True), ("repeats", 1.5), ("repeats", None), ("repeats", 1 << 31),
    ("text", "profile 'w': plugin a: m"),  # the line is the host's to make, never read
    ("profile", "w"),
])
def test_a_hook_failure_of_another_shape_is_refused(field, value):
    with pytest.raises(ProtocolError):
        Reader({HOME}).hook_failure(dict(GOOD, **{field: value}))


def test_a_hook_failure_without_a_field_or_not_an_object_is_refused():
    reader = Reader({HOME})
    for name in GOOD:
        with pytest.raises(ProtocolError):
            reader.hook_failure({k: v for k, v in GOOD.items() if k != name})
    for bad in ("profile 'w': plugin a: m", None, [GOOD]):
        with pytest.raises(ProtocolError):
            reader.hook_failure(bad)
    assert reader.hook_failure(GOOD) == raised("a")
    assert len(reader.hook_failure(dict(GOOD, message="x" * 10_000)).message) == 4097  # cut, not refused


@pytest.mark.parametrize("value", ["profile 'w': plugin a: m", ["profile 'w': plugin a: m"], None,
                                   [dict(GOOD, repeats="x")]])
def test_a_result_whose_hook_failures_are_malformed_is_a_broken_protocol(value):
    out: list[str] = []
    writer = Writer(out.append)
    writer.hello(1000, 1000, [1000])
    writer.run(Run(dry_run=False, results=[result(raised("a"))]))
    header = json.loads(out[1])
    header["v"]["hook_failures"] = value
    reader = Reader({HOME})
    reader.line(out[0].encode())
    with pytest.raises(ProtocolError):
        reader.line(json.dumps(header).encode())


# -- counted by plugin ------------------------------------------------------------

def test_metrics_count_failures_by_their_plugin():
    from tests.unit.test_ops import parse_textfile

    from hermes_admin.host import metrics

    run = Run(dry_run=False, results=[
        result(raised("a"), timed_out("b"), STOPPED,
               HookFailure(None, failed.OUTBOX, "disk full; deliveries stopped")),
        result(HookFailure("a", failed.RAISED, "m", repeats=4), task="auto_archive"),
        result(HookFailure(failed.EVERY_PLUGIN, failed.NOT_RUN, "plugin process did not start"),
               profile="v", home="/h/v"),
    ])
    found = {k: v for k, v in parse_textfile(metrics.render(run, [], finished=1.0)).items()
             if k.startswith("hermes_admin_plugin_failures_total")}
    assert found == {
        f'hermes_admin_plugin_failures_total{{profile="w",home="{HOME}",plugin="a"}}': 5,
        f'hermes_admin_plugin_failures_total{{profile="w",home="{HOME}",plugin="b"}}': 1,
        'hermes_admin_plugin_failures_total{profile="v",home="/h/v",plugin="*"}': 1,
    }


# -- end to end -------------------------------------------------------------------

def test_a_plugin_that_fails_to_load_is_named_by_the_worker_not_read_from_its_line(tmp_path, now, invoke):
    from tests.unit.test_faults import ended_session_with_plugin

    root = ended_session_with_plugin(tmp_path, now, "broken", "raise ImportError('no_such_module_anywhere')\n")
    result = invoke("--root", str(root), "sessions", "delete", "a", "--yes", "--json")
    assert result.exit_code == 1, result.stderr  # done, with the plugin's failure as a warning
    note, failure = json.loads(result.stdout)["results"][0]["hook_failures"]
    assert note["plugin"] is None and note["kind"] == failed.INTERPRETER  # no Hermes here: our interpreter, said
    assert failure["plugin"] == "broken" and failure["kind"] == failed.NOT_LOADED and failure["repeats"] == 0
    assert failure["text"].startswith("profile 'default': plugin broken: failed to load in ")
    assert "ImportError: no_such_module_anywhere" in failure["message"]
    said = [line for line in result.stderr.splitlines() if "plugin broken" in line]
    assert len(said) == 1 and failure["text"] in said[0], result.stderr


# -- what an earlier run left, replayed ------------------------------------------

@pytest.mark.parametrize("results, replayed, carried", [
    pytest.param([], [], [], id="nothing replayed, no work"),
    pytest.param([result(raised("b"))], [], [[raised("b")]], id="nothing replayed"),
    pytest.param([result(raised("b")), result(task="auto_archive")], [raised("a"), STOPPED],
                 [[raised("a"), STOPPED, raised("b")], []], id="on the first result, first"),
    pytest.param([], [raised("a")], [[raised("a")]], id="a command that only replays: a result of its own"),
])
def test_replayed_failures_ride_the_profiles_results(results, replayed, carried):
    from hermes_admin.profile.actions.common import with_replayed
    from hermes_admin.model import Profile
    from pathlib import Path

    got = with_replayed(results, Profile(Path("/h"), "w", Path(HOME)), replayed)
    assert [r.hook_failures for r in got] == carried
    if not results and replayed:
        assert got[0].action == "replay" and got[0].profile == "w"
        assert plugin_failures(got) == ["profile 'w': plugin a: on_session_delete raised ValueError: x"]

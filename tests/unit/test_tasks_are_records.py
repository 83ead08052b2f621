"""A task is one record (model.TASKS, with its rule and action in profile/actions/maintenance.TASKS): every
map of the tasks is derived from the records, so adding a task is adding its record and its tasks/ module
(README: "Adding a task"). These tests fail where a record and the rest disagree."""

from __future__ import annotations

from dataclasses import fields

import click

from hermes_admin import model, report
from hermes_admin.model import Reason, TaskName
from hermes_admin.profile.policy import BUILTINS, Policy

# A task the project does not have, as a newcomer would add it: trimming old tool output, switched by
# an existing key for the test's sake, configured by a key Hermes main reads (a real one adds its keys to
# policy.BUILTINS: test_every_switch_and_hermes_key_of_a_record_is_a_policy_key).
STAND_IN = TaskName("trim_tool_output", Reason.PRUNE, "trim-tool-output", "vacuum_after_prune",
                    ("tool_payload_retention_days",))


def _policy(**values) -> Policy:
    return Policy(**{f.name: BUILTINS[f.name] for f in fields(Policy) if f.name in BUILTINS} | values)


def test_every_switch_and_hermes_key_of_a_record_is_a_policy_key_read_as_the_policy_holds_it():
    policy = _policy()
    for task in model.TASKS:
        assert task.switch is None or task.switch in BUILTINS, task.name
        assert set(task.hermes_keys) <= set(BUILTINS), task.name
        if task.switch is not None:
            assert policy.switch(task.switch) == policy.as_dict()[task.switch], task.name


def test_every_hermes_key_of_a_record_is_one_hermes_knows():
    from hermes_admin.profile.hermes_config import KNOWN_SESSIONS_KEYS

    assert set(model.HERMES_SESSIONS_KEYS) <= KNOWN_SESSIONS_KEYS


def test_every_records_command_is_a_command_of_the_cli_and_every_task_command_a_record():
    from hermes_admin.cli.main import COMMANDS, cli

    ctx = click.Context(cli)
    for task in model.TASKS:
        if task.command:
            assert task.command in COMMANDS and cli.get_command(ctx, task.command).name == task.command, task.name
    maintaining = {name for name, (module, _, _) in COMMANDS.items() if module == "maintain_cmd"}
    assert maintaining == {task.command for task in model.TASKS if task.command} | {"run"}


def test_every_record_of_the_pass_is_a_record_of_model_in_its_order():
    """model.TASKS is `run`'s order (repair first, its own step); the pass's task records follow it."""
    from hermes_admin.profile.actions import maintenance

    assert [task.name for task in maintenance.TASKS] == [t for t in model.TASKS if t is not model.REPAIR]
    assert len({task.name.name for task in maintenance.TASKS}) == len(maintenance.TASKS)


def test_the_maps_every_layer_reads_are_the_records_own():
    from hermes_admin import protocol
    from hermes_admin.host import daemon
    from hermes_admin.profile import installation, policy

    assert protocol.ORDER is model.ORDER == tuple(task.name for task in model.TASKS)
    assert report.COMMAND_OF is model.COMMAND_OF
    assert daemon.TASKS == {"run": model.ORDER, **{t.command: (t.name,) for t in model.TASKS if t.command}}
    assert policy.HERMES_SESSIONS_KEYS is installation.HERMES_SESSIONS_KEYS is model.HERMES_SESSIONS_KEYS


def test_a_new_record_is_picked_up_by_every_derived_map():
    tasks = (*model.TASKS, STAND_IN)
    assert model.order(tasks) == (*model.ORDER, "trim_tool_output")
    assert model.by_command(tasks)["trim-tool-output"] is STAND_IN
    assert model.command_of(tasks) == {**model.COMMAND_OF, "trim_tool_output": "trim-tool-output"}
    assert model.hermes_keys(tasks) == (*model.HERMES_SESSIONS_KEYS, "tool_payload_retention_days")


def test_a_new_records_switch_is_read_with_nothing_written_in_the_policy():
    """Policy.switch reads any key of the policy: no map of the task switches to keep up."""
    from hermes_admin.profile.actions.maintenance import Task, _Pass
    from hermes_admin.profile.tasks import retention

    task = Task(STAND_IN, retention.rule, "delete", _Pass.in_parts)
    assert task.off(_policy(vacuum_after_prune=True)) is None
    assert task.off(_policy(vacuum_after_prune=False)) == "vacuum_after_prune is off in this profile's policy"
    always = Task(TaskName("always", None), retention.rule, "delete", _Pass.in_parts)
    assert always.off(_policy()) is None


def test_the_report_names_a_task_by_its_records_command(monkeypatch):
    from hermes_admin.results import Result

    result = Result("default", "delete", Reason.PRUNE, False, task="trim_tool_output")
    monkeypatch.setattr(report, "COMMAND_OF", model.command_of((*model.TASKS, STAND_IN)))
    assert report.summary_line(result, False).startswith("default: trim-tool-output: 0 unit(s)")

"""`hermes-admin compact`: one profile's free pages back to the file system, through its engine
(engine/space.py says how), with what it gave back as the report's row (`run.data["compacted"]`)."""

from __future__ import annotations

from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile
from hermes_admin.problems import WARNING, about
from hermes_admin.profile.actions.common import profile_policy, with_engine
from hermes_admin.profile.engine import Engine, fold
from hermes_admin.profile.environment import Environment
from hermes_admin.results import Action, Result, Run, Status


def compact(run: Run, profile: Profile, layers: PolicyLayers, env: Environment, force: bool) -> None:
    """Compact one profile's store; a store seen held (without `force`) is a warning naming who."""
    if not profile.has_store():
        run.results.append(Result(profile.name, Action.COMPACT, None, run.dry_run, status=Status.SKIPPED,
                                  why="no store yet: nothing to do", home=str(profile.home)))
        return
    policy = profile_policy(profile, layers, env.installations)
    incremental = policy.incremental_vacuum if policy is not None else False  # unreadable: no switch
    rows: list[dict] = []

    def work(engine: Engine) -> list[Result]:
        unread = ["the profile's policy cannot be read (see `config check`): the store is not switched to "
                  "incremental reclaim"] if policy is None else []
        result = Result(profile.name, Action.COMPACT, None, run.dry_run, task="compact", notes=unread)
        _, row = fold(result, lambda: engine.compact(force))  # what it did, vacuumed or not, into `result`
        rows.append(row)
        return [result]

    with_engine(run, profile, env, work, incremental=incremental)
    for row in rows:
        run.data.setdefault("compacted", []).append(dict(row, profile=profile.name, home=str(profile.home)))
        if row["refused"]:
            run.add(about(profile, WARNING, "store_held", f"not compacted: the store is {row['refused']}"
                          + ("" if force else "; `compact --force` runs its VACUUM all the same"),
                          path=profile.store_path))

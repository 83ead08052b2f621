from pathlib import Path

import pytest

from hermes_admin.layers import Layer, Origin, PolicyLayers
from hermes_admin.host.config import AdminConfig, ConfigError, load_preset, policy_layers
from hermes_admin.profile import policy as profile_policy
from hermes_admin.profile.hermes_config import HermesConfig
from hermes_admin.profile.policy import BUILTINS, PolicyError


def effective(name, admin, own):
    """The host's layers of the admin config under the profile's own config, as a worker stacks them."""
    return profile_policy.effective(name, policy_layers(admin, name), own)


def hermes(sessions=None):
    return HermesConfig(Path("/p/config.yaml"), {"sessions": sessions} if sessions is not None else {})


def test_builtins_are_hermes_own():
    policy = effective("p", AdminConfig(), hermes())
    assert (policy.auto_prune, policy.retention_days, policy.auto_archive, policy.auto_archive_days) == (False, 90, False, 3)


def test_precedence_first_match_wins_per_key():
    admin = AdminConfig(path=Path("/etc/a.yaml"), defaults={"retention_days": 60, "auto_archive_days": 20},
                        profiles={"p": {"retention_days": 10, "preset": "lean"}})
    own = hermes({"retention_days": 45, "auto_prune": True, "auto_archive_days": 9, "auto_archive": False})
    policy = effective("p", admin, own)
    assert policy.retention_days == 10  # admin entry beats everything
    assert policy.auto_archive_days == 7 and policy.auto_archive is True  # the entry's preset beats the profile
    assert policy.auto_prune is True
    other = effective("q", admin, own)
    assert other.retention_days == 45  # the profile's own config beats admin defaults
    assert effective("q", admin, hermes()).retention_days == 60  # then the admin defaults
    assert effective("q", admin, hermes()).auto_archive_days == 20


@pytest.mark.parametrize("name", ["standard", "conservative", "lean", "archive-only"])
def test_presets_load_and_only_use_known_keys(name):
    data, path = load_preset(name)
    assert set(data) <= set(BUILTINS) and path.read_text().startswith("#")  # each documented in a comment


@pytest.mark.parametrize("admin, own, message", [
    (AdminConfig(profiles={"p": {"retention_dayz": 3}}), hermes(), "unknown key"),
    (AdminConfig(profiles={"p": {"preset": "nope"}}), hermes(), "preset 'nope' not found"),
    (AdminConfig(defaults={"auto_prune": "yes"}), hermes(), "must be true or false"),
    (AdminConfig(), hermes({"retention_days": "ninety"}), "must be a number"),
    (AdminConfig(), hermes({"retention_days": 0}), "retention_days: 0 is under its minimum, 1d"),
    (AdminConfig(), hermes({"retention_days": -5}), "retention_days: -5 is under its minimum, 1d"),
])
def test_bad_policies_are_refused_with_the_file_named(admin, own, message):
    with pytest.raises((PolicyError, ConfigError), match=message):
        effective("p", admin, own)


def test_no_force_passes_a_config_value_under_its_minimum():
    """A config is read unattended: only an option's own value may be forced (durations.RULES)."""
    with pytest.raises(PolicyError, match="under its minimum"):
        effective("p", AdminConfig(defaults={"export_keep_days": "1m"}), hermes())


def test_policy_describes_itself():
    text = effective("p", AdminConfig(profiles={"p": {"preset": "standard"}}), hermes()).describe()
    assert "inactive over 90 days" in text and "idle over 30 days" in text
    one = effective("p", AdminConfig(defaults={"auto_archive": True, "auto_archive_days": 1,
                                               "export_keep_days": 1}), hermes()).describe()
    assert "idle over 1 day;" in one and "exports kept 1 day" in one and "1 days" not in one


# -- durations in the admin config; every layer checked; where each value came from ----------

def test_admin_layers_take_durations_and_hermes_layer_plain_numbers():
    from hermes_admin.profile.policy import with_origins

    layers = PolicyLayers(entry=Layer({"auto_archive_days": "1w2d"}, Origin("/etc/a.yaml", "profiles.work")),
                          defaults=Layer({"retention_days": "3mo", "empty_min_age_hours": "1d"},
                                         Origin("/etc/a.yaml", "defaults")))
    policy, origins = with_origins("work", layers, hermes({}))
    assert policy.retention_days == 90 and policy.auto_archive_days == 9 and policy.empty_min_age_hours == 24
    assert origins["retention_days"] == "/etc/a.yaml: defaults.retention_days"
    assert origins["auto_archive_days"] == "/etc/a.yaml: profiles.work.auto_archive_days"
    assert origins["auto_prune"] == "built-in"
    with pytest.raises(PolicyError, match="Hermes reads this key too"):
        with_origins("work", PolicyLayers(), hermes({"retention_days": "120d"}))


def test_a_losing_layer_is_checked_too():
    from hermes_admin.profile.policy import with_origins

    layers = PolicyLayers(entry=Layer({"retention_days": 30}, Origin("a", "profiles.work")),
                          defaults=Layer({"retention_days": "120 parsecs"}, Origin("a", "defaults")))
    with pytest.raises(PolicyError, match="a: defaults: retention_days: '120 parsecs' is not a duration"):
        with_origins("work", layers, hermes({}))


def test_a_task_the_policy_leaves_off_says_why_in_one_clause():
    """The report wraps the reason in `skipped (...)`: a reason with parentheses of its own nested them."""
    from hermes_admin.profile.actions.maintenance import TASKS

    for task in TASKS:
        assert "(" not in (task.off_why or ""), task.name

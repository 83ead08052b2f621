"""One duration and time syntax: the parser, the click type, and the options and config that use it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from hermes_admin import durations

DAY = 86400


@pytest.mark.parametrize("text, days", [
    ("90", 90), (90, 90), ("90d", 90), ("12h", 0.5), ("1w2d", 9), ("1w 2d", 9), ("3mo", 90), ("1y", 365),
    ("1.5d", 1.5), ("2 days", 2), ("30m", 30 / 1440), ("1d12h", 1.5), ("3MO", 90),
])
def test_durations(text, days):
    assert durations.seconds(text) / 86400 == pytest.approx(days)


@pytest.mark.parametrize("text", ["", "d", "x", "1w2x", "1d x", "-1", "1..5d", True, None, "90 d days"])
def test_garbage_is_refused_with_the_syntax(text):
    with pytest.raises(durations.DurationError, match="90d, 12h, 1w2d, 3mo"):
        durations.seconds(text)


def test_a_bare_number_is_in_the_unit_of_what_it_sets():
    assert durations.seconds("2", "h") == 2 * 3600 and durations.seconds("1d", "h") == 24 * 3600


def test_times_are_local_unless_they_name_a_zone():
    now = 2_000_000_000.0
    assert durations.when("3mo", now) == now - 90 * DAY
    assert durations.when("2027-01-15T08:00:00Z", now) == datetime(2027, 1, 15, 8, tzinfo=timezone.utc).timestamp()
    assert durations.when("2027-01-15T08:00", now) == datetime(2027, 1, 15, 8).astimezone().timestamp()
    with pytest.raises(durations.DurationError, match="nor an ISO time"):
        durations.when("last tuesday", now)


@pytest.mark.parametrize("args", [
    ["purge", "--older-than", "90d"], ["purge", "--older-than", "1w2d", "--force"], ["purge", "--before", "3mo"],
    ["purge", "--before", "1w2d", "--older-than", "12h", "--force"], ["archive-inactive", "--days", "1mo"],
    ["sessions", "delete", "--after", "2026-01-01", "--before", "1y"],
])
def test_the_options_take_the_syntax(synth_root, invoke, args):
    root, _ = synth_root
    result = invoke("--root", str(root), *args, "--dry-run", "--json")
    assert result.exit_code in (0, 1), result.stderr
    json.loads(result.stdout)


def test_a_bad_duration_is_a_usage_error_naming_the_syntax(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "purge", "--older-than", "90x", "--dry-run")
    assert result.exit_code == 2 and "90d, 12h, 1w2d, 3mo" in result.stderr  # 64 through the console script


def test_older_than_is_what_the_dry_run_says(synth_root, invoke):
    root, _ = synth_root
    result = invoke("--root", str(root), "purge", "--older-than", "10mo", "--dry-run", "-p", "work")
    assert "inactive over 300 days" in result.stdout and "set in --older-than: retention_days 300d" in result.stdout


def test_config_durations_and_a_losing_layer(synth_root, invoke, tmp_path):
    root, _ = synth_root
    config = tmp_path / "admin.yaml"
    config.write_text("defaults: {retention_days: 4mo, auto_prune: true}\n")
    result = invoke("--root", str(root), "--config", str(config), "run", "--dry-run", "--json", "-p", "work")
    policy = next(iter(json.loads(result.stdout)["policies"].values()))
    assert policy["origins"]["auto_prune"].endswith("defaults.auto_prune")
    config.write_text("defaults: {retention_days: 120 parsecs}\nprofiles: {work: {retention_days: 30}}\n")
    result = invoke("--root", str(root), "--config", str(config), "run", "--dry-run", "-p", "work")
    assert result.exit_code == 78 and "defaults: retention_days: '120 parsecs' is not a duration" in result.stderr


def test_a_minimum_of_0_is_said_once_with_what_0_means():
    from hermes_admin.durations import DurationError, read

    with pytest.raises(DurationError) as caught:
        read("quick_check_hours", -5)
    assert str(caught.value) == "-5 is under its minimum, 0 (every run)"
    with pytest.raises(DurationError) as caught:
        read("empty_min_age_hours", -1)
    assert str(caught.value) == "-1 is under its minimum, 0"


def test_exports_prune_says_what_0_means_for_it_not_for_the_config_key(tmp_path, invoke):
    (tmp_path / "h").mkdir()
    result = invoke("--root", str(tmp_path / "h"), "exports", "prune", "--older-than", "1m", "--dry-run")
    assert result.exit_code == 2  # click's usage error in-process (the console script says 64)
    assert "1m is under its minimum, 1d, or 0 (every export, with --force)" in result.stderr
    assert "export only units deleted in several steps" not in result.stderr

import sqlite3

import pytest

from hermes_admin.model import Profile
from hermes_admin.profile.store import Store
from hermes_admin.profile.store.read import load_sessions, profile_counts, session_ids
from hermes_admin.synth.builder import DAY, SynthStore
from hermes_admin.synth.scenario import build_profile_home
from tests.conftest import counts


@pytest.mark.parametrize("version", [22, 30])
def test_counts_match_sql(tmp_path, now, version):
    build_profile_home(tmp_path, version, "p", now)
    profile = Profile(tmp_path, "p", tmp_path)
    with Store.open(profile) as store:
        got = profile_counts(store)
    expected = counts(profile.store_path)
    assert (got.sessions, got.messages, got.archived, got.live) == (
        expected["sessions"], expected["messages"], expected["archived"], expected["live"])
    conn = sqlite3.connect(profile.store_path)
    empty = conn.execute("SELECT COUNT(*) FROM sessions s WHERE ended_at IS NOT NULL AND NOT EXISTS "
                         "(SELECT 1 FROM messages m WHERE m.session_id = s.id)").fetchone()[0]
    assert got.empty == empty == 3  # empty ended, TUI ghost, just-ended empty (empty open is live)
    conn.close()


@pytest.mark.parametrize("version", [22, 30])
def test_last_activity_rules(tmp_path, now, version):
    kinds = build_profile_home(tmp_path, version, "p", now)
    with Store.open(Profile(tmp_path, "p", tmp_path)) as store:
        rows = {r.id: r for r in load_sessions(store)}
    revived = rows[kinds["revived"][0]]
    assert revived.started_at < now - 150 * DAY
    assert revived.last_activity > now - 2 * DAY  # newest message wins over started_at
    empty = rows[kinds["empty_ended"][0]]
    assert empty.last_activity == empty.started_at and empty.message_rows == 0
    if version == 30:
        beat = rows[kinds["heartbeat_recent"][0]]
        assert beat.last_activity == pytest.approx(now - 3 * DAY)  # last_activity_at counts
        assert rows[kinds["pinned_old"][0]].pinned
    child = rows[kinds["delegate_child"][0]]
    assert child.delegate_from == kinds["delegate_parent"][0]


def test_malformed_model_config_does_not_break_reads(tmp_path, now):
    store = SynthStore(tmp_path / "state.db", version=30)
    store.session("a", started=now)
    store.conn.execute("UPDATE sessions SET model_config = '{not json' WHERE id = 'a'")
    store.close()
    with Store.open(Profile(tmp_path, "p", tmp_path)) as opened:
        (row,) = load_sessions(opened)
    assert row.delegate_from is None


def test_find_by_prefix_is_literal(tmp_path, now):
    store = SynthStore(tmp_path / "state.db", version=22)
    for sid in ("abc_1", "abc_2", "abd", "a*c"):
        store.session(sid, started=now)
    store.close()
    with Store.open(Profile(tmp_path, "p", tmp_path)) as opened:
        ids = list(session_ids(opened))
    assert sorted(ids) == ["a*c", "abc_1", "abc_2", "abd"]
    from hermes_admin.cli.mutate import matches_of

    profile = Profile(tmp_path, "p", tmp_path)
    found = matches_of(["abc_1", "abc", "a*", "zzz"], [profile], [{"home": str(tmp_path), "ids": ids}])
    assert [sid for _, sid in found["abc_1"]] == ["abc_1"]
    assert sorted(sid for _, sid in found["abc"]) == ["abc_1", "abc_2"]
    assert [sid for _, sid in found["a*"]] == ["a*c"]  # glob characters are literal
    assert found["zzz"] == []

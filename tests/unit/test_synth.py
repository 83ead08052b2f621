"""The synthetic stores behave like Hermes' where maintenance cares."""

import sqlite3

import pytest

from hermes_admin.synth.builder import SynthStore
from hermes_admin.synth.scenario import build_profile_home
from tests.conftest import fts_problems, store_health


@pytest.mark.parametrize("version", [22, 30])
def test_scenario_store_is_healthy_but_has_orphan_rows(tmp_path, now, version):
    kinds = build_profile_home(tmp_path, version, "p", now)
    assert store_health(tmp_path / "state.db", foreign_keys=False) == []
    conn = sqlite3.connect(tmp_path / "state.db")
    orphans = {row[0] for row in conn.execute("PRAGMA foreign_key_check")}
    assert orphans == {"messages", "session_model_usage"}
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert set(kinds) >= {"old_ended", "lineage", "delegate_child", "tui_ghost", "orphan_rows"}


def test_v30_trigram_index_needs_the_session_row_when_messages_go(tmp_path, now):
    """Deleting sessions before messages leaves the trigram index stale, as in Hermes v30."""
    path = tmp_path / "state.db"
    store = SynthStore(path, version=30)
    store.session("s", started=now)
    store.messages("s", 3, now)
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("DELETE FROM sessions WHERE id='s'")
    conn.execute("DELETE FROM messages WHERE session_id='s'")
    conn.close()
    assert any("messages_fts_trigram" in p for p in fts_problems(path))


@pytest.mark.parametrize("version", [22, 30])
def test_right_order_keeps_indexes_consistent(tmp_path, now, version):
    path = tmp_path / "state.db"
    store = SynthStore(path, version=version)
    store.session("s", started=now)
    store.messages("s", 3, now)
    store.tool_message("s", now, "x" * 9000)
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("DELETE FROM messages WHERE session_id='s'")
    conn.execute("DELETE FROM sessions WHERE id='s'")
    conn.close()
    assert fts_problems(path) == []

"""Issue: operations. The daemon maintains a root the real Hermes 0.19.0 wrote."""

from __future__ import annotations

import signal

from tests.conftest import store_health
from tests.helpers import row_ids
from tests.unit.test_ops import parse_textfile, start_daemon, wait_for


def test_daemon_on_a_real_root(hermes_peer, tmp_path, now):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, ["default", "alpha"], now)
    metrics = tmp_path / "hermes.prom"
    config = tmp_path / "admin.yaml"
    config.write_text(f"schedule:\n  run: {{every_seconds: 2}}\nmetrics_file: {metrics}\n"
                      "defaults: {auto_prune: true, retention_days: 90}\n")
    proc = start_daemon(root, config)
    try:
        old = set(kinds["alpha"]["old_ended"])
        db = root / "profiles" / "alpha" / "state.db"
        assert wait_for(lambda: not row_ids(db) & old, 60), "the old sessions were not purged within 60 s"
        read: list[dict] = []

        def a_whole_run_wrote_them() -> bool:  # read before the stop: a run it cuts short writes what it reached
            read.append(parse_textfile(metrics.read_text()) if metrics.exists() else {})
            return any(k.startswith('hermes_admin_sessions{profile="alpha"') for k in read[-1]) \
                and any(k.startswith("hermes_admin_deleted_sessions_total{") for k in read[-1])

        assert wait_for(a_whole_run_wrote_them, 60), read[-1]
        samples = read[-1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # stopped, not left running (a hang guard, not a measure)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any(k.startswith('hermes_admin_sessions{profile="alpha"') for k in samples)
    alpha = root / "profiles" / "alpha"
    assert any(k == f'hermes_admin_deleted_sessions_total{{profile="alpha",home="{alpha}",reason="prune"}}' for k in samples)
    assert samples["hermes_admin_last_run_timestamp_seconds"] > now
    assert store_health(db) == []
    assert hermes_peer.hermes(root / "profiles" / "alpha", "sessions", "list").returncode == 0

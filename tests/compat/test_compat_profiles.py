"""Issue: foundation. On a root the real Hermes wrote, `profiles` and `sessions` read right and change nothing."""

import json

from tests.conftest import counts, store_digest, store_health


def test_profiles_on_a_real_root(hermes_peer, tmp_path, now, invoke):
    root = tmp_path / "hermes"
    kinds = hermes_peer.build_root(root, ["default", "alpha", "beta"], now)
    garbage = root / "profiles" / "broken"
    garbage.mkdir(parents=True)
    (garbage / "state.db").write_bytes(b"definitely not sqlite" * 100)
    before = store_digest(root)

    result = invoke("--root", str(root), "profiles", "--json")
    assert result.exit_code == 2
    rows = {r["name"]: r for r in json.loads(result.stdout)["profiles"]}
    assert set(rows) == {"default", "alpha", "beta", "broken"}
    for name in ("default", "alpha", "beta"):
        r = rows[name]
        assert r["ok"] is True, r["error"]
        assert {k: r[k] for k in ("sessions", "messages", "archived", "live")} == counts(root / r["store"])
        assert r["schema_version"] == 22
    assert rows["broken"]["ok"] is False
    assert str(garbage / "state.db") in rows["broken"]["error"]

    # The other read commands, on the same root.
    alpha = kinds["alpha"]
    listed = invoke("--root", str(root), "sessions", "list", "-p", "alpha", "--json")
    assert {s["id"] for s in json.loads(listed.stdout)["sessions"]} >= set(alpha["recent"])
    shown = json.loads(invoke("--root", str(root), "sessions", "show", alpha["lineage"][1], "--json").stdout)
    assert shown["session"]["lineage"] == alpha["lineage"]
    assert store_digest(root) == before  # no store was modified

    # Hermes itself still reads every store, and SQLite finds nothing wrong.
    for name in ("default", "alpha", "beta"):
        home = root if name == "default" else root / "profiles" / name
        for args in (("sessions", "list"), ("sessions", "stats")):
            done = hermes_peer.hermes(home, *args)
            assert done.returncode == 0, done.stderr
        # Hermes' stats leave archived and child rows out of their total, so
        # only check that Hermes reads the store, not its arithmetic.
        assert "Total sessions:" in hermes_peer.hermes(home, "sessions", "stats").stdout
        assert store_health(home / "state.db", foreign_keys=False) == []

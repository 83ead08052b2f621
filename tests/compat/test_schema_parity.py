"""Our synthetic v22 store has the shape the real Hermes 0.19.0 writes."""

import sqlite3

from hermes_admin.synth.builder import SynthStore


def shape(db):
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    objects = conn.execute("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%'").fetchall()
    tables = {n for t, n, _ in objects if t == "table"}
    columns = {t: {r[1] for r in conn.execute(f"PRAGMA table_info('{t}')")} for t in tables}
    fks = {t: sorted((r[2], r[3], r[4], r[6]) for r in conn.execute(f"PRAGMA foreign_key_list('{t}')")) for t in tables}
    out = {
        "tables": tables,
        "columns": columns,
        "foreign_keys": fks,
        "triggers": {(n, tbl) for t, n, tbl in objects if t == "trigger"},
        "indexes": {(n, tbl) for t, n, tbl in objects if t == "index"},
        "version": conn.execute("SELECT version FROM schema_version").fetchone()[0],
    }
    conn.close()
    return out


def test_synthetic_v22_matches_real_hermes(hermes_peer, tmp_path, now):
    hermes_peer.build_root(tmp_path / "real", ["default"], now)
    SynthStore(tmp_path / "synth.db", version=22).close()
    real, synth = shape(tmp_path / "real" / "state.db"), shape(tmp_path / "synth.db")
    assert synth["version"] == real["version"] == 22
    assert synth["tables"] == real["tables"]
    for table in real["tables"]:
        assert synth["columns"][table] == real["columns"][table], table
    assert synth["foreign_keys"] == real["foreign_keys"]
    assert synth["triggers"] == real["triggers"]
    assert synth["indexes"] == real["indexes"]


def test_real_store_is_read_like_the_synthetic_one(hermes_peer, tmp_path, now):
    """The rows hermes-admin reads from a real store look like those of our own stores."""
    from hermes_admin.model import Profile
    from hermes_admin.profile.store import Store
    from hermes_admin.profile.store.read import load_sessions

    kinds = hermes_peer.build_root(tmp_path, ["default"], now)["default"]
    with Store.open(Profile(tmp_path, "default", tmp_path)) as store:
        rows = {r.id: r for r in load_sessions(store)}
    assert {c for c in kinds["delegate_child"]} <= set(rows)
    assert all(rows[c].delegate_from == kinds["delegate_parent"][0] for c in kinds["delegate_child"])
    revived = rows[kinds["revived"][0]]
    assert revived.last_activity > now - 2 * 86400 > revived.started_at
    assert rows[kinds["old_archived"][0]].archived
    assert rows[kinds["lineage"][0]].end_reason == "compression"

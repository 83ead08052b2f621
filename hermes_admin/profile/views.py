"""Read-only views of profiles and sessions, for `profiles` and `sessions list|show`."""

from __future__ import annotations

import os

from hermes_admin import problems
from hermes_admin.layers import PolicyLayers
from hermes_admin.model import Profile
from hermes_admin.profile.installation import Installations
from hermes_admin.profile.parts import graph_around
from hermes_admin.profile.store import Store, StoreError
from hermes_admin.profile.store.damage import damage_error, is_damage
from hermes_admin.profile.store.errors import SQLITE_ERRORS
from hermes_admin.profile.store.files import FileIndex
from hermes_admin.profile.store.read import SessionRow, journal_mode, profile_counts
from hermes_admin.profile.usage import reclaim_state, reclaim_waits_for
from hermes_admin.report import iso


def _size(path) -> int | None:
    try:
        return os.stat(path).st_size  # stat, never open: SQLite's locks stay intact
    except OSError:
        return None


def profile_summary(profile: Profile, policy: dict | None = None, lock_wait_s: float | None = None) -> dict:
    """One row of `profiles`: health and counts (with `policy`, the effective one, how many open
    rows the stale-row rule would close now: `stale_open`). Never raises for a bad store.
    `lock_wait_s`: the job's --lock-wait, for a store another process holds."""
    row = {
        "name": profile.name, "home": str(profile.home), "store": None, "ok": True, "error": None,
        "schema_version": None, "journal_mode": None, "sessions": None, "messages": None,
        "archived": None, "live": None, "empty": None, "store_bytes": None, "wal_bytes": None,
        "last_activity": None, "auto_vacuum": None, "reclaimable_bytes": None, "reclaim_waits_for": None,
    }
    if not profile.has_store():
        return row
    row["store"] = str(profile.store_path)
    row["store_bytes"] = _size(profile.store_path)
    row["wal_bytes"] = _size(f"{profile.store_path}-wal") or 0
    try:
        with Store.open(profile, lock_wait_s=lock_wait_s) as store:
            counts = profile_counts(store)
            row.update(
                schema_version=store.schema.version, journal_mode=journal_mode(store),
                sessions=counts.sessions, messages=counts.messages, archived=counts.archived,
                live=counts.live, empty=counts.empty, last_activity=iso(counts.last_activity),
            )
            mode, counted = reclaim_state(store.db)
            row.update(auto_vacuum=mode, reclaimable_bytes=counted.free_bytes,
                       reclaim_waits_for=reclaim_waits_for(mode, counted, None))
            if policy is not None:
                row["stale_open"] = _stale_open(store, policy)
    except StoreError as exc:
        row.update(ok=False, error=str(exc))
    except SQLITE_ERRORS as exc:
        if not is_damage(exc):
            raise
        row.update(ok=False, error=str(damage_error(profile, " ".join(str(exc).split()))))
    if row["ok"]:  # what the last check (`run`, `repair`) found in this very file, when its reads did not meet it
        from hermes_admin.profile import integrity

        known = integrity.damage_known(profile)
        if known:
            row.update(ok=False, error=problems.about(profile, problems.ERROR, "damaged_store", f"{known} (found by the "
                                                        "last check)", path=profile.store_path).text())
    return row


def profile_settings(profile: Profile, layers: PolicyLayers, installations: Installations) -> dict:
    """The Hermes installation serving the profile (found by the job's `installations`), and its
    effective policy with where each value came from (`hermes`, `policy`), or why it has none
    (`policy_error`)."""
    from hermes_admin.profile import installation
    from hermes_admin.profile.hermes_config import HermesConfigError
    from hermes_admin.profile.hermes_config import load as load_hermes_config
    from hermes_admin.profile.policy import PolicyError, effective

    lookup = installations.for_profile(profile)
    row = {"hermes": lookup.as_dict(), "policy": None, "policy_error": None}
    try:
        config = load_hermes_config(profile.home, installation.sessions_keys(lookup), installations.managed_for(profile))
        policy = effective(profile.shown, layers, config, installed=installation.defaults_layer(lookup))
    except (HermesConfigError, PolicyError) as exc:
        row["policy_error"] = str(exc)
        return row
    row["policy"] = policy.as_dict()
    row["policy"]["hook_callback_timeout"], row["policy"]["origins"]["hook_callback_timeout"] = \
        installation.hook_timeout(config, lookup)
    return row


def sqlite_of(profile: Profile, journal: str | None, installations: Installations) -> tuple[dict, problems.Problem | None]:
    """The SQLite we run on and the one the profile's Hermes runs on; a warning when Hermes' has the
    WAL-reset bug while the store is in WAL (in a rollback journal the bug cannot strike: 0.20+
    keeps new stores so on such a library, as `hermes doctor` says)."""
    from hermes_admin.profile.store.keep_wal import has_wal_reset_bug, library_version

    found = installations.for_profile(profile).installation
    theirs = found.sqlite if found is not None else None
    bug = theirs is not None and has_wal_reset_bug(theirs)
    about = {"ours": library_version(), "hermes": theirs, "hermes_wal_reset_bug": bug if theirs else None}
    warning = None
    if bug and journal == "wal":
        warning = problems.about(
            profile, problems.WARNING, "sqlite_wal_reset_bug",
            f"Hermes at {found.python} runs on SQLite {theirs}, which carries the WAL-reset bug (fixed in 3.51.3), "
            "and this store is in WAL: a checkpoint racing a commit can corrupt it; upgrade that SQLite (Hermes' "
            "installer: `hermes update`)", path=profile.store_path)
    return about, warning


def _stale_open(store: Store, policy: dict) -> int:
    """How many open rows the stale-row rule (tasks/stale.py) would close now, by `policy`'s windows."""
    import time

    from hermes_admin.profile.store import sql
    from hermes_admin.profile.lineage import Graph
    from hermes_admin.profile.store.read import open_sessions
    from hermes_admin.profile.tasks import stale
    from hermes_admin.profile.tasks.retention import Windows

    windows = Windows(policy["retention_days"] or 0, dict(policy.get("source_retention_days") or {}),
                      policy.get("stale_grace_days"))
    now = time.time()
    live = set(sql.live_ids(store.db, store.schema, now))
    return len(stale.select(Graph(open_sessions(store)), windows, now, live).units)


def session_brief(profile: Profile, row: SessionRow) -> dict:
    return {
        "profile": profile.name, "home": str(profile.home), "id": row.id, "source": row.source, "title": row.title,
        "started_at": iso(row.started_at), "ended_at": iso(row.ended_at), "end_reason": row.end_reason,
        "last_activity": iso(row.last_activity), "messages": row.message_rows,
        "archived": row.archived, "pinned": row.pinned, "open": row.is_open,
    }


def session_detail(profile: Profile, session_id: str, lock_wait_s: float | None = None) -> dict:
    """Everything `sessions show` tells about one session (`lock_wait_s`: the job's --lock-wait)."""
    with Store.open(profile, lock_wait_s=lock_wait_s) as store:
        graph = graph_around(store, [session_id])  # its lineage, children, delegates: not the whole store
    row = graph.rows[session_id]
    files = FileIndex.scan(profile.sessions_dir).files_of(session_id)
    detail = session_brief(profile, row)
    detail.update(
        home=str(profile.home), model=row.model, session_key=row.session_key,
        profile_name=row.profile_name, parent_id=row.parent_id,
        delegate_of=row.delegate_from,
        lineage=graph.lineage(session_id),
        compression_parent=graph.compression_parent(session_id),
        compression_children=graph.compression_children(session_id),
        other_children=graph.other_children(session_id),
        delegates=graph.delegates_of(session_id),
        files=[{"path": str(f.path), "bytes": f.size, "symlink": f.is_symlink} for f in files],
    )
    return detail

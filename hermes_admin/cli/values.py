"""A policy value as people read it, the one way `config show` and a dry run's `set:` lines say it."""

from __future__ import annotations

from pathlib import Path

from hermes_admin import durations


def shown_value(key: str, value, home: str) -> str:
    """One effective value as the config would say it: durations as durations (`7d`, `5m`), and
    what an unset value means rather than a dash."""
    if key == "export_dir" and value is None:
        return str(Path(home) / ".hermes-admin" / "exports")
    if key == "source_retention_days":
        return ", ".join(f"{s} {durations.shown_in('retention_days', d)}" for s, d in sorted(value.items())) \
            if value else "none (retention_days for every source)"
    if key == "stale_grace_days" and value is None:
        return "the row's whole window"
    if key == "max_store_mb" and value is None:
        return "none"
    if key == "hook_callback_timeout":
        return durations.shown(value)
    if key in durations.RULES:
        return durations.shown_in(key, float("inf") if value is None else value)  # JSON's null: no end
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)

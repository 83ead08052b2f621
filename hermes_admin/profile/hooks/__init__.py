"""Plugins and the `on_session_delete` hook bus (docs/design.md §7)."""

"""Plugins and the `on_session_delete` hook bus (design §7)."""

"""DDL for synthetic Hermes stores, schema v22 (PyPI release) and v30 (upstream).

Written here from the documented column sets, tables, indexes and trigger
behaviour; checked against stores the real Hermes writes by the compat tests
(same tables, same columns, same trigger names). What matters for
maintenance is reproduced faithfully:

- v22 keeps contentful FTS5 tables updated by rowid triggers;
- v30 uses external-content FTS5 tables over views, and its trigram view
  joins `sessions`, so a message's index entry can only be removed while its
  session row still exists (the reason messages go before sessions);
- foreign keys: messages -> sessions (no action), usage -> sessions (cascade),
  sessions.parent_session_id -> sessions (no action).
"""

from __future__ import annotations

# -- sessions ---------------------------------------------------------------

# The sessions columns of schema v22 (the PyPI release).
_SESSIONS_V22 = [
    ("id", "TEXT PRIMARY KEY"), ("source", "TEXT NOT NULL"), ("user_id", "TEXT"),
    ("session_key", "TEXT"), ("chat_id", "TEXT"), ("chat_type", "TEXT"), ("thread_id", "TEXT"),
    ("display_name", "TEXT"), ("origin_json", "TEXT"), ("expiry_finalized", "INTEGER DEFAULT 0"),
    ("model", "TEXT"), ("model_config", "TEXT"), ("system_prompt", "TEXT"),
    ("parent_session_id", "TEXT"), ("started_at", "REAL NOT NULL"), ("ended_at", "REAL"),
    ("end_reason", "TEXT"), ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"), ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"), ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"), ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("cwd", "TEXT"), ("git_branch", "TEXT"), ("git_repo_root", "TEXT"),
    ("billing_provider", "TEXT"), ("billing_base_url", "TEXT"), ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"), ("actual_cost_usd", "REAL"), ("cost_status", "TEXT"),
    ("cost_source", "TEXT"), ("pricing_version", "TEXT"), ("title", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"), ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"), ("compression_failure_error", "TEXT"),
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"), ("profile_name", "TEXT"),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0"), ("archived", "INTEGER NOT NULL DEFAULT 0"),
]

# The columns v30 adds to sessions.
_SESSIONS_V30_EXTRA = [
    ("created_source", "TEXT"), ("system_prompt_hash", "TEXT"),
    ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0"), ("title_source", "TEXT"),
    ("last_activity_at", "REAL"), ("last_activity_description", "TEXT"),
    ("last_activity_provenance", "TEXT"), ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_recovery_deadline", "REAL"), ("transport_profile", "TEXT"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"), ("hidden", "INTEGER NOT NULL DEFAULT 0"),
    ("last_read_at", "REAL"), ("tool_names", "TEXT"),
]

# -- messages ---------------------------------------------------------------

# The messages columns of v22.
_MESSAGES_V22 = [
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)"), ("role", "TEXT NOT NULL"),
    ("content", "TEXT"), ("tool_call_id", "TEXT"), ("tool_calls", "TEXT"), ("tool_name", "TEXT"),
    ("effect_disposition", "TEXT"), ("timestamp", "REAL NOT NULL"), ("token_count", "INTEGER"),
    ("finish_reason", "TEXT"), ("reasoning", "TEXT"), ("reasoning_content", "TEXT"),
    ("reasoning_details", "TEXT"), ("codex_reasoning_items", "TEXT"),
    ("codex_message_items", "TEXT"), ("platform_message_id", "TEXT"),
    ("observed", "INTEGER DEFAULT 0"), ("active", "INTEGER NOT NULL DEFAULT 1"),
    ("compacted", "INTEGER NOT NULL DEFAULT 0"), ("api_content", "TEXT"),
]

# The columns v30 adds to messages.
_MESSAGES_V30_EXTRA = [
    ("_compressed_summary", "INTEGER NOT NULL DEFAULT 0"), ("display_kind", "TEXT"),
    ("display_metadata", "TEXT"), ("display_identity", "BLOB"), ("display_order", "INTEGER"),
]

# -- other tables (name -> body) ------------------------------------------------

# Per-session model usage, in both versions.
_USAGE = """
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '', task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT, cost_source TEXT, first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
"""

# The other tables both versions have.
_COMMON_TABLES = {
    "schema_version": "version INTEGER NOT NULL",
    "session_model_usage": _USAGE,
    "state_meta": "key TEXT PRIMARY KEY, value TEXT",
    "gateway_routing": "scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL, "
                       "entry_json TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key)",
    "compression_locks": "session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
                         "acquired_at REAL NOT NULL, expires_at REAL NOT NULL",
    "async_delegations": "delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL, "
                         "origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT, "
                         "state TEXT NOT NULL, dispatched_at REAL NOT NULL, completed_at REAL, "
                         "updated_at REAL NOT NULL, event_json TEXT, result_json TEXT, "
                         "delivery_state TEXT NOT NULL DEFAULT 'pending', "
                         "delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, "
                         "owner_pid INTEGER, owner_started_at INTEGER, task_json TEXT, "
                         "delivery_claim TEXT, delivery_claimed_at REAL",
}

# Tables only v30 has (system prompts, turn leases, gateway state).
_V30_TABLES = {
    "system_prompts": "hash TEXT PRIMARY KEY, prompt TEXT NOT NULL",
    "session_turn_leases": "conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL, "
                           "acquired_at REAL NOT NULL, expires_at REAL NOT NULL",
    "gateway_hygiene_state": "session_key TEXT PRIMARY KEY, failure_streak INTEGER NOT NULL DEFAULT 0",
    "conversation_generations": "source TEXT NOT NULL, session_key TEXT NOT NULL, "
                                "generation INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (source, session_key)",
    "gateway_heartbeats": "backend_id TEXT PRIMARY KEY, pid INTEGER, started_at REAL, "
                          "last_heartbeat REAL, profile TEXT, host TEXT",
}

# Indexes both versions have.
_INDEXES_COMMON = [
    ("idx_sessions_source", "sessions(source)"),
    ("idx_sessions_source_id", "sessions(source, id)"),
    ("idx_sessions_parent", "sessions(parent_session_id)"),
    ("idx_sessions_started", "sessions(started_at DESC)"),
    ("idx_messages_session", "messages(session_id, timestamp)"),
    ("idx_compression_locks_expires", "compression_locks(expires_at)"),
    ("idx_session_model_usage_session", "session_model_usage(session_id)"),
    ("idx_session_model_usage_model", "session_model_usage(model)"),
    ("idx_async_delegations_delivery", "async_delegations(delivery_state, completed_at)"),
    ("idx_messages_session_active", "messages(session_id, active, timestamp)"),
    ("idx_sessions_session_key", "sessions(session_key, started_at DESC)"),
    ("idx_sessions_handoff_state", "sessions(handoff_state, started_at)"),
    ("idx_sessions_gateway_peer", "sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)"),
    ("idx_messages_platform_msg_id",
     "messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL"),
    ("idx_messages_active_null", "messages(active) WHERE active IS NULL"),
]

# Indexes only v30 has.
_INDEXES_V30 = [
    ("idx_messages_session_id", "messages(session_id, id)"),
    ("idx_session_turn_leases_expires", "session_turn_leases(expires_at)"),
    ("idx_sessions_system_prompt_hash", "sessions(system_prompt_hash)"),
    ("idx_sessions_effective_activity",
     "sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC)"),
]

# -- full-text search -------------------------------------------------------

# v22: contentful FTS5 tables; a message's text is copied in and removed by rowid.
_FTS_TEXT = "COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || COALESCE({r}.tool_calls, '')"


def _fts_v22(table: str, tokenize: str | None) -> list[str]:
    opts = f", tokenize='{tokenize}'" if tokenize else ""
    new = _FTS_TEXT.format(r="new")
    return [
        f"CREATE VIRTUAL TABLE {table} USING fts5(content{opts})",
        f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN "
        f"INSERT INTO {table}(rowid, content) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN "
        f"DELETE FROM {table} WHERE rowid = old.id; END",
        f"CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN "
        f"DELETE FROM {table} WHERE rowid = old.id; "
        f"INSERT INTO {table}(rowid, content) VALUES (new.id, {new}); END",
    ]


# v30: external content. Tool output is indexed truncated; the trigram index
# leaves out tool rows, cron/subagent sessions and delegate transcripts, which
# it can only decide by looking at the session row.
_TOOL_TEXT = "CASE WHEN {r}.role = 'tool' THEN substr({r}.content, 1, 8192) ELSE {r}.content END"
# v30's trigram index takes the messages of sessions this holds for: not cron, subagent or a delegate's.
_TRIGRAM_KEEP = (
    "s.source NOT IN ('cron', 'subagent') AND "
    "(s.model_config IS NULL OR NOT json_valid(s.model_config) "
    "OR json_extract(s.model_config, '$._delegate_from') IS NULL)"
)


def _fts_v30() -> list[str]:
    base_old = _TOOL_TEXT.format(r="old")
    trigram_row = f"{{r}}.role <> 'tool' AND EXISTS (SELECT 1 FROM sessions s WHERE s.id = {{r}}.session_id AND {_TRIGRAM_KEEP})"
    return [
        "CREATE VIEW messages_fts_src AS SELECT m.id AS id, "
        f"{_TOOL_TEXT.format(r='m')} AS content, m.tool_name AS tool_name, m.tool_calls AS tool_calls "
        "FROM messages m",
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, "
        "content='messages_fts_src', content_rowid='id')",
        "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN "
        "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
        f"VALUES (new.id, {_TOOL_TEXT.format(r='new')}, new.tool_name, new.tool_calls); END",
        "CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN "
        "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
        f"VALUES ('delete', old.id, {base_old}, old.tool_name, old.tool_calls); END",
        "CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls, role ON messages BEGIN "
        "INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls) "
        f"VALUES ('delete', old.id, {base_old}, old.tool_name, old.tool_calls); "
        "INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
        f"VALUES (new.id, {_TOOL_TEXT.format(r='new')}, new.tool_name, new.tool_calls); END",
        "CREATE VIEW messages_fts_trigram_src AS SELECT m.id AS id, m.content AS content "
        f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.role <> 'tool' AND {_TRIGRAM_KEEP}",
        "CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(content, "
        "content='messages_fts_trigram_src', content_rowid='id', tokenize='trigram')",
        "CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages "
        f"WHEN {trigram_row.format(r='new')} BEGIN "
        "INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content); END",
        "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages "
        f"WHEN {trigram_row.format(r='old')} BEGIN "
        "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) "
        "VALUES ('delete', old.id, old.content); END",
        "CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE OF content, role ON messages BEGIN "
        "INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content) "
        f"SELECT 'delete', old.id, old.content WHERE {trigram_row.format(r='old')}; "
        "INSERT INTO messages_fts_trigram(rowid, content) "
        f"SELECT new.id, new.content WHERE {trigram_row.format(r='new')}; END",
    ]


def _table(name: str, columns: list[tuple[str, str]], extra: str = "") -> str:
    body = ", ".join(f"{col} {decl}" for col, decl in columns)
    return f"CREATE TABLE {name} ({body}{', ' + extra if extra else ''})"


def ddl(version: int) -> list[str]:
    """Statements that create an empty store of `version` (22 or 30)."""
    if version not in (22, 30):
        raise ValueError(f"synthetic stores exist for schema 22 and 30, not {version}")
    v30 = version == 30
    sessions = _SESSIONS_V22 + (_SESSIONS_V30_EXTRA if v30 else [])
    session_fks = "FOREIGN KEY (parent_session_id) REFERENCES sessions(id)"
    if v30:
        session_fks += ", FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)"
    statements = [_table("sessions", sessions, session_fks)]
    statements.append(_table("messages", _MESSAGES_V22 + (_MESSAGES_V30_EXTRA if v30 else [])))
    tables = dict(_COMMON_TABLES, **(_V30_TABLES if v30 else {}))
    statements += [f"CREATE TABLE {name} ({body})" for name, body in tables.items()]
    indexes = _INDEXES_COMMON + (_INDEXES_V30 if v30 else [])
    statements += [f"CREATE INDEX {name} ON {target}" for name, target in indexes]
    statements.append("CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions(title) WHERE title IS NOT NULL")
    if v30:
        statements += _fts_v30()
    else:
        statements += _fts_v22("messages_fts", None) + _fts_v22("messages_fts_trigram", "trigram")
    statements.append(f"INSERT INTO schema_version(version) VALUES ({version})")
    if v30:
        statements.append("INSERT INTO state_meta(key, value) VALUES ('fts_storage_version', '3')")
    return statements

"""Every command a user can run, in a form that works on the synthetic scenario (SESSION: an id in it)."""

COMMANDS = [
    ["profiles"], ["sessions", "list"], ["sessions", "show", "SESSION"],
    ["sessions", "delete", "SESSION", "--yes"], ["sessions", "archive", "SESSION", "--yes"],
    ["sessions", "unarchive", "SESSION", "--yes"],
    ["purge", "--older-than", "90", "--yes"], ["sweep-empty", "--yes"], ["prune-ghosts", "--yes"],
    ["archive-inactive", "--days", "30", "--yes"], ["repair"], ["repair", "--apply", "--yes"],
    ["run", "--yes"], ["run", "--dry-run"], ["plugins", "list"], ["exports", "list"], ["status"],
    ["config", "check"], ["config", "show", "--origin"], ["exports", "prune", "--older-than", "30d", "--yes"],
    ["compact", "--yes"], ["compact", "--dry-run"],
]
READ_ONLY = [["profiles"], ["sessions", "list"], ["sessions", "show", "SESSION"], ["repair"], ["run", "--dry-run"],
             ["plugins", "list"], ["exports", "list"], ["status"], ["config", "check"], ["config", "show", "--origin"], ["compact", "--dry-run"]]

"""`hermes-admin --help` on a terminal of 80 columns or more, for cli/entry.py. Written by
cli/main.py:write_help_text(); do not edit."""

TEXT = """\
Usage: hermes-admin [OPTIONS] COMMAND [ARGS]...

  Maintenance for Hermes Agent installations: every profile of every root.

Options:
  --root PATH           A Hermes root (repeatable). Default: $HERMES_HOME's
                        root, else ~/.hermes.
  --config FILE         Admin config (default: $HERMES_ADMIN_CONFIG, the
                        user/site config dir, /etc/hermes-admin).
  --all-users           Also every local user's default root.
  -v, --verbose         More detail on stderr.
  -q, --quiet           Only what changed, warnings and errors (for timers).
  --plain               Tables as tab-separated lines, no box drawing (as when
                        piped).
  --lock-wait DURATION  How long a write waits for a store another process
                        holds without progress (default: the policy's
                        lock_wait, 300; a bare number is seconds: 30, 5s, 2m),
                        then exit 3 naming it.
  --version             Show the version and exit.
  -h, --help            Show this message and exit.

Commands:
  profiles          List every profile with its health and counts.
  sessions          Look at, delete or archive sessions.
  purge             Delete ended, unpinned sessions past retention, whole
                    lineages at a time (reason `prune`).
  sweep-empty       Delete ended sessions that never got a message (reason
                    `empty_sweep`).
  prune-ghosts      Delete TUI ghosts and rows or files whose session is gone
                    (reason `ghost_prune`).
  archive-inactive  Archive idle lineages, open ones included; pinned never
                    (silent: no event).
  run               One pass of every task the policy enables: what the timer
                    calls.
  repair            Find broken profiles: folders, permissions, dangling
                    parents, labels, rows in the wrong store.
  restore           Put the units of an export back; a session id that exists
                    is left alone and reported.
  exports           The exports every delete writes first (restorable with
                    `restore FILE`).
  plugins           Hermes plugins that receive `on_session_delete`.
  status            The last run per profile and the next scheduled one;
                    changes nothing.
  usage             Where each profile's bytes are: tables, FTS indexes, free
                    pages, WAL, files.
  compact           Give each store's free pages back to the file system.
  config            Check the admin config, presets and profiles' config.yaml;
                    show effective values.
  daemon            Run the maintenance tasks on the admin config's
                    `schedule:` until stopped.
  systemd           systemd units for hermes-admin.
  demo              Build a throwaway Hermes root with several profiles and
                    run on it.

  Global options may come after the command too: hermes-admin run -q --root
  PATH.
"""

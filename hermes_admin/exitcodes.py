"""Exit codes shared by every command (docs/design.md §11)."""

OK = 0
WARNINGS = 1  # done, but a plugin failed or items were skipped; or a confirmation was answered "no"
PROFILE_FAILED = 2  # a profile or store could not be processed; the others were
LOCKED = 3  # another hermes-admin run holds the lock
USAGE = 64  # sysexits' EX_USAGE: the command line is wrong
INTERNAL = 70  # sysexits' EX_SOFTWARE: a bug of ours
CONFIG = 78  # sysexits' EX_CONFIG: the admin config (or a preset it names) cannot be used; nothing was done
INTERRUPTED = 130

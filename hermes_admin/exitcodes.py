"""Exit codes shared by every command (docs/design.md §11)."""

OK = 0  # done
WARNINGS = 1  # done, but a plugin failed or items were skipped; or a confirmation was answered "no"
PROFILE_FAILED = 2  # a profile or store could not be processed; the others were
LOCKED = 3  # a lock is held: a root or profile by another run or by Hermes, or a store past lock_wait
USAGE = 64  # sysexits' EX_USAGE: the command line is wrong
INTERNAL = 70  # sysexits' EX_SOFTWARE: a bug of ours
CONFIG = 78  # sysexits' EX_CONFIG: the admin config (or a preset it names) cannot be used; nothing was done
INTERRUPTED = 130  # 128 + SIGINT, as shells report it; also for SIGTERM

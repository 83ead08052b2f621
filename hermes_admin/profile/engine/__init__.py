"""The deletion engine and what it stands on: transactions, pacing, durability, files, outbox, locks.

Its front door: code outside this folder imports these names from `hermes_admin.profile.engine`,
never one of its modules (tests/unit/test_rooms.py keeps it so). What is not the engine's
own lives beside it: the export files (`profile/exports.py`), the state folder and its locks
(`profile/state_folder.py`).
"""

from hermes_admin.profile.engine.deletes import Recheck
from hermes_admin.profile.engine.engine import FTS_TABLES, Engine, Progress
from hermes_admin.profile.engine.outcomes import Closed, Interrupted, Opened, fold
from hermes_admin.profile.engine.export_ahead import REST_WAITS, STOPPED
from hermes_admin.profile.engine.noticed import last_look_ids
from hermes_admin.profile.engine.outbox import has_work, noticed as noticed_sessions
from hermes_admin.profile.engine.restore import row_weight
from hermes_admin.profile.engine.space import SWITCH_MIN_BYTES, held_by, rewrite_unasked, held_by_path, hint as holder_hint

__all__ = [
    "Engine", "Opened", "Closed", "Interrupted", "fold", "Progress", "Recheck", "STOPPED", "REST_WAITS", "FTS_TABLES",
    "last_look_ids", "noticed_sessions", "has_work",
    "row_weight", "SWITCH_MIN_BYTES", "rewrite_unasked", "held_by", "held_by_path", "holder_hint",
]

"""Hermes' own retention prune on a store (run inside the peer's venv).

Usage: python hermes_prune.py HOME  -> prints {"deleted": N, "seconds": S}
"""

import json
import sys
import time
from pathlib import Path

from hermes_state import SessionDB


def main() -> None:
    home = Path(sys.argv[1])
    db = SessionDB(home / "state.db")
    started = time.monotonic()
    deleted = db.prune_sessions(older_than_days=90, sessions_dir=home / "sessions")
    seconds = time.monotonic() - started
    db.close()
    print(json.dumps({"deleted": deleted, "seconds": round(seconds, 3)}))


if __name__ == "__main__":
    main()

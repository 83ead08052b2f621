"""A live Hermes holder of a store (run inside the peer's venv): the real SessionDB, kept open.

Usage: python peer_holder.py HOME [drop-db|drop-all|keep]

It opens HOME/state.db with Hermes' own SessionDB, opens a session and appends one message,
then loses its POSIX locks the way upstream Hermes did: an `open()`/`close()` of the database
file in the same process drops every lock the process held on it (`drop-db`); `drop-all` does the
same to the `-shm` file too. It prints `ready SESSION_ID`, then reads commands on stdin:

    append TEXT   append one message; prints `ok ROWID` or `error MESSAGE`
    hold SECONDS  take the write lock on Hermes' own connection (as its FTS optimize does, inside an
                  append), print `holding`, keep it SECONDS, then commit and print `released`
    quit          close and exit
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def drop_locks(path: Path) -> None:
    """Any close() of any descriptor of a file drops every POSIX lock this process holds on it."""
    os.close(os.open(path, os.O_RDONLY))


def main() -> None:
    from hermes_state import SessionDB

    home, mode = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "drop-db")
    db = SessionDB(home / "state.db")
    sid = db.create_session("holder_0000_live", source="telegram")
    db.append_message(sid, role="user", content="held message 0")
    if mode in ("drop-db", "drop-all"):
        drop_locks(home / "state.db")
    if mode == "drop-all":
        drop_locks(home / "state.db-shm")
    print("ready", sid, flush=True)
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "append":
            try:
                print("ok", db.append_message(sid, role="user", content=arg), flush=True)
            except Exception as exc:  # the test reads it: a lost or refused write
                print("error", repr(exc).replace("\n", " "), flush=True)
        elif command == "hold":
            import time

            conn = db._conn
            conn.execute("BEGIN IMMEDIATE")
            print("holding", flush=True)
            time.sleep(float(arg))
            conn.execute("COMMIT")
            print("released", flush=True)
        elif command == "quit":
            break
    db.close()


if __name__ == "__main__":
    main()

"""Taking turns with Hermes' writers between the engine's transactions.

A Hermes writer that finds the write lock taken sleeps in SQLite's busy
handler, which polls at growing intervals (1, 2, 5, 10, 15, 20, 25 ms, then
50 ms after 128 ms of waiting and 100 ms after 228 ms). Back-to-back
transactions of ours would starve it until its busy timeout. So after each commit the lock is left free long enough for a
waiting writer's next poll: one polling interval of a writer that has waited
as long as we held the lock.

Whether someone else writes at all is seen in `PRAGMA data_version`, which
changes when another connection commits, and in which processes hold the store
open (holders.py, looked at every HELD_EVERY_S). A writer seen in the last
second gets short transactions and a turn after each. A Hermes that only has
the store open may write at any moment: the transactions are the idle ones, and
still each is followed by a writer's poll interval (a writer that came while we
thought nobody would waited for its poll to fall in a token pause). With neither, the pause is a
token one. Once the other writer has had its turn (the version moved during
the pause), the pause ends early. With neither ever since we began (`alone`),
the pacer takes its longest transactions (pacer.py). In a WAL store every other connection is
seen by its lock on the shared memory (holders.WalPeers), asked before each of our transactions:
while alone there, no pause at all (one that waits on us is seen before our next transaction, and
then gets its turn).
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Executor, Future, wait
from pathlib import Path
from typing import Callable, NamedTuple

from hermes_admin.holders import WalPeers, held_by_its_owner, held_by_nobody_else
from hermes_admin.profile.engine import faults
from hermes_admin.profile.store import pragmas

MIN_S = 0.002  # the lock stays free at least this long after each of our commits
# SQLite's busy handler (sqliteDefaultBusyCallback): after waiting this long, it sleeps this long.
POLLS = ((0.001, 0.001), (0.003, 0.002), (0.008, 0.005), (0.018, 0.010), (0.033, 0.015), (0.053, 0.020),
         (0.128, 0.025), (0.228, 0.050))
MAX_S = 0.100  # its interval once it has waited longer
ACTIVE_S = 1.0  # another connection committed this recently: it may be waiting now
HELD_EVERY_S = 5.0  # how often the processes holding the store open are looked at
# While we are alone (`alone`), a Hermes that starts meanwhile meets our longest transactions, and
# only a pause that happens to meet its poll lets it in until it is seen: looked for ten times as
# often then, or as often as keeps the looks to LOOK_SHARE of the time where one costs more (a few
# ms on a host of 120 processes), never less often than HELD_EVERY_S: a look too dear for that
# ends being alone (we cannot watch closely enough).
ALONE_HELD_EVERY_S = 0.5
LOOK_SHARE = 0.02
# A look not back this long after it began counts as one that failed (held), as a look too dear
# to take every HELD_EVERY_S ends being alone: one starved of the GIL for a second or two by the
# export thread's Python (each of its system calls takes the GIL back) is still back within it.
LATE_S = HELD_EVERY_S
# FTS5 merge steps (most take a few ms) may follow one another without a turn in between for this
# long: each turn costs about one of the writer's appends. The turn is owed once they stop.
CHAIN_S = 0.006
POLL_S = 0.0005  # how often a pause looks whether the waiting writer has committed (~20 us a look)
SLACK_S = 0.001  # a pause outlasts the writer's polling interval by this much: its sleep runs late


def poll_interval(waited_s: float) -> float:
    """How long a writer that has waited `waited_s` sleeps before it tries the lock again."""
    return next((interval for until, interval in POLLS if waited_s < until), MAX_S)


class Turns:
    """`held`: does another process hold the store open (None: nobody is asked)? `free`: is it known
    that nobody else does (the stricter look `alone` needs; None: `held`'s answer is taken)?
    `peers`: does another connection hold the store, asked before every transaction while alone
    (a WAL store: holders.WalPeers; None: not known that cheaply). `looks`: where the looks at the
    holders run while alone (of_store: a thread of their own each; by default, and always once
    anybody is seen, on the caller's thread)."""

    def __init__(self, db, clock=time.monotonic, sleep=time.sleep, held: Callable[[], bool] | None = None,
                 free: Callable[[], bool] | None = None, peers: Callable[[], bool] | None = None,
                 looks: Executor | None = None):
        self.db, self.clock, self.sleep, self._held = db, clock, sleep, held
        self._free, self._peers = free, peers
        self._looks = looks or _HERE
        self._looking: Future | None = None  # a look under way: its answer is taken once it is done
        self._answered = False  # the first look's answer taken (it is waited for)
        self._held_at, self._held_now = float("-inf"), False  # when it was last asked, and its answer
        self._looked_at = float("inf")  # when the look under way began, in real time (LATE_S)
        self._version = self._data_version()
        self._other_at = float("-inf")  # when another connection was last seen committing
        self.paused_s = 0.0
        self._chain_began: float | None = None  # when the merge steps since our last turn began
        self._chain_ended = float("-inf")  # when the last of them committed
        self._others_seen = False  # another writer or holder, at any time since we began
        self._look_s = 0.0  # the CPU time the last look at the holders took (whatever `clock`)

    @classmethod
    def of_store(cls, db, path, wal: bool) -> "Turns":
        """Turns beside the processes that hold the store at `path` (holders.py); `wal`: its journal.
        The shared memory asked is the one SQLite opened: beside the store as the connection names it
        (a link resolved, as SQLite resolves it)."""
        named = getattr(db.connection(), "filename", "") or os.path.realpath(path)
        peers = WalPeers(Path(f"{named}-shm")).taken if wal else None
        return cls(db, held=lambda: held_by_its_owner(path), free=lambda: held_by_nobody_else(path, wal),
                   peers=peers, looks=_Aside())

    def _data_version(self) -> int:
        faults.point("data_version")
        return pragmas.data_version(self.db)

    def _other_committed(self) -> bool:
        version = self._data_version()
        if version == self._version:
            return False
        self._version = version
        self._other_at = self.clock()
        self._others_seen = True
        return True

    def busy(self) -> None:
        """Our transaction found the lock taken: another writer is at work (a Hermes append, or
        its own FTS optimize, which commits nothing for seconds), and may come back at once."""
        self._other_at = self.clock()
        self._others_seen = True

    @property
    def others_writing(self) -> bool:
        """Has another writer been seen within the last ACTIVE_S: a commit of another connection
        (as last looked), or the lock found taken (`busy`)? Then our transactions are short."""
        return self.clock() - self._other_at < ACTIVE_S

    @property
    def others_may_write(self) -> bool:
        """That, or another process holds the store open (a Hermes that may write at any moment).
        Either way the lock is left free after each commit for a waiting writer's next poll."""
        if self.others_writing or self._peers_now():
            return True
        self._look()
        return self._held_now

    def _peers_now(self) -> bool:
        """Does another connection hold the store, by `peers` (False where it is not asked)? Seen,
        it ends being alone. A `peers` that fails (SQLite's descriptor not found) is not asked
        again: the looks and the token pauses go on as where nobody can be asked that way."""
        if self._peers is None:
            return False
        try:
            taken = bool(self._peers())
        except Exception:
            self._peers, taken = None, False
        self._others_seen = self._others_seen or taken
        return taken

    def _look(self) -> None:
        """The processes holding the store looked at again, if it is time: every HELD_EVERY_S once
        anybody was seen; while alone more often, and `free` first (the stricter look): a store
        not known to be free, or a look too dear to take that often, ends being alone.

        While alone a look runs on `looks`' thread, its answer taken at the first call after it ended:
        it is hundreds of system calls, each giving the GIL away, and beside the export thread's
        Python each took it back only after a switch interval (a 4 ms look took 25 ms of the
        engine's thread). The first answer is waited for (LATE_S at most): the first transaction
        is sized by it. One not back within LATE_S counts as a look that failed (held) until it
        is: we cannot watch closely enough (a starved thread, a file system that does not answer)."""
        now = self.clock()
        self._answer_if_back(late=time.monotonic() - self._looked_at > LATE_S)  # real time: a test's clock is not
        alone = not self._others_seen
        every = min(HELD_EVERY_S, max(ALONE_HELD_EVERY_S, self._look_s / LOOK_SHARE)) if alone else HELD_EVERY_S
        if self._held is None or self._looking is not None or now - self._held_at < every:
            return
        self._held_at, self._looked_at = now, time.monotonic()
        # Aside only while alone, where the looks come twice a second; once anybody is seen, in
        # place every HELD_EVERY_S, as before: no thread of Python is added beside the export's
        # while a writer waits on us (in a rollback journal our commits wait for its reads).
        self._looking = (self._looks if alone else _HERE).submit(self._looked, alone)
        first = not self._answered
        if first:
            wait((self._looking,), timeout=LATE_S)
        self._answer_if_back(late=first)

    def _looked(self, alone: bool) -> "_Looked":
        """One look (on `looks`' thread): its cost is the CPU time it took, not the GIL's waits."""
        began = time.thread_time()
        free = _answer(self._free, failed=False) if alone and self._free is not None else None
        held = False if free else _answer(self._held, failed=True)  # a look that fails: as if it were held
        return _Looked(free, held, time.thread_time() - began)

    def _answer_if_back(self, late: bool) -> None:
        """The answer of the look under way taken if it is back; if not and it is `late`, as if it
        had failed (held) until it is."""
        if self._looking is None:
            return
        if not self._looking.done():
            if late:
                self._others_seen = self._held_now = True
            return
        free, held, self._look_s = self._looking.result()
        self._looking, self._answered, self._held_now = None, True, held
        if held or free is False or self._look_s > LOOK_SHARE * HELD_EVERY_S:
            self._others_seen = True

    @property
    def alone(self) -> bool:
        """Alone since we began: no commit of another connection, the lock never found taken, and
        at every look nobody else holding the store open, as far as can be known (looked at now if
        it is time: call it outside the write lock)? Once that ends, never again in this run: a
        Hermes that cannot be looked into (another pid namespace, another user's process in a
        rollback journal) counts as holding it, and a gateway that appends every few seconds
        must meet the careful transactions between its appends too. With `peers`, another connection
        is seen before our next transaction: one that waits on the lock now waits for the one under
        way and its own next poll (a Hermes whose SQLite lost its locks holds none: the looks see it)."""
        if not self._others_seen and not self._peers_now():
            self._look()
        return not self._others_seen

    @property
    def nobody_seen(self) -> bool:
        """`alone` as last looked, without a look (inside a transaction: a busy retry ends it)."""
        return not self._others_seen

    def after_step(self, committed_at: float, held_s: float) -> None:
        """After an FTS5 merge step: another may follow at once while the steps since the last
        turn began less than CHAIN_S ago (while another writer is seen); else the turn for all of them."""
        self._other_committed()
        began = committed_at - held_s
        if self._chain_began is None or began - self._chain_ended > CHAIN_S:
            self._chain_began = began  # a new chain (the lock was free a while: none to carry on)
        if self.others_writing and committed_at - self._chain_began < CHAIN_S:
            self._chain_ended = committed_at
            return
        chain_began, self._chain_began = self._chain_began, None
        self._turn(committed_at, committed_at - chain_began)

    def end_chain(self) -> None:
        """The merge steps stopped: the turn they put off is taken now, before anything else."""
        if self._chain_began is not None:
            chain_began, self._chain_began = self._chain_began, None
            self._turn(self._chain_ended, self._chain_ended - chain_began)

    def after_commit(self, committed_at: float, held_s: float) -> None:
        """Leave the write lock free after a commit at `committed_at` that held it `held_s`.

        Lock-free work done since the commit (files, outbox) counts toward the pause.
        """
        self._turn(committed_at, held_s)

    def _turn(self, committed_at: float, held_s: float) -> None:
        """The pause itself, after a delete's commit or after merge steps."""
        started = self.clock()
        self._other_committed()
        active = self.others_may_write
        deadline = committed_at + (max(MIN_S, poll_interval(held_s)) + SLACK_S if active else self._token_s())
        for _ in range(int((MAX_S + SLACK_S) / POLL_S) + 1):  # bounded: a stopped clock (tests) cannot hold us here
            now = self.clock()
            if now >= deadline:
                break
            self.sleep(min(POLL_S, deadline - now))
            if active and self._other_committed():
                break  # the waiting writer had its turn
        self.paused_s += self.clock() - started

    def _token_s(self) -> float:
        """The pause with no other writer about: MIN_S, for one that came meanwhile to meet with its
        poll; none while alone with `peers`, which sees such a one before our next transaction (one
        that holds no lock, its SQLite's locks lost, is seen by the next look; until then it meets
        the few lock-free ms between our transactions, as it met a token pause)."""
        return 0.0 if self._peers is not None and not self._others_seen else MIN_S


class _Looked(NamedTuple):
    free: bool | None  # None: not asked (not alone)
    held: bool
    cost_s: float  # the CPU time the look took


class _Aside(Executor):
    """Each look on a daemon thread of its own, begun when asked (one every 0.5 s at most): a look
    stuck in the kernel (a `stat` on a file system that does not answer) never holds up the
    engine, nor the process's exit, as a pool's thread would."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        answer: Future = Future()

        def look() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    answer.set_exception(exc)

        threading.Thread(target=look, name="hermes-admin-look", daemon=True).start()
        return answer


class _Here(Executor):
    """Looks run on the caller's thread, each done when `submit` returns (Turns' default: tests)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        done: Future = Future()
        done.set_result(fn(*args, **kwargs))
        return done


_HERE = _Here()


def _answer(look: Callable[[], bool], failed: bool) -> bool:
    """A look at the store's holders, `failed` when it raises (nothing we may stop on)."""
    try:
        return bool(look())
    except Exception:
        return failed

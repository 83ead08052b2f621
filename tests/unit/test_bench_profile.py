"""bench/profile_purge.py --spy-only: the engine's thread read from py-spy's raw stacks."""

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _profile_purge():
    saved = list(sys.path)  # it puts bench/ first, to import bench/run.py as `run`: this test's own
    try:
        spec = importlib.util.spec_from_file_location("profile_purge", BENCH / "profile_purge.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def test_the_engine_thread_is_split_into_its_write_transactions_and_what_it_waited_for(tmp_path, capsys):
    main = 'process 10:"";thread (10): MainThread;run (engine.py:1)'
    (tmp_path / "out.txt").write_text("\n".join([
        f"{main};write_transaction (connect.py:180);execute (~:0) 500",
        f"{main};_batch_at (export_ahead.py:125);result (_base.py:451);wait (threading.py:327) 50",
        f"{main};look (holders.py:144);lock_table (lockrecord.py:73) 25",
        'process 10:"";thread (11): hermes-admin-export_0;_worker (thread.py:81) 400',  # another thread
        'process 10:"";process 12:"python -c unlinker";thread (12): MainThread;main (unlinker.py:92) 300',  # the remover
    ]) + "\n")
    assert _profile_purge().engine_thread(tmp_path / "out.txt", top=5) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "engine thread: 2.30 s; in write transactions 2.00 s; outside them:"
    assert said[1:] == ["    0.20 s  wait <- result <- _batch_at", "    0.10 s  lock_table <- look <- run"]

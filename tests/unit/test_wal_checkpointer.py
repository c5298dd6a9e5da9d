"""A node's SQLite store leaves the WAL's checkpoints to its main process's
WalCheckpointer (store/sqlite.py): a commit that takes the WAL past SQLite's 1 000 pages
does not copy it into the database, and the checkpointer does, soon after."""

import base64
import json
import os
import time

from tests.unit.conftest import sqlite_url
from tests.unit.helpers import new_record
from tests.unit.test_result_reader import finished
from xruntime.payload.form import pack, unpack
from xruntime.store import JobStore
from xruntime.store.sqlite import WalCheckpointer

PAGES_4K = 1000 * 4096  # SQLite's autocheckpoint: 1 000 pages of 4 kB


def large_result():
    """A stored result of more than 1 000 pages."""
    blob = pack(json.dumps({"text": base64.b64encode(os.urandom(5_000_000)).decode()}))
    assert len(blob) > PAGES_4K
    return blob


def sizes(tmp_path):
    return os.path.getsize(tmp_path / "db"), os.path.getsize(tmp_path / "db-wal")


def test_commits_leave_the_wal_to_the_checkpointer(tmp_path):
    blob = large_result()
    store = JobStore(sqlite_url(tmp_path), background_checkpoints=True)
    try:
        job_id = finished(store, blob)
        database, wal = sizes(tmp_path)
        assert database < 1_000_000 and wal > len(blob)  # not copied at the commit
        checkpointer = WalCheckpointer(str(tmp_path / "db"), period=0.05)
        checkpointer.start()
        try:
            deadline = time.monotonic() + 10
            while checkpointer.checkpoints == 0:
                assert time.monotonic() < deadline, sizes(tmp_path)
                time.sleep(0.01)
            assert sizes(tmp_path)[0] >= len(blob)
        finally:
            checkpointer.stop()
        assert not checkpointer.is_alive()
        assert store.get(job_id).result == unpack(blob)
    finally:
        store.close()


def test_other_stores_checkpoint_at_commit_as_sqlite_does(tmp_path):
    blob = large_result()
    store = JobStore(sqlite_url(tmp_path))
    try:
        finished(store, blob)
        assert sizes(tmp_path)[0] >= len(blob)
    finally:
        store.close()


def checkpointer_under_steady_writes(tmp_path, restart_above):
    """The checkpointer, run every 5 ms while 3 000 job starts are written one after the
    other: the writes never pause, as on a busy node, so a checkpoint's copy is never
    complete when the next write begins."""
    store = JobStore(sqlite_url(tmp_path), background_checkpoints=True)
    checkpointer = WalCheckpointer(str(tmp_path / "db"), period=0.005, restart_above=restart_above)
    checkpointer.start()
    try:
        for _ in range(3000):
            store.create(new_record(), 0)
    finally:
        checkpointer.stop()
        store.close()
    return checkpointer


def test_under_steady_writes_the_wal_is_started_over(tmp_path):
    """Copied PASSIVE alone (as the checkpointer did), the WAL only grew under steady
    writes (by every commit's pages, ~150 kB a job cycle on a node: gigabytes in
    minutes, each statement slower as it grew); past ``restart_above`` frames the
    checkpointer now runs RESTART checkpoints, and they get done between the writes, so
    that the next write starts the WAL over.  (How far the WAL then stays below what
    PASSIVE alone leaves moves with the machine's load: benchmarks/steady_load.py.)"""
    checkpointer = checkpointer_under_steady_writes(tmp_path, restart_above=256)
    assert checkpointer.restarts >= 1

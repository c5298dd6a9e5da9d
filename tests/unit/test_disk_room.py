"""A full disk, at the store (issue 32; docs/operations.md, "A full disk"): a SQLite
store on a small tmpfs raises ``StoreFull`` (a ``StoreUnavailable``) for a result that
finds no room, leaves the job as it was, and still takes the small write that fails
the job; ``DiskRoom`` measures the room left against the floor.  The tmpfs tests are
root only (they mount one)."""

import os
import shutil
import subprocess

import pytest

from tests.unit.helpers import claim_exactly, fault_json, new_record
from xruntime.protocol.faults import InternalErrorFault
from xruntime.protocol.states import Status
from xruntime.store import JobStore, StoreFull, StoreUnavailable, now_ms
from xruntime.store.disk_room import DiskRoom, of_store

root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a tmpfs: root only"
)


@pytest.fixture
def small_disk(tmp_path):
    path = str(tmp_path / "disk")
    os.mkdir(path)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", path], check=True)
    yield path
    subprocess.run(["umount", "-l", path], check=False)


@root_only
def test_a_result_with_no_room_raises_store_full_and_the_fault_is_written(small_disk):
    store = JobStore(f"sqlite:///{small_disk}/db")
    try:
        rec = new_record()
        assert store.create(rec, 0)
        claim_exactly(store, rec.id)
        too_large = os.urandom(6 << 20)  # in the database itself: no file to rename
        with pytest.raises(StoreFull) as caught:
            store.finish(rec.id, Status.SUCCEEDED, now_ms(), result=too_large)
        assert isinstance(caught.value, StoreUnavailable)  # (a client is told to retry)
        assert store.peek(rec.id).status == Status.RUNNING  # nothing of it stored
        fault = fault_json(InternalErrorFault("no room for this job's result"))
        assert store.finish(rec.id, Status.FAILED, now_ms(), fault=fault)
        assert store.peek(rec.id).status == Status.FAILED
        room = of_store(store.result_folder)
        assert room.shortfall(8 << 20) is not None and room.shortfall(0) is None
    finally:
        store.close()


def test_the_room_left_against_the_floor(tmp_path):
    room = DiskRoom(str(tmp_path))
    free = room.free_bytes()
    assert free is not None and free > 0
    assert room.shortfall(0) is None  # no floor
    assert room.shortfall(1) is None
    refused = room.shortfall(free * 1000)
    assert refused is not None and "min_free_bytes" in refused
    assert DiskRoom(None).free_bytes() is None  # PostgreSQL's disk: not measured
    assert DiskRoom(None).shortfall(1 << 40) is None
    assert DiskRoom(str(tmp_path / "gone")).shortfall(1 << 40) is None

"""Large results of a SQLite store kept as files beside the database
(store/result_files.py): a worker's file is taken in by a rename when its job finishes
and read back whole, by ranges and as a child's part; a finish that loses or fails
leaves the file where it was; the files of erased jobs are swept, nothing else."""

import os
import sqlite3

import pytest

from tests.unit.helpers import new_record
from tests.unit.test_result_reader import LEASE_MS, NODE, large_result
from xruntime.payload import stream as payload_stream
from xruntime.payload.form import unpack
from xruntime.protocol.states import Status
from xruntime.store import Run, now_ms, result_files
from xruntime.store.result_files import ComposedFile, ResultFile, Span


def spilled_file(store, blob, name="job-abc123"):
    """A worker's file of the stored form, in the spill folder inside the result folder
    (where a SQLite node keeps it, so that it is taken in by a rename)."""
    folder = os.path.join(result_files.make_private_folder(store.result_folder), "spill")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(blob)
    return ResultFile(path, len(blob))


def running(store):
    rec = new_record()
    assert store.create(rec, 0)
    claimed = store.claim(NODE, now_ms(), LEASE_MS)
    assert claimed is not None and claimed.id == rec.id
    return rec.id, Run(NODE, claimed.attempts)


def result_names(store):
    return sorted(n for n in os.listdir(store.result_folder) if n.endswith(".result"))


def test_a_result_file_is_taken_in_and_read_back_every_way(store):
    blob = large_result()
    job_id, run = running(store)
    file = spilled_file(store, blob)
    assert store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    assert not os.path.exists(file.path)  # renamed, not copied
    (name,) = result_names(store)
    assert os.stat(os.path.join(store.result_folder, name)).st_size == len(blob)
    assert store.get(job_id).result == unpack(blob)
    reader = store.get(job_id, stored_result=True).stored_result
    assert reader.length == len(blob)
    assert reader.read(1_000_003, 70_000) == blob[1_000_003:1_070_003]
    assert b"".join(payload_stream.json_chunks(reader)).decode() == unpack(blob)
    assert store.stored_bytes("") >= len(blob)  # quotas count the file's bytes


def test_a_child_result_in_a_file_reaches_its_parent_as_bytes(store):
    blob = large_result()
    parent = new_record()
    assert store.create(parent, 0)
    claimed = store.claim(NODE, now_ms(), LEASE_MS)
    child = new_record()
    assert claimed is not None and claimed.id == parent.id
    assert store.suspend(parent.id, NODE, 0, False, [child], "{}", "waiting") == "RUNNING"
    taken = store.claim(NODE, now_ms(), LEASE_MS)
    assert taken is not None and taken.id == child.id
    file = spilled_file(store, blob)
    assert store.finish(child.id, Status.SUCCEEDED, now_ms(), result=file)
    (finished,) = store.children_of(parent.id)
    assert finished.result == blob


def test_a_finish_that_loses_leaves_the_file_where_it_was(store):
    job_id, run = running(store)
    assert store.mark_deleted(job_id)  # deleted while it ran
    file = spilled_file(store, large_result())
    assert not store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    assert os.path.exists(file.path) and result_names(store) == []


def test_a_finish_that_fails_renames_the_file_back_for_the_next_try(store, monkeypatch):
    job_id, run = running(store)
    file = spilled_file(store, large_result())

    def unreachable(*args, **kwargs):
        raise RuntimeError("the store is unreachable")

    monkeypatch.setattr(store, "_finish_with_row", unreachable)
    with pytest.raises(RuntimeError):
        store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    assert os.path.exists(file.path) and result_names(store) == []
    assert store.get(job_id).status == Status.RUNNING
    monkeypatch.undo()
    assert store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    assert len(result_names(store)) == 1


def test_the_files_of_erased_jobs_are_swept_and_nothing_else(store):
    kept, kept_run = running(store)
    erased, erased_run = running(store)
    for job_id, run, name in ((kept, kept_run, "a"), (erased, erased_run, "b")):
        file = spilled_file(store, large_result(), name=f"job-{name}")
        assert store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    names = result_names(store)
    assert len(names) == 2
    other = os.path.join(store.result_folder, "notes.txt")  # not a result file
    with open(other, "w") as f:
        f.write("an administrator's")
    assert store.sweep_result_files() == 0  # every file is some job's
    assert store.erase(erased, [Status.SUCCEEDED])
    assert store.sweep_result_files() == 1
    assert result_names(store) == [n for n in names if n.startswith(kept)]
    assert os.path.exists(other) and os.path.isdir(os.path.join(store.result_folder, "spill"))
    assert store.get(kept).result == unpack(large_result())


def test_a_sweep_removes_its_files_after_it_gave_the_write_lock_back(store, monkeypatch):
    """Removing a large file takes the disk as long as writing it; the sweep's removals
    come after it gave the write lock back, so that the node's writes (and those of nodes
    sharing the database) do not wait for them.  A file a stopped node set aside and did
    not remove goes at the next sweep; other files stay."""
    job_id, run = running(store)
    file = spilled_file(store, large_result(), name="job-e")
    assert store.finish(job_id, Status.SUCCEEDED, now_ms(), result=file, run=run)
    (name,) = result_names(store)
    assert store.erase(job_id, [Status.SUCCEEDED])
    left = os.path.join(store.result_folder, "job-x-1-abc.result.swept")  # a stopped node's
    with open(left, "wb") as f:
        f.write(b"set aside")
    database = store.engine.url.database
    removed, real_unlink = [], os.unlink

    def unlink(path, *args, **kwargs):
        other = sqlite3.connect(database, timeout=0)  # another node's connection
        try:
            other.execute("BEGIN IMMEDIATE")  # "database is locked" while the lock is held
            other.execute("ROLLBACK")
        finally:
            other.close()
        removed.append(os.path.basename(path))
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert store.sweep_result_files() == 1
    assert sorted(removed) == sorted([name + ".swept", os.path.basename(left)])
    assert os.listdir(store.result_folder) == ["spill"]


def composed(store, child_name, child_length):
    """A parent's result made of spans (``ComposedFile``): its own file's "head" and
    "tail" around the whole of its child's file, as a join that refers to its child's
    pieces makes it (engine.worker)."""
    file = spilled_file(store, b"headtail", name="job-parent1")
    spans = (Span(None, 0, 4), Span(child_name, 0, child_length), Span(None, 4, 4))
    return ComposedFile(file.path, spans)


def test_a_result_of_spans_reads_back_whole_and_by_ranges_and_keeps_the_files_it_names(store):
    blob = large_result()
    child, child_run = running(store)
    assert store.finish(
        child, Status.SUCCEEDED, now_ms(), result=spilled_file(store, blob), run=child_run
    )
    (child_name,) = result_names(store)
    parent, parent_run = running(store)
    result = composed(store, child_name, len(blob))
    assert store.finish(parent, Status.SUCCEEDED, now_ms(), result=result, run=parent_run)
    assert not os.path.exists(result.path) and len(result_names(store)) == 2  # taken in
    whole = b"head" + blob + b"tail"
    reader = store.get(parent, stored_result=True).stored_result
    assert reader.length == len(whole) == result.length
    assert reader.read(0, 10) == whole[:10]
    assert reader.read(len(whole) - 70_000, 70_000) == whole[-70_000:]  # across two spans
    assert store.stored_bytes("") >= len(whole) + len(blob)  # quotas count both
    assert store.erase(child, [Status.SUCCEEDED])
    assert store.sweep_result_files() == 0  # the child's file: the parent's result still needs it
    assert store.get(parent, stored_result=True).stored_result.read(0, len(whole)) == whole
    assert store.erase(parent, [Status.SUCCEEDED])
    assert store.sweep_result_files() == 2 and result_names(store) == []


def test_a_result_of_spans_whose_files_are_gone_is_refused_and_its_file_left(store):
    parent, run = running(store)
    result = composed(store, "gone-1-abc.result", 1000)
    with pytest.raises(LookupError):
        store.finish(parent, Status.SUCCEEDED, now_ms(), result=result, run=run)
    assert os.path.exists(result.path) and result_names(store) == []

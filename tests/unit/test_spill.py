"""A large result handed from a worker to the main process as a file (engine/spill.py):
stored from the mapped file as it was written, on SQLite and PostgreSQL; the file gone
afterwards even when the write fails; folders of dead nodes removed, live ones kept."""

import os
import subprocess
import sys

import pytest

from tests.unit.test_result_reader import finished, large_result
from xruntime.engine import spill
from xruntime.payload.form import unpack


def test_a_spilled_result_is_stored_from_its_mapped_file(any_store, tmp_path):
    blob = large_result()
    assert len(blob) > spill.SPILL_ABOVE
    path = spill.spill(str(tmp_path), "job", bytearray(blob))
    with spill.spilled(path) as mapped:
        assert isinstance(mapped, memoryview) and len(mapped) == len(blob)
        job_id = finished(any_store, mapped)
    assert not os.path.exists(path)
    assert any_store.get(job_id).result == unpack(blob)


def test_a_result_that_cannot_be_spilled_goes_through_the_pipe(tmp_path, monkeypatch):
    """(``/dev/shm`` full, or its folder gone): no path, and no file left."""
    assert spill.spill(str(tmp_path / "gone"), "job", b"x" * 100) is None
    real_mkstemp = spill.tempfile.mkstemp

    def mkstemp_on_a_full_device(prefix, dir):
        fd, path = real_mkstemp(prefix=prefix, dir=dir)
        full = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
        os.dup2(full, fd)
        os.close(full)
        return fd, path

    monkeypatch.setattr(spill.tempfile, "mkstemp", mkstemp_on_a_full_device)
    assert spill.spill(str(tmp_path), "job", b"x" * 100_000) is None
    assert os.listdir(tmp_path) == []


def test_the_file_is_removed_when_storing_fails(tmp_path):
    path = spill.spill(str(tmp_path), "job", b"x" * 100)
    with pytest.raises(RuntimeError), spill.spilled(path) as mapped:
        assert bytes(mapped) == b"x" * 100
        raise RuntimeError("the store is unreachable")
    assert os.listdir(tmp_path) == []


def test_a_node_removes_the_folders_of_dead_nodes_only(tmp_path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    dead = tmp_path / f"{spill.PREFIX}{int(gone.stdout)}-abc"
    alive = tmp_path / f"{spill.PREFIX}{os.getppid()}-def"
    for folder in (dead, alive):
        folder.mkdir()
        (folder / "job-1").write_bytes(b"result")
    made = spill.make_spill_folder(str(tmp_path))
    assert os.path.dirname(made) == str(tmp_path) and os.stat(made).st_mode & 0o777 == 0o700
    assert not dead.exists() and alive.exists()
    spill.remove_folder(made)
    assert not os.path.exists(made)


def matrix_table(encoded=False):
    """A 600 × 600 XDima table (2.9 MB stored: more than SPILL_ABOVE), plain or encoded."""
    from tests.unit.test_xdima_compute import SUMMARY, random_matrix
    from xruntime.author.tables import encoded as encoded_table
    from xruntime.author.tables import table
    from xruntime.protocol import codec
    from xruntime_services import xdima

    metres, seconds = random_matrix(600, 600, 26)
    summary = codec.decode(SUMMARY, xdima.DistanceMatrixSummary)
    response = xdima.DistanceMatrixResponse(summary=summary)
    if encoded:
        return encoded_table(response, "encodedContents", distances=metres, travelTimes=seconds)
    return table(response, "rows", distances=metres, travelTimes=seconds)


@pytest.mark.parametrize("encoded", [False, True])
def test_a_large_table_is_written_straight_into_the_file_handed_over(tmp_path, encoded):
    from xruntime.payload.arrays import stored_table
    from xruntime_services import xdima

    in_memory = stored_table(matrix_table(encoded), xdima.DistanceMatrixResponse)
    assert len(in_memory) > spill.SPILL_ABOVE
    spilling = spill.Spill(str(tmp_path), "job")
    stored = stored_table(matrix_table(encoded), xdima.DistanceMatrixResponse, spilling)
    assert spilling.holds(stored)  # the file itself: no copy made in memory
    del stored
    path = spilling.hand_over()
    assert os.path.dirname(path) == str(tmp_path)
    with open(path, "rb") as f:
        assert f.read() == in_memory
    spilling.discard()  # (handed over: the main process removes it)
    assert os.path.exists(path)


def test_a_form_written_in_short_writes_and_many_buffers_is_whole(tmp_path, monkeypatch):
    """The file takes a piece's buffers in as many ``pwritev`` calls as the kernel
    allows buffers (``_IOV_MAX``), and goes on from the first byte a short write left
    out: what is read back is every buffer, end to end, each at its place."""
    from xruntime.payload.arrays import stored_table
    from xruntime_services import xdima

    in_memory = stored_table(matrix_table(), xdima.DistanceMatrixResponse)
    real_pwritev, calls = os.pwritev, []

    def short(fd, buffers, offset):  # at most 5 buffers and 4 999 bytes a call
        calls.append(len(buffers))
        taken, size = [], 0
        for buffer in buffers[:5]:
            piece = memoryview(buffer)[: 4_999 - size]
            taken.append(piece)
            size += len(piece)
            if size == 4_999:
                break
        return real_pwritev(fd, taken, offset)

    monkeypatch.setattr(spill.os, "pwritev", short)
    monkeypatch.setattr(spill, "_IOV_MAX", 7)
    spilling = spill.Spill(str(tmp_path), "job")
    stored = stored_table(matrix_table(), xdima.DistanceMatrixResponse, spilling)
    assert spilling.holds(stored)
    with open(spilling.hand_over(), "rb") as f:
        assert f.read() == in_memory
    assert max(calls) == 7 and len(calls) > len(in_memory) // 4_999


def test_a_file_not_handed_over_is_removed(tmp_path):
    from xruntime.payload.arrays import stored_table
    from xruntime_services import xdima

    spilling = spill.Spill(str(tmp_path), "job")
    stored = stored_table(matrix_table(), xdima.DistanceMatrixResponse, spilling)
    assert spilling.holds(stored) and len(os.listdir(tmp_path)) == 1
    del stored
    spilling.discard()  # (the job failed after its result was made)
    assert os.listdir(tmp_path) == []


def test_a_table_that_finds_no_room_is_made_in_memory(tmp_path, monkeypatch):
    """``/dev/shm`` full: the space is asked for before the form is composed, and the
    form is made in memory instead, no file left."""
    from xruntime.payload.arrays import stored_table
    from xruntime_services import xdima

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spill.os, "posix_fallocate", full)
    spilling = spill.Spill(str(tmp_path), "job")
    stored = stored_table(matrix_table(), xdima.DistanceMatrixResponse, spilling)
    assert isinstance(stored, bytearray) and not spilling.holds(stored)
    assert stored == stored_table(matrix_table(), xdima.DistanceMatrixResponse)
    assert os.listdir(tmp_path) == []


def test_a_table_with_no_room_on_the_stores_disk_fails_its_job(tmp_path, monkeypatch):
    """The folder is where a SQLite store keeps results (``final``): the pipe is no way
    round, the store would need the same room; ``NoRoom`` (the job fails), no file left."""
    from xruntime.payload.arrays import stored_table
    from xruntime_services import xdima

    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spill.os, "posix_fallocate", full)
    spilling = spill.Spill(str(tmp_path), "job", final=True)
    with pytest.raises(spill.NoRoom) as caught:
        stored_table(matrix_table(), xdima.DistanceMatrixResponse, spilling)
    assert caught.value.size > spill.SPILL_ABOVE and "No space left" in str(caught.value)
    assert os.listdir(tmp_path) == []
    fault = spill.no_room_fault(caught.value.size, str(caught.value))
    assert type(fault).__name__ == "InternalErrorFault"
    assert f"({caught.value.size} bytes)" in fault.message


def test_a_result_with_no_room_on_the_stores_disk_leaves_no_partial_file(tmp_path, monkeypatch):
    """A compressed form written after it is made (``spill.spill``): the same."""
    written, real_fdopen = [], os.fdopen

    class Full:
        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[:1000])
            written.append(1000)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(spill.os, "fdopen", Full)
    with pytest.raises(spill.NoRoom):
        spill.spill(str(tmp_path), "job", b"x" * (2 * spill.SPILL_ABOVE), final=True)
    assert written and os.listdir(tmp_path) == []
    # not final (/dev/shm): the pipe instead, no file left either
    assert spill.spill(str(tmp_path), "job", b"x" * (2 * spill.SPILL_ABOVE)) is None
    assert os.listdir(tmp_path) == []

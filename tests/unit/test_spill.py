"""A large result handed from a worker to the main process as a file (engine/spill.py):
stored from the mapped file as it was written, on SQLite and PostgreSQL; the file gone
afterwards even when the write fails; folders of dead nodes removed, live ones kept."""

import os
import subprocess
import sys

import pytest

from tests.unit.test_result_reader import finished, large_result
from xruntime.engine import spill
from xruntime.store.payload import unpack


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
    made = spill.make_folder(str(tmp_path))
    assert os.path.dirname(made) == str(tmp_path) and os.stat(made).st_mode & 0o777 == 0o700
    assert not dead.exists() and alive.exists()
    spill.remove_folder(made)
    assert not os.path.exists(made)

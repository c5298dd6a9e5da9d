"""A stored result read by ranges (store/result_reader.py), on SQLite and PostgreSQL:
every range reads what the stored form holds, the streamed JSON text is ``unpack``'s,
and a job erased meanwhile never makes a read answer other bytes."""

import json
import random

import pytest

from tests.unit.helpers import new_record
from xruntime.payload import stream as payload_stream
from xruntime.payload.form import pack, unpack
from xruntime.protocol.states import Status
from xruntime.store import now_ms, result_reader

NODE, LEASE_MS = "node-a:1", 30_000


def finished(store, result: bytes):
    rec = new_record()
    assert store.create(rec, 0)
    claimed = store.claim(NODE, now_ms(), LEASE_MS)
    assert claimed is not None and claimed.id == rec.id
    assert store.finish(rec.id, Status.SUCCEEDED, now_ms(), result=result)
    return rec.id


def large_result() -> bytes:
    rng = random.Random(3)
    rows = [{"d": [rng.randrange(2**31) for _ in range(1000)]} for _ in range(800)]
    return pack(json.dumps({"rows": rows, "n": 800}, separators=(",", ":")))


def test_ranges_of_a_stored_result_and_its_streamed_text(any_store):
    blob = large_result()
    assert len(blob) > 3_000_000  # pieces of 2 MiB: more than one
    job_id = finished(any_store, blob)
    reader = any_store.get(job_id, stored_result=True).stored_result
    assert reader.length == len(blob)
    rng = random.Random(4)
    for offset, size in [(0, 9), (len(blob) - 5, 100), (1_000_003, 65_536)] + [
        (rng.randrange(len(blob)), rng.randrange(1, 300_000)) for _ in range(20)
    ]:
        assert reader.read(offset, size) == blob[offset : offset + size]
    reader.close()
    text = b"".join(payload_stream.json_chunks(reader)).decode()
    assert text == unpack(blob)


def test_a_record_read_with_its_reader_has_no_result_text(any_store, monkeypatch):
    """A small result (in the job's row) comes with the record, in the one statement:
    a fetch of it reads nothing more."""
    job_id = finished(any_store, pack('{"small":1}'))
    rec = any_store.get(job_id, stored_result=True)
    assert rec.result is None and rec.status == "SUCCEEDED"
    monkeypatch.setattr(any_store, "_run", lambda *a, **k: pytest.fail("read again"))
    assert unpack(rec.stored_result.read_all()) == '{"small":1}'
    monkeypatch.undo()
    assert any_store.get(job_id, owner="someone else", stored_result=True) is None


def test_a_result_erased_while_it_is_read_is_cut_short(any_store, monkeypatch):
    """The next range not read ahead finds no row: the answer is cut short (its client
    sees an incomplete answer), never other bytes."""
    monkeypatch.setattr(result_reader, "SQLITE_WINDOW", 65536)
    blob = large_result()
    job_id = finished(any_store, blob)
    reader = any_store.get(job_id, stored_result=True).stored_result
    assert reader.read(0, 1000) == blob[:1000]
    assert any_store.erase(job_id, ("SUCCEEDED",))
    with pytest.raises(LookupError):
        reader.read(2_000_000, 1000)


def test_sqlite_reads_ahead_a_window_and_holds_no_connection_between_ranges(store, monkeypatch):
    """A slow client must not hold a connection of the pool (nor a read snapshot) while
    it reads: the pool has all its connections back after each read.  A blob handle
    walks the overflow pages up to its offset, so each reads a window ahead: one handle
    for all the ranges inside it."""
    monkeypatch.setattr(result_reader, "SQLITE_WINDOW", 1 << 20)
    blob = large_result()
    job_id = finished(store, blob)
    reader = store.get(job_id, stored_result=True).stored_result
    opened = []
    real = reader._sqlite_range
    monkeypatch.setattr(reader, "_sqlite_range", lambda *a: opened.append(a) or real(*a))
    assert reader.read(0, 100) == blob[:100]
    assert store.engine.pool.checkedout() == 0
    assert reader.read(500_000, 100) == blob[500_000:500_100]  # inside the window
    assert reader.read(3_000_000, 100) == blob[3_000_000:3_000_100]
    assert store.engine.pool.checkedout() == 0
    assert [offset for offset, _ in opened] == [0, 3_000_000]

"""Reading a stored payload in pieces (payload/stream.py): the JSON text in
chunks is exactly ``unpack``'s, and the lazy value holds exactly the decoded data,
whatever the form, the slices and the pieces."""

import json
import random

import numpy as np
import pytest

from xruntime.author.tables import encoded, table
from xruntime.payload import form as payload
from xruntime.payload import stream as payload_stream
from xruntime.payload.arrays import stored_table
from xruntime.payload.form import pack, unpack
from xruntime.payload.list_join import join_lists
from xruntime_services import xdima


def materialized(value):
    """A lazy value with its Packed arrays read (lists, or the base64 string)."""
    if isinstance(value, payload_stream.Packed):
        if value.code == "B":
            return "".join(value.slices())
        return [x for piece in value.slices() for x in piece.tolist()]
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, list):
        return [materialized(v) for v in value]
    return value


def blobs():
    rng = random.Random(5)
    yield "small", pack('{"a":[1,2,3],"s":"x"}')
    yield "zlib text", pack(json.dumps({"s": "abc" * 3000, "n": None}))
    numbers = [rng.randrange(-(2**31), 2**31) for _ in range(5000)]
    wide = [rng.randrange(-(2**62), 2**62) for _ in range(700)]
    floats = [rng.random() * 1e6 for _ in range(900)]
    text = json.dumps(
        {
            "rows": [{"d": numbers[i : i + 500]} for i in range(0, 5000, 500)],
            "w": wide,
            "f": floats,
            "s": "[1,2,3]",
            "é": "ü",
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    yield "compact", pack(text)
    yield "joined", join_lists('{"rows":[],"k":1}', "rows", [pack(text), pack(text)])
    metres = np.arange(120 * 77, dtype=np.int32).reshape(120, 77) * 1000
    seconds = metres // 7
    for name, make in (("table", table), ("encoded", encoded)):
        field = "rows" if name == "table" else "encodedContents"
        response = xdima.DistanceMatrixResponse(
            summary=xdima.DistanceMatrixSummary(numberOfRowsComputed=120)
        )
        made = make(response, field, distances=metres, travelTimes=seconds)
        yield name, stored_table(made, xdima.DistanceMatrixResponse)


@pytest.mark.parametrize("name, blob", list(blobs()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("small_slices", [False, True])
def test_chunks_and_lazy_value_are_the_payload(monkeypatch, name, blob, small_slices):
    if small_slices:  # slices and chunks that cut arrays, pieces and UTF-8 anywhere
        monkeypatch.setattr(payload_stream, "SLICE_ITEMS", 37)
        monkeypatch.setattr(payload_stream, "SLICE_BYTES", 3 * 29)
    text = unpack(blob)
    chunks = list(payload_stream.json_chunks(blob, chunk_bytes=1000 if small_slices else 1 << 20))
    assert b"".join(chunks).decode("utf-8") == text
    if small_slices and len(text) > 5000:
        assert len(chunks) > 3
    assert materialized(payload_stream.lazy_value(blob)) == json.loads(text)


def test_arrays_are_read_in_any_order(monkeypatch):
    monkeypatch.setattr(payload, "PIECE_BYTES", 4096)  # many pieces
    numbers = list(range(0, 300_000, 7))
    text = json.dumps(
        {"a": numbers[:20000], "b": numbers[20000:], "c": numbers[5:900]}, separators=(",", ":")
    )
    value = payload_stream.lazy_value(pack(text))
    assert materialized(value["c"]) == numbers[5:900]
    assert materialized(value["a"]) == numbers[:20000]
    assert materialized(value["b"]) == numbers[20000:]

"""A stored payload read in pieces, for answers that are written as they are read.

``payload.unpack`` writes a payload's whole JSON text: for a 2 000 × 2 000 matrix
that is 50 MB of text in an HTTP process, and for SOAP the text parsed again into
Python objects (a few hundred MB).  Here the compact form (``payload.MAGIC``) is read
one piece of its zlib stream at a time (each piece inflates alone, its raw offset known
from the table), and its packed arrays are formatted a slice at a time:

* ``json_chunks(blob)``: the payload's JSON text as UTF-8 chunks, exactly
  ``unpack(blob)`` once joined;
* ``lazy_value(blob)``: the payload as JSON data whose packed arrays are ``Packed``
  placeholders, which a writer (``bindings.xml_codec``) reads slice by slice, in any
  order.

Payloads in the other forms (small ones, zlib text, the first compact form) are read
whole, as ``unpack`` does: they are never large by themselves.
"""

from __future__ import annotations

import base64
import bisect
import json
import struct
import zlib
from array import array
from collections.abc import Iterator
from typing import Any

from . import payload

#: Items of a packed array formatted at once (a slice's text is about 1-3 MB).
SLICE_ITEMS = 1 << 18
#: Bytes of encoded arrays (code ``B``) turned into base64 at once: a multiple of 3,
#: so that slices' base64 texts join into the whole's.
SLICE_BYTES = 3 << 18
#: The UTF-8 text gathered before a chunk is yielded.
CHUNK_BYTES = 1 << 20


class PieceReader:
    """The raw bytes of a compact payload's zlib stream (``payload.MAGIC``), read by
    offset: the piece holding an offset is inflated alone, and the last one kept."""

    def __init__(self, blob: bytes) -> None:
        pieces, _ = payload.read_table(blob)
        self._pieces = [deflated for deflated, _, _ in pieces]
        self._starts = [0]
        for _, length, _ in pieces:
            self._starts.append(self._starts[-1] + length)
        self.length = self._starts[-1]
        self._cached: tuple[int, bytes] = (-1, b"")

    def _piece(self, i: int) -> bytes:
        if self._cached[0] != i:
            self._cached = (i, zlib.decompressobj(-15).decompress(self._pieces[i]))
        return self._cached[1]

    def read(self, offset: int, size: int) -> bytes:
        """``size`` raw bytes from ``offset``."""
        parts = []
        while size > 0:
            i = bisect.bisect_right(self._starts, offset) - 1
            piece = self._piece(i)
            at = offset - self._starts[i]
            part = piece[at : at + size]
            if not part:
                raise ValueError("read past the end of a stored payload")
            parts.append(part)
            offset += len(part)
            size -= len(part)
        return b"".join(parts)


class Packed:
    """A packed array of a stored payload, not yet read: ``slices()`` reads it in
    slices (``array``s of numbers, or ``str``s of base64 for code ``B``)."""

    __slots__ = ("reader", "offset", "code", "count")

    def __init__(self, reader: PieceReader, offset: int, code: str, count: int) -> None:
        self.reader, self.offset, self.code, self.count = reader, offset, code, count

    def slices(self) -> Iterator[Any]:
        width = payload.ITEM_BYTES[self.code]
        step = SLICE_BYTES if self.code == "B" else SLICE_ITEMS
        for first in range(0, self.count, step):
            n = min(step, self.count - first)
            data = self.reader.read(self.offset + first * width, n * width)
            if self.code == "B":
                yield base64.b64encode(data).decode("ascii")
            else:
                packed = array(self.code)
                packed.frombytes(data)
                yield payload.flip_byte_order(packed)

    def text_slices(self) -> Iterator[str]:
        """The array's JSON text in slices."""
        if self.code == "B":
            yield '"'
            yield from self.slices()
            yield '"'
            return
        yield "["
        for i, packed in enumerate(self.slices()):
            text = payload.format_array(packed)
            yield text[1:-1] if i == 0 else "," + text[1:-1]
        yield "]"


def _opened(blob: bytes) -> tuple[str, list[tuple[int, Packed]]] | None:
    """The skeleton of a compact payload (as written now) and its arrays as
    ``(position, Packed)``; None for the other forms."""
    if blob[: len(payload.MAGIC)] != payload.MAGIC:
        return None
    reader = PieceReader(blob)
    head = reader.read(0, 4)
    (head_len,) = struct.unpack("<I", head)
    index = json.loads(reader.read(4, head_len))
    binary = sum(payload.ITEM_BYTES[code] * count for _, code, count in index)
    start = 4 + head_len
    skeleton = reader.read(start, reader.length - binary - start).decode("utf-8")
    arrays, offset = [], reader.length - binary
    for position, code, count in index:
        arrays.append((position, Packed(reader, offset, code, count)))
        offset += payload.ITEM_BYTES[code] * count
    return skeleton, arrays


def json_chunks(blob: bytes, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The payload's JSON text as UTF-8, in chunks of about ``chunk_bytes``."""
    blob = bytes(blob)
    opened = _opened(blob)
    if opened is None:
        text = payload.unpack(blob).encode("utf-8")
        for at in range(0, len(text), chunk_bytes):
            yield text[at : at + chunk_bytes]
        return
    skeleton, arrays = opened
    gathered: list[str] = []
    size = last = 0
    for position, packed in [*arrays, (len(skeleton), None)]:
        gathered.append(skeleton[last:position])
        size += position - last
        last = position
        for piece in packed.text_slices() if packed is not None else ():
            gathered.append(piece)
            size += len(piece)
            if size >= chunk_bytes:
                yield "".join(gathered).encode("utf-8")
                gathered, size = [], 0
    if gathered:
        yield "".join(gathered).encode("utf-8")


#: The key of the object that stands for a packed array while the skeleton is parsed
#: (no member of the codec's data is named so: a NUL cannot be in a field's name).
_MARK = "\x00packed"


def lazy_value(blob: bytes) -> Any:
    """The payload as JSON data, each packed array a ``Packed`` (read when written)."""
    blob = bytes(blob)
    opened = _opened(blob)
    if opened is None:
        return json.loads(payload.unpack(blob))
    skeleton, arrays = opened
    marked, last = [], 0
    for i, (position, _) in enumerate(arrays):
        marked.append(skeleton[last:position])
        marked.append(f'{{"\\u0000packed":{i}}}')
        last = position
    marked.append(skeleton[last:])

    def placeholder(obj: dict) -> Any:
        if len(obj) == 1 and _MARK in obj:
            return arrays[obj[_MARK]][1]
        return obj

    return json.loads("".join(marked), object_hook=placeholder)

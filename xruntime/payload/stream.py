"""A stored payload read in pieces, for answers that are written as they are read.

``form.unpack`` writes a payload's whole JSON text: for a large matrix that is tens
of megabytes of text in an HTTP process, and for SOAP the text parsed again into
Python objects, several times that.  Here the compact form (``form.MAGIC``) is read
one piece of its zlib stream at a time (each piece inflates alone, its raw offset known
from the table), and its packed arrays are formatted a slice at a time:

* ``json_chunks(blob)``: the payload's JSON text as UTF-8 chunks, exactly
  ``unpack(blob)`` once joined;
* ``lazy_value(blob)``: the payload as JSON data whose packed arrays are ``Packed``
  placeholders, which a writer (``bindings.xml_codec``) reads slice by slice, in any
  order.

Both take the stored bytes, or a ``Source`` that reads them by ranges
(``store.result_reader``, so that an HTTP process never holds a large result whole),
and close the source once read.  Payloads in the other forms (small ones, zlib text,
the first compact form) are read whole, as ``unpack`` does: they are never large by
themselves.
"""

from __future__ import annotations

import base64
import bisect
import json
import struct
import zlib
from array import array
from collections.abc import Iterator
from typing import Any, Protocol

from . import form

#: Items of a packed array formatted at once (a slice's text is about 1-3 MB).
SLICE_ITEMS = 1 << 18
#: Bytes of encoded arrays (code ``B``) turned into base64 at once: a multiple of 3,
#: so that slices' base64 texts join into the whole's.
SLICE_BYTES = 3 << 18
#: The UTF-8 text gathered before a chunk is yielded.
CHUNK_BYTES = 1 << 20


class Source(Protocol):
    """A stored payload's bytes, read by ranges (the store's ``ResultReader``, or
    ``BytesSource``)."""

    length: int

    def read(self, offset: int, size: int) -> bytes: ...

    def close(self) -> None:
        """Let go of what is held once the payload is read."""
        ...


class BytesSource:
    """A stored payload held in memory, as a ``Source``."""

    def __init__(self, blob: bytes) -> None:
        self.blob, self.length = blob, len(blob)

    def read(self, offset: int, size: int) -> bytes:
        return self.blob[offset : offset + size]

    def close(self) -> None:
        pass


class PieceReader:
    """The raw bytes of a compact payload's zlib stream (``form.MAGIC``), read by
    offset: the piece holding an offset is read from the source and inflated alone,
    and the last one kept."""

    def __init__(self, source: Source) -> None:
        self.source = source
        entries, _ = form.table_of(source.read)
        self._deflated = [(at, n) for at, n, _, _ in entries]  # (offset in the source, length)
        self._starts = [0]
        for _, _, length, _ in entries:
            self._starts.append(self._starts[-1] + length)
        self.length = self._starts[-1]
        self._cached: tuple[int, bytes] = (-1, b"")

    def _piece(self, i: int) -> bytes:
        if self._cached[0] != i:
            self._cached = (-1, b"")  # (let go before the next is read)
            deflated = self.source.read(*self._deflated[i])
            self._cached = (i, zlib.decompressobj(-15).decompress(deflated))
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
        width = form.ITEM_BYTES[self.code]
        step = SLICE_BYTES if self.code == "B" else SLICE_ITEMS
        for first in range(0, self.count, step):
            n = min(step, self.count - first)
            data = self.reader.read(self.offset + first * width, n * width)
            if self.code == "B":
                yield base64.b64encode(data).decode("ascii")
            else:
                packed = array(self.code)
                packed.frombytes(data)
                yield form.flip_byte_order(packed)

    def text_slices(self) -> Iterator[str]:
        """The array's JSON text in slices."""
        if self.code == "B":
            yield '"'
            yield from self.slices()
            yield '"'
            return
        yield "["
        for i, packed in enumerate(self.slices()):
            text = form.format_array(packed)[1:-1]
            yield text if i == 0 else "," + text
        yield "]"


def _opened(source: Source) -> tuple[str, list[tuple[int, Packed]]] | None:
    """The skeleton of a compact payload (as written now) and its arrays as
    ``(position, Packed)``; None for the other forms."""
    if source.read(0, len(form.MAGIC)) != form.MAGIC:
        return None
    reader = PieceReader(source)
    head = reader.read(0, 4)
    (head_len,) = struct.unpack("<I", head)
    index = json.loads(reader.read(4, head_len))
    offsets = form.array_offsets(index, reader.length)
    start = 4 + head_len
    skeleton = reader.read(start, (offsets[0] if offsets else reader.length) - start)
    arrays = [
        (position, Packed(reader, offset, code, count))
        for (position, code, count), offset in zip(index, offsets, strict=True)
    ]
    return skeleton.decode("utf-8"), arrays


def _source(stored: bytes | Source) -> Source:
    return (
        BytesSource(bytes(stored)) if isinstance(stored, (bytes, bytearray, memoryview)) else stored
    )


def json_chunks(stored: bytes | Source, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The payload's JSON text as UTF-8, in chunks of about ``chunk_bytes``."""
    source = _source(stored)
    try:
        yield from _json_chunks(source, chunk_bytes)
    finally:
        source.close()


def _json_chunks(source: Source, chunk_bytes: int) -> Iterator[bytes]:
    opened = _opened(source)
    if opened is None:
        text = form.unpack(source.read(0, source.length)).encode("utf-8")
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


def lazy_value(stored: bytes | Source) -> Any:
    """The payload as JSON data, each packed array a ``Packed`` (read when written;
    ``close`` the source after, when it holds anything)."""
    source = _source(stored)
    opened = _opened(source)
    if opened is None:
        try:
            return json.loads(form.unpack(source.read(0, source.length)))
        finally:
            source.close()
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

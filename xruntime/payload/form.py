"""How a JSON payload (request, result, fault, progress) is kept as bytes in the store.

Three stored forms, told apart by their first byte:

* plain UTF-8 JSON text (small payloads; JSON never starts with ``x`` or NUL);
* zlib-compressed UTF-8 JSON text (above ``COMPRESS_ABOVE`` bytes; starts with ``x``);
* the *compact* form, for large payloads holding long arrays of numbers (a distance
  matrix, a list of ids): ``MAGIC`` followed by zlib-compressed
  ``u32 index length | index (JSON) | skeleton (UTF-8) | packed arrays``.  The skeleton
  is the JSON text with every such array cut out; the index lists, for each array, the
  character position in the skeleton where it belongs, its item code (``i`` int32,
  ``q`` int64, ``d`` float64, little-endian; ``B``: bytes written as a JSON string of
  their base64, an encoded array of ``payload.arrays``) and its length.  A
  number then takes 4 or 8 bytes before compression instead of its decimal text.

The round trip is exact: ``unpack(pack(text)) == text``.  An array is packed only if
its text is what ``unpack`` writes back (integers in canonical form, floats as Python's
``repr``), otherwise it stays in the skeleton as text.  Strings are skipped by the
scanner, so a string that looks like an array is never touched.  No pickle, no
dialect-specific type: the store keeps bytes.

The compact form's zlib stream is written in independent pieces (``PIECE_BYTES`` of
arrays each), listed in a table before it, so that ``list_join`` can build a parent's
result from its children's stored results by copying their pieces, not decoding them;
the parts of the form it works with (``cut_arrays``, ``read_table``, ``read_compact``,
``fill``…) are public for that.
"""

import base64
import json
import re
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, cast, overload

COMPRESS_ABOVE = 4096
#: Arrays shorter than this stay as text.
MIN_PACKED_ITEMS = 32
#: The compact form as written now: its zlib stream made of independent pieces, listed
#: before it (``_PIECE``), so that a join can copy a child's pieces as they are.
MAGIC = b"\x00XJP2"
#: The compact form as written before (one zlib stream); still read.
MAGIC_V1 = b"\x00XJP1"
_PIECE = struct.Struct("<III")  # a piece's deflated length, raw length, Adler-32


@dataclass(frozen=True)
class Ref:
    """``length`` bytes from ``offset`` of another stored payload, ``origin`` (what it
    is, a child's result files, is its caller's business): a piece a join refers to
    instead of copying it (``list_join``)."""

    origin: object
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class Composite:
    """A stored form as its ``segments`` end to end: bytes of its own, and ``Ref``s to
    bytes of others (``write_pieces`` of pieces that refer to others)."""

    segments: tuple[bytes | Ref, ...]

    def __len__(self) -> int:
        return sum(len(segment) for segment in self.segments)

    def own(self) -> bytes:
        """Its own bytes, end to end."""
        return b"".join(s for s in self.segments if not isinstance(s, Ref))


#: A piece of the compact form's zlib stream as ``deflate_piece`` makes it and
#: ``write_pieces`` writes it: its raw deflate parts, its Adler-32 and its raw length.
Deflated = tuple[list[bytes], int, int]
#: A piece as ``write_pieces`` takes it: a ``Deflated``, or one whose raw deflate parts
#: are another payload's bytes (a ``Ref`` to them, or a view of them).
Piece = tuple[Sequence[bytes | memoryview | Ref], int, int]

# A JSON string (skipped whole), or an array of at least 64 characters of number text.
_SCAN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\[([0-9eE.+\-,]{64,})\]')
#: What every array ``_SCAN`` packs holds: a text without it has none, and is not
#: scanned (one search in C instead of one Python step per string: a child's request of
#: 4 500 locations, 18 000 strings, took 5 ms to find nothing).
_NUMBERS = re.compile(r"\[[0-9eE.+\-,]{64}")
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_SWAP = sys.byteorder != "little"


def _as_array(array_text: str, inner: str) -> array | None:
    """The packed array for an array's text, or None to keep the text (too short, not
    numbers, beyond int64, or a form ``unpack`` would not write back identically)."""
    if inner.count(",") + 1 < MIN_PACKED_ITEMS:
        return None
    try:
        values = json.loads(array_text)
    except ValueError:
        return None
    if any(c in inner for c in ".eE"):
        packed = array("d", values)  # ints among them fail the check below
        return packed if format_array(packed) == array_text else None
    if ",-0," in f",{inner},":  # json.loads reads -0 as 0
        return None
    for code in ("i", "q"):
        try:
            return array(code, values)
        except OverflowError:
            continue
    return None


def flip_byte_order(packed: array) -> array:
    """``packed``, in place, from this host's byte order to the stored one
    (little-endian), or back: nothing to do on a little-endian host."""
    if _SWAP:
        packed.byteswap()
    return packed


def format_array(packed: array) -> str:
    """An array's JSON text, as ``json.dumps`` writes it (bytes: their base64 as a
    JSON string)."""
    if packed.typecode == "B":
        return f'"{base64.b64encode(packed).decode("ascii")}"'
    if packed.typecode in "iq":
        return f"[{integers_text(packed)}]"
    return _ENCODER.encode(packed.tolist())


def integers_text(packed: array) -> str:
    """The items of an array of integers (code ``i`` or ``q``, this host's byte order)
    as JSON numbers joined by commas, as ``json.dumps`` writes them.  orjson writes
    them from a NumPy view of the array's buffer, 10-20× faster than the standard
    encoder, which makes a Python int of each (a 2 000² matrix's 8 million cells: 0.1
    instead of 1.5 s, most of a fetch of its plain form)."""
    import numpy
    import orjson

    values = numpy.frombuffer(packed, dtype=packed.typecode)
    return orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode("ascii")


@overload
def pack(text: str, compress: bool = True) -> bytes: ...
@overload
def pack(text: None, compress: bool = True) -> None: ...
@overload
def pack(text: str | None, compress: bool = True) -> bytes | None: ...
def pack(text: str | None, compress: bool = True) -> bytes | None:
    """JSON text as stored: plain UTF-8 when small, else compact when it holds long
    numeric arrays, else zlib-compressed UTF-8 (``compress``; else plain UTF-8 at any
    size: what is kept briefly and read once, where the compression is the larger
    cost)."""
    if text is None:
        return None
    if len(text) > COMPRESS_ABOVE:
        compact = _pack_compact(text)
        if compact is not None:
            return compact
    data = text.encode("utf-8")
    return zlib.compress(data, 1) if compress and len(data) > COMPRESS_ABOVE else data


def _pack_compact(text: str) -> bytes | None:
    if _NUMBERS.search(text) is None:  # no array that could be packed: no scan
        return None
    skeleton, index, arrays = cut_arrays(text)
    return bytes(cast(bytearray, compose(skeleton, index, arrays))) if index else None


def cut_arrays(text: str) -> tuple[str, list, list[array]]:
    """The skeleton of a text, the index of the arrays cut out of it (positions in the
    skeleton) and those arrays, little-endian."""
    skeleton, index, arrays, last, removed = [], [], [], 0, 0
    for m in _SCAN.finditer(text):
        if m.group(1) is None:
            continue  # a string
        packed = _as_array(m.group(0), m.group(1))
        if packed is None:
            continue
        skeleton.append(text[last : m.start()])
        index.append([m.start() - removed, packed.typecode, len(packed)])
        removed += m.end() - m.start()
        last = m.end()
        arrays.append(flip_byte_order(packed))
    skeleton.append(text[last:])
    return "".join(skeleton), index, arrays


class Written(Protocol):
    """A stored form written elsewhere as it is made: in a worker, a file the main
    process takes over (``engine/spill.py``)."""

    def write(self, at: int, parts: Sequence[bytes | memoryview]) -> None:
        """Write ``parts``, end to end, from byte ``at`` on."""
        ...


class Output(Protocol):
    """Where a stored form is written as it is made (``compose_stored``): in memory
    (``IN_MEMORY``), or, in a worker, a file the main process takes over
    (``engine/spill.py``), so that the form is not copied into one after."""

    def buffer(self, size: int) -> "bytearray | Written":
        """Where the form of exactly ``size`` bytes is written."""
        ...

    def written(self, upto: int) -> None:
        """Its bytes up to ``upto`` are written (a file may start writing them out)."""
        ...


class InMemory:
    """A stored form made in a bytearray."""

    def buffer(self, size: int) -> bytearray:
        return bytearray(size)

    def written(self, upto: int) -> None:
        pass


IN_MEMORY = InMemory()


def compose(
    skeleton: str,
    index: list,
    binaries: Sequence[bytes | memoryview | array],
    into: Output = IN_MEMORY,
) -> bytes | bytearray | Written:
    """The compact form of a skeleton, its index and its arrays' little-endian bytes:
    the index and skeleton one piece, the arrays' bytes pieces of PIECE_BYTES, compressed
    at level 1, or written as they are when that would not halve them
    (``compose_stored``, into a buffer from ``into``)."""
    if level_of(binaries) == 0:
        return compose_stored(skeleton, index, binaries, into)
    pieces = [deflate_piece(index_head(index) + skeleton.encode("utf-8"))]
    pieces += [deflate_piece(piece) for piece in pieces_of(b"".join(binaries))]
    return cast(bytes, write_pieces(pieces))  # (no piece refers to another payload)


def write_pieces(pieces: Sequence[Piece]) -> bytes | Composite:
    """MAGIC, the table of pieces, and a zlib stream of the pieces: zlib's header, the
    raw deflate pieces (each ends on a byte boundary, a sync flush, and refers to no
    other), an empty final block and the Adler-32 of the whole, so that
    zlib.decompress reads the stream as any, and a piece can be read or copied alone.
    A ``Composite`` when pieces are ``Ref``s: those of one origin that follow on there
    are one segment."""
    table = [struct.pack("<I", len(pieces))]
    out: list[bytes | memoryview | Ref] = [b"\x78\x01"]  # the header zlib writes at level 1
    checksum = 1
    for deflated, piece_checksum, length in pieces:
        table.append(_PIECE.pack(sum(len(d) for d in deflated), length, piece_checksum))
        out += deflated
        checksum = _adler32_combine(checksum, piece_checksum, length)
    out += [_FINAL_BLOCK, struct.pack(">I", checksum)]
    if not any(isinstance(part, Ref) for part in out):
        return b"".join([MAGIC, *table, *cast(list[bytes], out)])
    segments: list[bytes | Ref] = [b"".join([MAGIC, *table])]
    for part in out:
        last = segments[-1]
        if isinstance(part, Ref) and isinstance(last, Ref):
            if last.origin is part.origin and last.offset + last.length == part.offset:
                segments[-1] = Ref(last.origin, last.offset, last.length + part.length)
                continue
        elif not isinstance(part, Ref) and not isinstance(last, Ref):
            segments[-1] = last + part
            continue
        segments.append(part if isinstance(part, Ref) else bytes(part))
    return Composite(tuple(segments))


def table_of(
    read: Callable[[int, int], bytes | memoryview],
) -> tuple[list[tuple[int, int, int, int]], int]:
    """The table of a compact form as written now, read through ``read(offset, size)``
    (the blob, or a stored result read by ranges: ``payload.stream``): [(where
    the piece's deflated bytes start, their length, raw length, Adler-32)] and where
    its zlib stream starts."""
    (count,) = struct.unpack("<I", read(len(MAGIC), 4))
    table = read(len(MAGIC) + 4, count * _PIECE.size)
    stream = len(MAGIC) + 4 + count * _PIECE.size
    entries, offset = [], stream + 2  # after zlib's header
    for i in range(count):
        deflated_length, length, checksum = _PIECE.unpack_from(table, i * _PIECE.size)
        entries.append((offset, deflated_length, length, checksum))
        offset += deflated_length
    return entries, stream


def read_table(
    blob: bytes | memoryview,
) -> tuple[list[tuple[bytes | memoryview, int, int]], int]:
    """The pieces of a compact blob as written now: [(deflated, raw length, Adler-32)]
    and where its zlib stream starts.  The pieces are views of the blob, never copies
    (a child's result held as bytes, as a PostgreSQL store reads it, was copied whole
    each time its head was read)."""
    view = memoryview(blob).cast("B")
    entries, stream = table_of(lambda at, size: view[at : at + size])
    pieces: list[tuple[bytes | memoryview, int, int]] = [
        (view[at : at + n], length, checksum) for at, n, length, checksum in entries
    ]
    return pieces, stream


def is_compact(blob: bytes | memoryview) -> bool:
    """Whether a stored payload is in the compact form (either version)."""
    return blob[: len(MAGIC)] in (MAGIC, MAGIC_V1)


def read_head_piece(
    blob: bytes | memoryview,
) -> tuple[str, list, list[tuple[bytes | memoryview, int, int]]]:
    """The skeleton, index and other pieces of a compact blob as written now (MAGIC),
    with only its first piece (index and skeleton) decompressed.  The index is read by
    orjson: ints and item codes, read as ``json.loads`` reads them, 4× sooner (a child's
    3 000 entries, read for its summary and again for its parent's join: 0.8 → 0.2 ms)."""
    import orjson  # (as index_head)

    pieces, _ = read_table(blob)
    head = zlib.decompressobj(-15).decompress(pieces[0][0])
    (head_len,) = struct.unpack_from("<I", head)
    index = orjson.loads(head[4 : 4 + head_len])
    return head[4 + head_len :].decode("utf-8"), index, pieces[1:]


def index_head(index: list) -> bytes:
    """The start of a compact form's first piece: the index's length and the index,
    written by orjson: the very text ``json.dumps`` writes of its ints and ASCII item
    codes, 10× sooner (a 3 000-row matrix's index has 6 000 entries: 12 ms)."""
    import orjson

    head = orjson.dumps(index)
    return struct.pack("<I", len(head)) + head


class TooLarge(Exception):
    """The payload's JSON text is longer than ``unpack`` was asked to write."""


@overload
def unpack(blob: bytes | memoryview, max_bytes: int | None = None) -> str: ...
@overload
def unpack(blob: None, max_bytes: int | None = None) -> None: ...
@overload
def unpack(blob: bytes | memoryview | None, max_bytes: int | None = None) -> str | None: ...
def unpack(blob: bytes | memoryview | None, max_bytes: int | None = None) -> str | None:
    """The JSON text of a stored payload, whichever of the three forms it is in; with
    ``max_bytes``, TooLarge for a longer text, found without writing the text whole
    where the form allows (a batch weighs a 100 MiB result against what its answer may
    still hold: decompressing and decoding it whole held the GIL for 0.2 s)."""
    if blob is None:
        return None
    blob = bytes(blob)
    if is_compact(blob):
        text = _unpack_compact(blob, max_bytes)
    else:
        if blob[:1] == b"x":
            blob = _inflate(blob, max_bytes)
        if max_bytes is not None and len(blob) > max_bytes:
            raise TooLarge()
        text = blob.decode("utf-8")
    if max_bytes is not None and len(text) > max_bytes:
        raise TooLarge()
    return text


def _inflate(blob: bytes, max_bytes: int | None) -> bytes:
    if max_bytes is None:
        return zlib.decompress(blob)
    inflater = zlib.decompressobj()
    out = inflater.decompress(blob, max_bytes + 1)
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise TooLarge()
    return out + inflater.flush()


ITEM_BYTES = {code: array(code).itemsize for code in ("i", "q", "d", "B")}


def _unpack_compact(blob: bytes, max_bytes: int | None = None) -> str:
    skeleton, index, body, offsets = read_compact(blob)
    # each number writes one character at least, and a comma between two (base64 more)
    if max_bytes is not None and len(skeleton) + sum(2 * n - 1 for _, _, n in index) > max_bytes:
        raise TooLarge()
    return fill(
        skeleton,
        (
            (position, array_at(body, offset, code, count))
            for (position, code, count), offset in zip(index, offsets, strict=True)
        ),
    )


def read_compact(blob: bytes | memoryview) -> tuple[str, list, memoryview, list[int]]:
    """A compact blob's skeleton, index, decompressed body and where each array's bytes
    start in it."""
    stream = len(MAGIC_V1) if blob[: len(MAGIC)] == MAGIC_V1 else read_table(blob)[1]
    body = memoryview(zlib.decompress(memoryview(blob)[stream:]))
    (head_len,) = struct.unpack_from("<I", body)
    index = json.loads(bytes(body[4 : 4 + head_len]))
    offsets = array_offsets(index, len(body))
    skeleton = bytes(body[4 + head_len : offsets[0] if offsets else len(body)]).decode("utf-8")
    return skeleton, index, body, offsets


def array_offsets(index: list, length: int) -> list[int]:
    """Where each array of ``index`` starts in a compact form's body of ``length`` bytes
    (the arrays end it, in the index's order; the skeleton ends where the first starts)."""
    offsets, offset = [], length - sum(ITEM_BYTES[code] * count for _, code, count in index)
    for _, code, count in index:
        offsets.append(offset)
        offset += ITEM_BYTES[code] * count
    return offsets


def array_at(body: bytes | memoryview, offset: int, code: str, count: int) -> array:
    """The packed array of ``count`` items of ``code`` stored at ``offset`` of ``body``."""
    packed = array(code)
    packed.frombytes(body[offset : offset + ITEM_BYTES[code] * count])
    return flip_byte_order(packed)


def fill(skeleton: str, arrays: Iterable[tuple[int, array]]) -> str:
    """A skeleton with its arrays, ``(position, array)`` in order, written back in."""
    out, last = [], 0
    for position, packed in arrays:
        out.append(skeleton[last:position])
        out.append(format_array(packed))
        last = position
    out.append(skeleton[last:])
    return "".join(out)


#: The most bytes of arrays in one piece of the compact form (compressed by one thread
#: when a joined payload is compressed in pieces).
PIECE_BYTES = 2 << 20
_FINAL_BLOCK = zlib.compressobj(1, zlib.DEFLATED, -15).flush()


def pieces_of(binary: bytes | memoryview | array) -> list[memoryview]:
    """``binary`` cut into pieces of PIECE_BYTES (the last one shorter)."""
    octets = memoryview(binary).cast("B")
    return [octets[at : at + PIECE_BYTES] for at in range(0, len(octets), PIECE_BYTES)]


#: Bytes of packed arrays tried at level 1 to choose their level (``deflate_level``).
SAMPLE_BYTES = 256 << 10


def deflate_level(binary: bytes | memoryview | array) -> int:
    """1, or 0 (deflate's stored blocks) for packed arrays that level 1 would not halve,
    judged on a sample.  Time first: a distance matrix shrinks by 13 % (points anywhere)
    to 25 % (points in one country) at level 1, and compressing it took twice the
    arithmetic's time (0.5 s at 2 000², against 0.12 s); what compresses well (repeated
    values, small counts) is still compressed."""
    sample = memoryview(binary).cast("B")[:SAMPLE_BYTES]
    if len(sample) < SAMPLE_BYTES:
        return 1
    return 1 if len(zlib.compress(sample, 1)) < len(sample) // 2 else 0


def deflate_piece(piece: bytes | memoryview, level: int = 1) -> Deflated:
    """A piece of a zlib stream (``level``, no header), ending on a byte boundary; its
    Adler-32 and length."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -15)
    return (
        [compressor.compress(piece), compressor.flush(zlib.Z_SYNC_FLUSH)],
        zlib.adler32(piece),
        len(piece),
    )


#: The most bytes deflate's stored block holds.
_STORED_BLOCK = 65535


def level_of(sources: Sequence[bytes | memoryview | array]) -> int:
    """``deflate_level`` of the bytes of ``sources`` end to end (their first sample)."""
    sample, size = [], 0
    for source in sources:
        view = memoryview(source).cast("B")[: SAMPLE_BYTES - size]
        sample.append(view)
        size += len(view)
        if size >= SAMPLE_BYTES:
            break
    return deflate_level(b"".join(sample))


def compose_stored(
    skeleton: str,
    index: list,
    sources: Sequence[bytes | memoryview | array],
    into: Output = IN_MEMORY,
) -> bytearray | Written:
    """The compact form of a skeleton, its index and its arrays' little-endian bytes
    (``sources`` end to end), its arrays' pieces as deflate's stored blocks, written
    straight where ``into`` keeps it (a buffer of its exact size, or a file), a piece at
    a time: each byte of the arrays is copied once (``compose`` joined them, then
    copied each piece into zlib's output, then joined the pieces: a worker held four
    times a 5 000² matrix).  Reads as any compact form."""
    head = deflate_piece(index_head(index) + skeleton.encode("utf-8"))
    head_length = sum(len(d) for d in head[0])
    total = sum(memoryview(s).nbytes for s in sources)
    lengths = [min(PIECE_BYTES, total - at) for at in range(0, total, PIECE_BYTES)]
    count = 1 + len(lengths)
    at = len(MAGIC) + 4 + count * _PIECE.size
    out = into.buffer(
        at
        + 2
        + head_length
        + sum(n + 5 * -(-n // _STORED_BLOCK) for n in lengths)
        + len(_FINAL_BLOCK)
        + 4
    )
    # the magic, the count and the pieces' table: written last, with their checksums
    table = bytearray(at)
    table[: len(MAGIC)] = MAGIC
    struct.pack_into("<I", table, len(MAGIC), count)
    _PIECE.pack_into(table, len(MAGIC) + 4, head_length, head[2], head[1])
    parts: list[bytes | memoryview] = [b"\x78\x01", *head[0]]  # (zlib's header at level 1)
    _put(out, at, parts)
    at += sum(len(part) for part in parts)
    checksum = _adler32_combine(1, head[1], head[2])
    pending = iter(sources)
    current = memoryview(b"")
    for number, length in enumerate(lengths, 1):
        piece_checksum, start, left = 1, at, length
        parts = []
        while left:
            block = min(left, _STORED_BLOCK)
            parts.append(struct.pack("<BHH", 0, block, block ^ 0xFFFF))  # not final, stored
            need = block
            while need:
                if not current:
                    current = memoryview(next(pending)).cast("B")
                taken = current[:need]
                parts.append(taken)
                piece_checksum = zlib.adler32(taken, piece_checksum)
                current = current[len(taken) :]
                need -= len(taken)
            at += 5 + block
            left -= block
        _put(out, start, parts)
        _PIECE.pack_into(
            table, len(MAGIC) + 4 + number * _PIECE.size, at - start, length, piece_checksum
        )
        checksum = _adler32_combine(checksum, piece_checksum, length)
        into.written(at)
    _put(out, at, [_FINAL_BLOCK, struct.pack(">I", checksum)])
    _put(out, 0, [memoryview(table)])
    return out


def _put(out: bytearray | Written, at: int, parts: Sequence[bytes | memoryview]) -> None:
    """Write ``parts``, end to end, into ``out`` from byte ``at`` on."""
    if not isinstance(out, bytearray):
        out.write(at, parts)
        return
    view = memoryview(out)
    for part in parts:
        view[at : at + len(part)] = part
        at += len(part)


def _adler32_combine(first: int, second: int, second_length: int) -> int:
    """The Adler-32 of two byte strings end to end, from theirs (zlib's adler32_combine)."""
    base = 65521
    a = (first & 0xFFFF) + (second & 0xFFFF) - 1
    b = (first >> 16) + (second >> 16) + second_length * ((first & 0xFFFF) - 1)
    return (b % base) << 16 | (a % base)

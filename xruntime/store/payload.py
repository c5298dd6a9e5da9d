"""How the store keeps a JSON payload (request, result, fault, progress) as bytes.

Three stored forms, told apart by their first byte:

* plain UTF-8 JSON text (small payloads; JSON never starts with ``x`` or NUL);
* zlib-compressed UTF-8 JSON text (above ``COMPRESS_ABOVE`` bytes; starts with ``x``);
* the *compact* form, for large payloads holding long arrays of numbers (a distance
  matrix, a list of ids): ``MAGIC`` followed by zlib-compressed
  ``u32 index length | index (JSON) | skeleton (UTF-8) | packed arrays``.  The skeleton
  is the JSON text with every such array cut out; the index lists, for each array, the
  character position in the skeleton where it belongs, its item code (``i`` int32,
  ``q`` int64, ``d`` float64, little-endian) and its length.  A number then takes 4 or
  8 bytes before compression instead of its decimal text.

The round trip is exact: ``unpack(pack(text)) == text``.  An array is packed only if
its text is what ``unpack`` writes back (integers in canonical form, floats as Python's
``repr``), otherwise it stays in the skeleton as text.  Strings are skipped by the
scanner, so a string that looks like an array is never touched.  No pickle, no
dialect-specific type: the store keeps bytes.

``join_lists`` assembles a parent job's result from its children's stored results (their
lists end to end) on the stored forms, and ``without_list`` reads a child's small part
without its list: decoding a large compact payload to text is the slow path.
"""
import json
import os
import re
import struct
import sys
import zlib
from array import array
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

COMPRESS_ABOVE = 4096
#: Arrays shorter than this stay as text.
MIN_PACKED_ITEMS = 32
#: The compact form as written now: its zlib stream made of independent pieces, listed
#: before it (``_PIECE``), so that a join can copy a child's pieces as they are.
MAGIC = b"\x00XJP2"
#: The compact form as written before (one zlib stream); still read.
MAGIC_V1 = b"\x00XJP1"
_PIECE = struct.Struct("<III")          # a piece's deflated length, raw length, Adler-32

# A JSON string (skipped whole), or an array of at least 64 characters of number text.
_SCAN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\[([0-9eE.+\-,]{64,})\]')
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_SWAP = sys.byteorder != "little"


def _as_array(array_text: str, inner: str) -> Optional[array]:
    """The packed array for an array's text, or None to keep the text (too short, not
    numbers, beyond int64, or a form ``unpack`` would not write back identically)."""
    if inner.count(",") + 1 < MIN_PACKED_ITEMS:
        return None
    try:
        values = json.loads(array_text)
    except ValueError:
        return None
    if any(c in inner for c in ".eE"):
        packed = array("d", values)                 # ints among them fail the check below
        return packed if _format(packed) == array_text else None
    if ",-0," in f",{inner},":                     # json.loads reads -0 as 0
        return None
    for code in ("i", "q"):
        try:
            return array(code, values)
        except OverflowError:
            continue
    return None


def _format(packed: array) -> str:
    """An array's JSON text, as ``json.dumps`` writes it."""
    return _ENCODER.encode(packed.tolist())


def pack(text: Optional[str]) -> Optional[bytes]:
    """JSON text as stored: plain UTF-8 when small, else compact when it holds long
    numeric arrays, else zlib-compressed UTF-8."""
    if text is None:
        return None
    if len(text) > COMPRESS_ABOVE:
        compact = _pack_compact(text)
        if compact is not None:
            return compact
    data = text.encode("utf-8")
    return zlib.compress(data, 1) if len(data) > COMPRESS_ABOVE else data


def _pack_compact(text: str) -> Optional[bytes]:
    skeleton, index, arrays = _cut_arrays(text)
    return _compose(skeleton, index, arrays) if index else None


def _cut_arrays(text: str):
    """The skeleton of a text, the index of the arrays cut out of it (positions in the
    skeleton) and those arrays, little-endian."""
    skeleton, index, arrays, last, removed = [], [], [], 0, 0
    for m in _SCAN.finditer(text):
        if m.group(1) is None:
            continue                                # a string
        packed = _as_array(m.group(0), m.group(1))
        if packed is None:
            continue
        skeleton.append(text[last:m.start()])
        index.append([m.start() - removed, packed.typecode, len(packed)])
        removed += m.end() - m.start()
        last = m.end()
        if _SWAP:
            packed.byteswap()
        arrays.append(packed)
    skeleton.append(text[last:])
    return "".join(skeleton), index, arrays


def _compose(skeleton: str, index, binaries) -> bytes:
    """The compact form of a skeleton, its index and its arrays' little-endian bytes:
    the index and skeleton one piece, the arrays' bytes pieces of PIECE_BYTES."""
    pieces = [_deflate_piece(_index_head(index) + skeleton.encode("utf-8"))]
    pieces += [_deflate_piece(piece) for piece in _pieces(b"".join(binaries))]
    return _write_pieces(pieces)


def _write_pieces(pieces) -> bytes:
    """MAGIC, the table of pieces, and a zlib stream of the pieces: zlib's header, the
    raw deflate pieces (each ends on a byte boundary, a sync flush, and refers to no
    other), an empty final block and the Adler-32 of the whole, so that
    zlib.decompress reads the stream as any, and a piece can be read or copied alone."""
    table = [struct.pack("<I", len(pieces))]
    out, checksum = [b"\x78\x01"], 1              # the header zlib writes at level 1
    for deflated, piece_checksum, length in pieces:
        table.append(_PIECE.pack(sum(len(d) for d in deflated), length, piece_checksum))
        out += deflated
        checksum = _adler32_combine(checksum, piece_checksum, length)
    out += [_FINAL_BLOCK, struct.pack(">I", checksum)]
    return b"".join([MAGIC] + table + out)


def _read_table(blob) -> tuple:
    """The pieces of a compact blob as written now: [(deflated, raw length, Adler-32)]
    and where its zlib stream starts."""
    (count,) = struct.unpack_from("<I", blob, len(MAGIC))
    at = len(MAGIC) + 4
    table = [_PIECE.unpack_from(blob, at + i * _PIECE.size) for i in range(count)]
    stream = at + count * _PIECE.size
    pieces, offset = [], stream + 2                # after zlib's header
    for deflated_length, length, checksum in table:
        pieces.append((blob[offset:offset + deflated_length], length, checksum))
        offset += deflated_length
    return pieces, stream


def _is_compact(blob) -> bool:
    return blob[:len(MAGIC)] in (MAGIC, MAGIC_V1)


def _index_head(index) -> bytes:
    head = json.dumps(index, separators=(",", ":")).encode("ascii")
    return struct.pack("<I", len(head)) + head


class TooLarge(Exception):
    """The payload's JSON text is longer than ``unpack`` was asked to write."""


def unpack(blob, max_bytes: Optional[int] = None) -> Optional[str]:
    """The JSON text of a stored payload, whichever of the three forms it is in; with
    ``max_bytes``, TooLarge for a longer text, found without writing the text whole
    where the form allows (a batch weighs a 100 MiB result against what its answer may
    still hold: decompressing and decoding it whole held the GIL for 0.2 s)."""
    if blob is None:
        return None
    blob = bytes(blob)
    if _is_compact(blob):
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


def _inflate(blob: bytes, max_bytes: Optional[int]) -> bytes:
    if max_bytes is None:
        return zlib.decompress(blob)
    inflater = zlib.decompressobj()
    out = inflater.decompress(blob, max_bytes + 1)
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise TooLarge()
    return out + inflater.flush()


_SIZES = {code: array(code).itemsize for code in ("i", "q", "d")}


def _unpack_compact(blob: bytes, max_bytes: Optional[int] = None) -> str:
    skeleton, index, body, offsets = _read_compact(blob)
    # each number writes one character at least, and a comma between two
    if max_bytes is not None and len(skeleton) + sum(2 * n - 1 for _, _, n in index) > max_bytes:
        raise TooLarge()
    return _fill(skeleton, ((position, _array_at(body, offset, code, count))
                            for (position, code, count), offset in zip(index, offsets)))


def _read_compact(blob: bytes):
    """A compact blob's skeleton, index, decompressed body and where each array's bytes
    start in it."""
    stream = len(MAGIC_V1) if blob[:len(MAGIC)] == MAGIC_V1 else _read_table(blob)[1]
    body = memoryview(zlib.decompress(memoryview(blob)[stream:]))
    (head_len,) = struct.unpack_from("<I", body)
    index = json.loads(bytes(body[4:4 + head_len]))
    binary = sum(_SIZES[code] * count for _, code, count in index)
    skeleton = bytes(body[4 + head_len:len(body) - binary]).decode("utf-8")
    offsets, offset = [], len(body) - binary
    for _, code, count in index:
        offsets.append(offset)
        offset += _SIZES[code] * count
    return skeleton, index, body, offsets


def _array_at(body, offset: int, code: str, count: int) -> array:
    packed = array(code)
    packed.frombytes(body[offset:offset + _SIZES[code] * count])
    if _SWAP:
        packed.byteswap()
    return packed


def _fill(skeleton: str, arrays) -> str:
    """A skeleton with its arrays, ``(position, array)`` in order, written back in."""
    out, last = [], 0
    for position, packed in arrays:
        out.append(skeleton[last:position])
        out.append(_format(packed))
        last = position
    out.append(skeleton[last:])
    return "".join(out)


# ------------------------------------------------ assembling a list from stored payloads
#
# A parent job's result is its children's lists end to end.  Decoding a large compact
# payload to text and packing the whole again is the slow path (seconds for a 2000 x 2000
# matrix), so the list is cut out of each child's skeleton, arrays and all, and the
# pieces are compressed again as they are.

# A JSON string (a member's key when a colon follows), or a bracket or brace.
_TOKEN = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")(\s*:\s*)?|[\[\]{}]')


def _member_span(text: str, field: str, holes=()) -> Optional[tuple]:
    """Where the top-level member ``field`` of an object's text (or skeleton, whose
    array ``holes`` are positions) has its list: ``(start, end)`` of ``[...]``, or
    ``(p, p)`` when the list is the packed array at ``p``.  None when absent."""
    if not text.lstrip().startswith("{"):
        raise ValueError("not a JSON object")
    depth, tokens = 0, _TOKEN.finditer(text)
    for m in tokens:
        depth += _NESTING.get(text[m.start()], 0)
        if depth == 0:
            return None
        if depth == 1 and m.group(2) and json.loads(m.group(1)) == field:
            start = m.end()
            if start in holes and text[start:start + 1] != "[":
                return start, start
            if text[start:start + 1] != "[":
                raise ValueError(f"member {field!r} is not a list")
            depth = 0
            for m in tokens:
                depth += _NESTING.get(text[m.start()], 0)
                if depth == 0:
                    return start, m.end()
            break
    raise ValueError("unbalanced JSON text")


_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


class _Items:
    """The items of one child's list: skeleton text with the index and little-endian
    bytes of its arrays, or (``numbers`` set) one packed array of numbers.  ``deflating``:
    those bytes already being compressed, in pieces."""
    __slots__ = ("text", "index", "binary", "numbers", "deflating")

    def __init__(self, text="", index=(), binary=b"", numbers=None):
        self.text, self.index, self.binary, self.numbers = text, index, binary, numbers
        self.deflating = None

    def as_text(self) -> "_Items":
        """The items of a packed array as their text, to join with other items."""
        if self.numbers is None:
            return self
        _, code, count = self.index[0]
        return _Items(_format(_array_at(self.binary, 0, code, count))[1:-1])


class _Copied:
    """A piece copied as it is, answering as a deflating piece does."""
    __slots__ = ("piece",)

    def __init__(self, deflated, length, checksum):
        self.piece = ([deflated], checksum, length)

    def result(self):
        return self.piece


def _head_piece(blob):
    """The skeleton, index and other pieces of a compact blob as written now, with only
    its first piece (index and skeleton) decompressed."""
    pieces, _ = _read_table(blob)
    head = zlib.decompressobj(-15).decompress(pieces[0][0])
    (head_len,) = struct.unpack_from("<I", head)
    index = json.loads(head[4:4 + head_len])
    return head[4 + head_len:].decode("utf-8"), index, pieces[1:]


def _list_items(blob, field: str) -> _Items:
    """The items of a stored payload's top-level list ``field``, not decoded; when the
    list holds every packed array of the payload (a child's rows), its compressed
    pieces are copied as they are, not even decompressed."""
    blob = bytes(blob)
    if blob[:len(MAGIC)] == MAGIC:
        skeleton, index, pieces = _head_piece(blob)
        positions = [position for position, _, _ in index]
        span = _member_span(skeleton, field, set(positions))
        if span is None:
            return _Items()
        start, end = span
        large = sum(length for _, length, _ in pieces) >= PIECE_BYTES   # never stored as text
        if large and start != end and start < positions[0] and positions[-1] < end:
            items = _Items(skeleton[start + 1:end - 1],
                           [[position - start - 1, code, count] for position, code, count in index])
            items.deflating = [_Copied(*piece) for piece in pieces]
            return items
    if not _is_compact(blob):
        text = unpack(blob)
        span = _member_span(text, field)
        if span is None:
            return _Items()
        skeleton, index, arrays = _cut_arrays(text[span[0] + 1:span[1] - 1])
        return _Items(skeleton, index, b"".join(a.tobytes() for a in arrays))
    skeleton, index, body, offsets = _read_compact(blob)
    positions = [position for position, _, _ in index]
    span = _member_span(skeleton, field, set(positions))
    if span is None:
        return _Items()
    start, end = span
    if start == end:                                # the list is one packed array
        i = bisect_left(positions, start)
        _, code, count = index[i]
        return _Items("", [[0, code, count]],
                      body[offsets[i]:offsets[i] + _SIZES[code] * count], code)
    first, last = bisect_right(positions, start), bisect_right(positions, end - 1)
    inside = [[position - start - 1, code, count]
              for position, code, count in index[first:last]]
    binary = body[offsets[first]:offsets[last - 1] + _SIZES[inside[-1][1]] * inside[-1][2]] \
        if inside else b""
    return _Items(skeleton[start + 1:end - 1], inside, binary)


def _joined_numbers(items) -> Optional[_Items]:
    """One packed array for lists that each are one, when they share a kind (ints of
    both widths widen to int64)."""
    codes = {part.numbers for part in items}
    if None in codes or not codes or ("d" in codes and len(codes) > 1):
        return None
    code = codes.pop() if len(codes) == 1 else "q"
    binary, count = [], 0
    for part in items:
        _, part_code, part_count = part.index[0]
        if part_code == code:
            binary.append(part.binary)
        else:
            wide = array(code, _array_at(part.binary, 0, part_code, part_count))
            if _SWAP:
                wide.byteswap()
            binary.append(wide)
        count += part_count
    return _Items("", [[0, code, count]], b"".join(binary), code)


def join_lists(outer: str, field: str, parts) -> bytes:
    """The stored form of ``outer`` (compact JSON text of an object holding the member
    ``"<field>":[]``) with that list filled with the items of each stored part's own
    top-level list ``field``, in order: what one job producing the whole list would have
    stored, assembled without decoding the parts' packed arrays."""
    span = _member_span(outer, field)
    if span is None or outer[span[0]:span[1]] != "[]":
        raise ValueError(f"outer has no top-level member {field!r} that is []")
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        reading = [pool.submit(_list_items, blob, field) for blob in parts]
        items = []
        for future in reading:
            part = future.result()
            if part.text or part.index:
                if part.numbers is None and part.index and part.deflating is None:
                    # its bytes go out as they are
                    part.deflating = [pool.submit(_deflate_piece, piece)
                                      for piece in _pieces(part.binary)]
                items.append(part)
        return _joined(outer, span[0], items, pool)


def _joined(outer: str, start: int, items, pool) -> bytes:
    """``outer`` with the items at ``start`` (its ``[]``), their packed arrays kept."""
    numbers = _joined_numbers(items)
    pieces = []                                     # (skeleton text, index, binaries)
    if numbers is not None:                         # the list is itself one packed array
        pieces += [_cut_arrays(outer[:start]), (numbers.text, numbers.index, [numbers]),
                   _cut_arrays(outer[start + 2:])]
    else:
        pieces.append(_cut_arrays(outer[:start + 1]))
        for i, part in enumerate(items):
            part = part.as_text()
            pieces.append(("," if i else "", (), ()))
            pieces.append((part.text, part.index, [part]))
        pieces.append(_cut_arrays(outer[start + 1:]))
    skeleton, index, binaries, length = [], [], [], 0
    for text, part_index, part_binaries in pieces:
        index += [[position + length, code, count] for position, code, count in part_index]
        skeleton.append(text)
        binaries += part_binaries
        length += len(text)
    skeleton = "".join(skeleton)
    shortest = len(skeleton) + sum(2 * count + 1 for _, _, count in index)
    if not index or shortest <= COMPRESS_ABOVE:     # nothing packed, or small: as pack does
        body = b"".join(bytes(_bytes_of(binary)) for binary in binaries)
        offsets, offset = [], 0
        for _, code, count in index:
            offsets.append(offset)
            offset += _SIZES[code] * count
        return pack(_fill(skeleton, [(position, _array_at(body, offset, code, count))
                                     for (position, code, count), offset
                                     in zip(index, offsets)]))
    # Compressed in pieces at once, as pigz does (zlib releases the GIL, and compressing
    # tens of megabytes on one core is most of a join's time): raw deflate pieces that
    # each end on a byte boundary (a sync flush), an empty final block, and zlib's
    # header and Adler-32 of the whole around them.  zlib.decompress reads it as any.
    deflating = [pool.submit(_deflate_piece, _index_head(index) + skeleton.encode("utf-8"))]
    for binary in binaries:
        if isinstance(binary, _Items) and binary.deflating is not None:
            deflating += binary.deflating
        else:
            deflating += [pool.submit(_deflate_piece, piece)
                          for piece in _pieces(_bytes_of(binary))]
    return _write_pieces([future.result() for future in deflating])


def _bytes_of(binary):
    return binary.binary if isinstance(binary, _Items) else binary


#: Bytes compressed by one thread when a joined payload is compressed in pieces.
PIECE_BYTES = 2 << 20
_FINAL_BLOCK = zlib.compressobj(1, zlib.DEFLATED, -15).flush()


def _pieces(binary):
    binary = memoryview(binary).cast("B")
    return [binary[at:at + PIECE_BYTES] for at in range(0, len(binary), PIECE_BYTES)]


def _deflate_piece(piece):
    """A piece of a zlib stream (level 1, no header), ending on a byte boundary; its
    Adler-32 and length."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    return ([compressor.compress(piece), compressor.flush(zlib.Z_SYNC_FLUSH)],
            zlib.adler32(piece), len(piece))


def _adler32_combine(first: int, second: int, second_length: int) -> int:
    """The Adler-32 of two byte strings end to end, from theirs (zlib's adler32_combine)."""
    base = 65521
    a = (first & 0xFFFF) + (second & 0xFFFF) - 1
    b = (first >> 16) + (second >> 16) + second_length * ((first & 0xFFFF) - 1)
    return (b % base) << 16 | (a % base)


def without_list(blob, field: str) -> str:
    """The JSON text of a stored payload with its top-level list ``field`` emptied: a
    child's summary, read without formatting its large list."""
    blob = bytes(blob)
    if not _is_compact(blob):
        text = unpack(blob)
        span = _member_span(text, field)
        return text if span is None else text[:span[0] + 1] + text[span[1] - 1:]
    if blob[:len(MAGIC)] == MAGIC:                  # every array in the list: one piece read
        skeleton, index, _ = _head_piece(blob)
        positions = [position for position, _, _ in index]
        span = _member_span(skeleton, field, set(positions))
        if span is not None and span[0] != span[1] and index \
                and span[0] < positions[0] and positions[-1] < span[1]:
            return skeleton[:span[0] + 1] + skeleton[span[1] - 1:]
    skeleton, index, body, offsets = _read_compact(blob)
    span = _member_span(skeleton, field, {position for position, _, _ in index})
    arrays = [(position, offset, code, count)
              for (position, code, count), offset in zip(index, offsets)]
    if span is None:
        return _fill(skeleton, [(position, _array_at(body, offset, code, count))
                                for position, offset, code, count in arrays])
    start, end = span
    if start == end:                                # the list is the packed array at start
        skeleton = skeleton[:start] + "[]" + skeleton[start:]
        dropped, shift = range(start, start + 1), 2
    else:
        skeleton = skeleton[:start + 1] + skeleton[end - 1:]
        dropped, shift = range(start + 1, end), start + 2 - end
    return _fill(skeleton, [(position + shift if position >= dropped.stop else position,
                             _array_at(body, offset, code, count))
                            for position, offset, code, count in arrays
                            if position not in dropped])

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
"""
import json
import re
import struct
import sys
import zlib
from array import array
from typing import Optional

COMPRESS_ABOVE = 4096
#: Arrays shorter than this stay as text.
MIN_PACKED_ITEMS = 32
MAGIC = b"\x00XJP1"

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
    if not index:
        return None
    skeleton.append(text[last:])
    head = json.dumps(index, separators=(",", ":")).encode("ascii")
    compressor = zlib.compressobj(1)
    parts = [MAGIC, compressor.compress(struct.pack("<I", len(head)) + head),
             compressor.compress("".join(skeleton).encode("utf-8"))]
    for packed in arrays:
        parts.append(compressor.compress(packed))
    parts.append(compressor.flush())
    return b"".join(parts)


def unpack(blob) -> Optional[str]:
    """The JSON text of a stored payload, whichever of the three forms it is in."""
    if blob is None:
        return None
    blob = bytes(blob)
    if blob[:len(MAGIC)] == MAGIC:
        return _unpack_compact(blob)
    if blob[:1] == b"x":
        blob = zlib.decompress(blob)
    return blob.decode("utf-8")


def _unpack_compact(blob: bytes) -> str:
    body = memoryview(zlib.decompress(blob[len(MAGIC):]))
    (head_len,) = struct.unpack_from("<I", body)
    index = json.loads(bytes(body[4:4 + head_len]))
    offset = 4 + head_len
    sizes = {code: array(code).itemsize for code in ("i", "q", "d")}
    binary = sum(sizes[code] * count for _, code, count in index)
    skeleton = bytes(body[offset:len(body) - binary]).decode("utf-8")
    offset = len(body) - binary
    out, last = [], 0
    for position, code, count in index:
        packed = array(code)
        end = offset + sizes[code] * count
        packed.frombytes(body[offset:end])
        offset = end
        if _SWAP:
            packed.byteswap()
        out.append(skeleton[last:position])
        out.append(_format(packed))
        last = position
    out.append(skeleton[last:])
    del body
    return "".join(out)

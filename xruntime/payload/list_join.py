"""A parent job's result from its children's stored results, without decoding them.

A parent that splits its work into child jobs (docs/protocol.md §13) answers their lists
end to end: ``join_lists`` assembles that result, and ``without_list`` reads a child's
small part (its summary) without its list.  Decoding a large compact payload to text and
packing the whole again is the slow path (seconds for a 2000 x 2000 matrix), so this
works on the stored forms (``form``): the list is cut out of each child's skeleton,
arrays and all, and the pieces are compressed again as they are, or copied when a
child's list holds its every array.  The result reads back exactly as the text one job
producing the whole list would have stored.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from . import form

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

# A JSON string (a member's key when a colon follows), or a bracket or brace.
_TOKEN = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")(\s*:\s*)?|[\[\]{}]')


def member_span(
    text: str, field: str, holes: Collection[int] = (), opening: str = "["
) -> tuple[int, int] | None:
    """Where the top-level member ``field`` of an object's text (or skeleton, whose
    array ``holes`` are positions) has its list: ``(start, end)`` of ``[...]``, or
    ``(p, p)`` when the list is the packed array at ``p``.  None when absent.  With
    ``opening`` ``{``: where it has its object; ``[{``: its list or object."""
    if not text.lstrip().startswith("{"):
        raise ValueError("not a JSON object")
    depth, tokens = 0, _TOKEN.finditer(text)
    for m in tokens:
        depth += _NESTING.get(text[m.start()], 0)
        if depth == 0:
            return None
        if depth == 1 and m.group(2) and json.loads(m.group(1)) == field:
            start = m.end()
            opens = start < len(text) and text[start] in opening
            if start in holes and not opens:
                return start, start
            if not opens:
                raise ValueError(f"member {field!r} is not {_WHAT[opening]}")
            closing = _closing(text, start)
            if closing is not None:
                return start, closing
            depth = 0
            for m in tokens:
                depth += _NESTING.get(text[m.start()], 0)
                if depth == 0:
                    return start, m.end()
            break
    raise ValueError("unbalanced JSON text")


#: Texts shorter than this are scanned token by token (``_closing`` costs more there).
_SCANNED_BELOW = 16 * 1024


def _closing(text: str, start: int) -> int | None:
    """Where the list or object opened at ``start`` ends (after its bracket), found in
    NumPy's passes over the characters rather than one Python step per token (a
    matrix's skeleton holds one object per row: 10 ms for 3 000 rows, paid by each read
    of a child's rows or summary); None where the token scan decides: a short text, one
    with a backslash (an escaped quote is not a string's end), an unbalanced one."""
    if len(text) - start < _SCANNED_BELOW or "\\" in text:
        return None
    import numpy as np  # (as form.integers_text: loaded where a large text is scanned)

    codes = np.frombuffer(text[start:].encode("utf-32-le"), dtype="<u4")  # one per character
    in_string = np.cumsum(codes == ord('"')) % 2 == 1  # (a bracket is never a quote)
    step = (codes == ord("[")).astype(np.int8) + (codes == ord("{"))
    step -= (codes == ord("]")).astype(np.int8) + (codes == ord("}"))
    step[in_string] = 0
    ends = np.flatnonzero(np.cumsum(step, dtype=np.int64) == 0)
    return start + int(ends[0]) + 1 if len(ends) else None


_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
_WHAT = {"[": "a list", "{": "an object", "[{": "a list or an object"}


class _Items:
    """The items of one child's list: skeleton text with the index and little-endian
    bytes of its arrays, or (``numbers`` set) one packed array of numbers.  ``deflating``:
    those bytes already being compressed, in pieces."""

    __slots__ = ("text", "index", "binary", "numbers", "deflating")

    def __init__(
        self,
        text: str = "",
        index: Sequence[list] = (),
        binary: bytes | memoryview | list[memoryview] = b"",
        numbers: str | None = None,
    ) -> None:
        self.text, self.index, self.binary, self.numbers = text, index, binary, numbers
        self.deflating: list[Future[form.Deflated] | _Copied] | None = None

    def joined(self) -> bytes | memoryview:
        """Its packed arrays' bytes in one buffer."""
        return b"".join(self.binary) if isinstance(self.binary, list) else self.binary

    def as_text(self) -> _Items:
        """The items of a packed array as their text, to join with other items."""
        if self.numbers is None:
            return self
        _, code, count = self.index[0]
        return _Items(form.format_array(form.array_at(self.joined(), 0, code, count))[1:-1])


class _Copied:
    """A piece copied as it is (or referred to: ``form.Ref``), answering as a
    deflating piece does."""

    __slots__ = ("piece",)

    def __init__(self, deflated: bytes | memoryview | form.Ref, length: int, checksum: int) -> None:
        self.piece: form.Piece = ([deflated], checksum, length)

    def result(self) -> form.Piece:
        return self.piece


def _list_items(blob: bytes | memoryview, field: str, origin: object = None) -> _Items:
    """The items of a stored payload's top-level list ``field``, not decoded; when the
    list holds every packed array of the payload (a child's rows), its compressed
    pieces are copied as they are, not even decompressed, or, given the payload's
    ``origin``, referred to there (``form.Ref``), not copied at all."""
    if not isinstance(blob, bytes):
        blob = memoryview(blob).cast("B")  # (a mapped file: read where needed, not copied)
    if blob[: len(form.MAGIC)] == form.MAGIC:
        skeleton, index, pieces = form.read_head_piece(blob)
        positions = [position for position, _, _ in index]
        span = member_span(skeleton, field, set(positions))
        if span is None:
            return _Items()
        start, end = span
        large = sum(length for _, length, _ in pieces) >= form.PIECE_BYTES  # never stored as text
        if large and start != end and start < positions[0] and positions[-1] < end:
            items = _Items(
                skeleton[start + 1 : end - 1],
                [[position - start - 1, code, count] for position, code, count in index],
            )
            if origin is None:
                items.deflating = [_Copied(*piece) for piece in pieces]
            else:
                entries = form.table_of(lambda at, size: bytes(blob[at : at + size]))[0][1:]
                items.deflating = [
                    _Copied(form.Ref(origin, at, n), length, checksum)
                    for at, n, length, checksum in entries
                ]
            return items
    blob = bytes(blob)
    if not form.is_compact(blob):
        text = form.unpack(blob)
        span = member_span(text, field)
        if span is None:
            return _Items()
        skeleton, index, arrays = form.cut_arrays(text[span[0] + 1 : span[1] - 1])
        return _Items(skeleton, index, b"".join(a.tobytes() for a in arrays))
    skeleton, index, body, offsets = form.read_compact(blob)
    positions = [position for position, _, _ in index]
    span = member_span(skeleton, field, set(positions))
    if span is None:
        return _Items()
    start, end = span
    if start == end:  # the list is one packed array
        i = bisect_left(positions, start)
        _, code, count = index[i]
        return _Items(
            "",
            [[0, code, count]],
            body[offsets[i] : offsets[i] + form.ITEM_BYTES[code] * count],
            code,
        )
    first, last = bisect_right(positions, start), bisect_right(positions, end - 1)
    inside = [[position - start - 1, code, count] for position, code, count in index[first:last]]
    binary = (
        body[offsets[first] : offsets[last - 1] + form.ITEM_BYTES[inside[-1][1]] * inside[-1][2]]
        if inside
        else b""
    )
    return _Items(skeleton[start + 1 : end - 1], inside, binary)


def _joined_numbers(items: Sequence[_Items]) -> _Items | None:
    """One packed array for lists that each are one, when they share a kind (ints of
    both widths widen to int64)."""
    codes = {part.numbers for part in items}
    if None in codes or not codes or ("d" in codes and len(codes) > 1):
        return None
    code = cast(str, codes.pop()) if len(codes) == 1 else "q"  # (None is not among them)
    binary: list[bytes | memoryview | array] = []
    count = 0
    for part in items:
        _, part_code, part_count = part.index[0]
        if part_code == code:
            binary.append(part.joined())
        else:
            binary.append(
                form.flip_byte_order(
                    array(code, form.array_at(part.joined(), 0, part_code, part_count))
                )
            )
        count += part_count
    return _Items("", [[0, code, count]], b"".join(binary), code)


def join_lists(
    outer: str,
    field: str,
    parts: Iterable[bytes | memoryview],
    origins: Sequence[object] | None = None,
) -> bytes | bytearray | form.Written | form.Composite:
    """The stored form of ``outer`` (compact JSON text of an object holding the member
    ``"<field>":[]``) with that list filled with the items of each stored part's own
    top-level list ``field``, in order: what one job producing the whole list would have
    stored, assembled without decoding the parts' packed arrays.  ``origins``: each
    part's, when it has one (a child's result files), or None: a part's pieces taken
    whole are then referred to there (``form.Ref``) and the form is a
    ``form.Composite``."""
    span = member_span(outer, field)
    if span is None or outer[span[0] : span[1]] != "[]":
        raise ValueError(f"outer has no top-level member {field!r} that is []")
    # imported here: a worker process imports this module to join its children's
    # lists, which most never do (concurrent.futures: 0.5 MB of each worker process)
    from concurrent.futures import ThreadPoolExecutor

    referred = origins is not None and all(origin is not None for origin in origins)
    with _Inline() if referred else ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        reading = [
            pool.submit(_list_items, blob, field, origins[i] if origins else None)
            for i, blob in enumerate(parts)
        ]
        items = []
        for future in reading:
            part = future.result()
            if part.text or part.index:
                if part.numbers is None and part.index and part.deflating is None:
                    # its bytes go out as they are
                    level = form.deflate_level(part.joined())
                    part.deflating = [
                        pool.submit(form.deflate_piece, piece, level)
                        for piece in form.pieces_of(part.joined())
                    ]
                items.append(part)
        return _joined(outer, span[0], items, pool)


class _Inline:
    """An executor that runs each task at once, in its caller's thread: for a join whose
    parts all have an origin, that has little to do but read their heads (its parts'
    pieces are referred to, not compressed), where starting threads took longer than
    the work (10 ms each on a busy machine)."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, task: Callable[..., Any], *args: Any) -> Future:
        from concurrent.futures import Future

        done: Future = Future()
        done.set_result(task(*args))
        return done


def fill_list(
    outer: str,
    field: str,
    text: str,
    index: Sequence[list],
    binary: bytes | memoryview | list[memoryview],
    into: form.Output = form.IN_MEMORY,
) -> bytes | bytearray | form.Written:
    """The stored form of ``outer`` (as for ``join_lists``) with its list ``field`` holding
    items given in the store's form: their skeleton ``text`` (items joined by commas,
    without the brackets), the ``index`` of their packed arrays (positions in ``text``)
    and those arrays' little-endian bytes, in order (or the buffers that hold them, end to
    end: a matrix's rows are never joined into one buffer).  For a result made of numeric arrays
    (``arrays``): no array is formatted as text, scanned or parsed.
    Uncompressed, it is written into a buffer from ``into`` (``form.compose_stored``)."""
    span = member_span(outer, field)
    if span is None or outer[span[0] : span[1]] != "[]":
        raise ValueError(f"outer has no top-level member {field!r} that is []")
    from concurrent.futures import ThreadPoolExecutor  # as in join_lists

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        joined = _joined(outer, span[0], [_Items(text, index, binary)], pool, into)
        assert not isinstance(joined, form.Composite)  # (no item refers to another payload)
        return joined


def _joined(
    outer: str,
    start: int,
    items: list[_Items],
    pool: Executor | _Inline,
    into: form.Output = form.IN_MEMORY,
) -> bytes | bytearray | form.Written | form.Composite:
    """``outer`` with the items at ``start`` (its ``[]``), their packed arrays kept."""
    numbers = _joined_numbers(items)
    # (skeleton text, index, binaries: packed arrays, or items whose bytes are kept)
    pieces: list[tuple[str, Sequence[list], Sequence[array | _Items]]] = []
    if numbers is not None:  # the list is itself one packed array
        pieces += [
            form.cut_arrays(outer[:start]),
            (numbers.text, numbers.index, [numbers]),
            form.cut_arrays(outer[start + 2 :]),
        ]
    else:
        pieces.append(form.cut_arrays(outer[: start + 1]))
        for i, part in enumerate(items):
            part = part.as_text()
            pieces.append(("," if i else "", (), ()))
            pieces.append((part.text, part.index, [part]))
        pieces.append(form.cut_arrays(outer[start + 1 :]))
    texts: list[str] = []
    index: list[list] = []
    binaries: list[array | _Items] = []
    length = 0
    for text, part_index, part_binaries in pieces:
        index += [[position + length, code, count] for position, code, count in part_index]
        texts.append(text)
        binaries += part_binaries
        length += len(text)
    skeleton = "".join(texts)
    # (each array's text takes a character at least: no sum over a long index to learn
    # that it is not small)
    small = len(skeleton) + len(index) <= form.COMPRESS_ABOVE and (
        len(skeleton) + sum(2 * count + 1 for _, _, count in index) <= form.COMPRESS_ABOVE
    )
    if not index or small:  # nothing packed, or small: as pack does
        body = b"".join(bytes(_bytes_of(binary)) for binary in binaries)
        offsets, offset = [], 0
        for _, code, count in index:
            offsets.append(offset)
            offset += form.ITEM_BYTES[code] * count
        return form.pack(
            form.fill(
                skeleton,
                [
                    (position, form.array_at(body, offset, code, count))
                    for (position, code, count), offset in zip(index, offsets, strict=True)
                ],
            )
        )
    if not any(isinstance(b, _Items) and b.deflating is not None for b in binaries):
        sources = [source for binary in binaries for source in _sources_of(binary)]
        if form.level_of(sources) == 0:  # not worth compressing: copied once, as it is
            return form.compose_stored(skeleton, index, sources, into)
    # Compressed in pieces at once, as pigz does (zlib releases the GIL, and compressing
    # tens of megabytes on one core is most of a join's time): raw deflate pieces that
    # each end on a byte boundary (a sync flush), an empty final block, and zlib's
    # header and Adler-32 of the whole around them.  zlib.decompress reads it as any.
    deflating: list[Future[form.Deflated] | _Copied] = [
        pool.submit(form.deflate_piece, form.index_head(index) + skeleton.encode("utf-8"))
    ]
    for binary in binaries:
        if isinstance(binary, _Items) and binary.deflating is not None:
            deflating += binary.deflating
        else:
            deflating += [
                pool.submit(form.deflate_piece, piece)
                for piece in form.pieces_of(_bytes_of(binary))
            ]
    return form.write_pieces([future.result() for future in deflating])


def _bytes_of(binary: array | _Items) -> bytes | memoryview | array:
    return binary.joined() if isinstance(binary, _Items) else binary


def _sources_of(binary: array | _Items) -> list:
    """The buffers that hold ``binary``'s bytes, end to end (not joined)."""
    if isinstance(binary, _Items):
        return binary.binary if isinstance(binary.binary, list) else [binary.binary]
    return [binary]


def without_list(blob: bytes | memoryview, field: str) -> str:
    """The JSON text of a stored payload with its top-level list (or object) ``field``
    emptied: a child's summary, read without formatting its large list (or encoded
    arrays), nor copying it (a mapped file is read where needed)."""
    if not isinstance(blob, bytes):
        blob = memoryview(blob).cast("B")
    if not form.is_compact(blob):
        text = form.unpack(blob)
        span = member_span(text, field, opening="[{")
        return text if span is None else text[: span[0] + 1] + text[span[1] - 1 :]
    if blob[: len(form.MAGIC)] == form.MAGIC:  # every array in the list: one piece read
        skeleton, index, _ = form.read_head_piece(blob)
        positions = [position for position, _, _ in index]
        span = member_span(skeleton, field, set(positions), "[{")
        if (
            span is not None
            and span[0] != span[1]
            and index
            and span[0] < positions[0]
            and positions[-1] < span[1]
        ):
            return skeleton[: span[0] + 1] + skeleton[span[1] - 1 :]
    skeleton, index, body, offsets = form.read_compact(blob)
    span = member_span(skeleton, field, {position for position, _, _ in index}, "[{")
    arrays = [
        (position, offset, code, count)
        for (position, code, count), offset in zip(index, offsets, strict=True)
    ]
    if span is None:
        return form.fill(
            skeleton,
            [
                (position, form.array_at(body, offset, code, count))
                for position, offset, code, count in arrays
            ],
        )
    start, end = span
    if start == end:  # the list is the packed array at start
        skeleton = skeleton[:start] + "[]" + skeleton[start:]
        dropped, shift = range(start, start + 1), 2
    else:
        skeleton = skeleton[: start + 1] + skeleton[end - 1 :]
        dropped, shift = range(start + 1, end), start + 2 - end
    return form.fill(
        skeleton,
        [
            (
                position + shift if position >= dropped.stop else position,
                form.array_at(body, offset, code, count),
            )
            for position, offset, code, count in arrays
            if position not in dropped
        ],
    )


_KEY_BEFORE = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*$')


def encoded_members(blob: bytes | memoryview, field: str) -> dict[str, bytes]:
    """The bytes of the encoded arrays (item code ``B``) in the top-level object
    ``field`` of a stored payload, by member name: a parent joins its children's
    encoded arrays from these, never decoding base64 (``arrays``)."""
    if not isinstance(blob, bytes):  # (a mapped file: decompressed from where it is)
        blob = memoryview(blob).cast("B")
    if not form.is_compact(blob):  # (written as text: decoded)
        import base64

        members = json.loads(form.unpack(blob)).get(field) or {}
        return {k: base64.b64decode(v) for k, v in members.items() if isinstance(v, str)}
    skeleton, index, body, offsets = form.read_compact(blob)
    span = member_span(skeleton, field, opening="{")
    found: dict[str, bytes] = {}
    if span is None:
        return found
    for (position, code, count), offset in zip(index, offsets, strict=True):
        if code == "B" and span[0] < position < span[1]:
            key = _KEY_BEFORE.search(skeleton, span[0], position)
            if key is not None:
                found[json.loads(f'"{key.group(1)}"')] = bytes(body[offset : offset + count])
    return found

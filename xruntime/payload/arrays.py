"""The stored form of a result made from integer NumPy arrays (``job.table``,
``job.encoded``: their checks and the author's side are ``xruntime.author.tables``).

For ``job.table(response, "rows", distances=metres, travelTimes=seconds)`` item ``i``
of the list ``rows`` is an item of that list's declared type whose member ``distances``
is row ``i`` of ``metres``, and so on (2-D integer arrays, one row per item).
``stored_table`` writes the store's form of that result from the arrays' bytes: no
Python int per cell, no spyne object per row, no JSON text of the numbers.  What is
stored is exactly what encoding the equivalent response would store (``form.unpack``
gives the same text, byte for byte), so every binding answers the same.

For ``job.encoded(response, field, distances=metres, travelTimes=seconds)``, ``field``
is an object member whose string members ``distances``, ... are each the base64 of an
array's items as little-endian int32, in row-major order (docs/xdima-encoded.md gives
the layout and decoders).  The store keeps the int32 bytes themselves (item code ``B``
of the compact form); the base64 is written only when an answer is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol import codec
from ..protocol.typeinfo import OBJ, fields, original
from ..protocol.types import XModel
from . import form
from .list_join import fill_list, member_span

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass
class Table:
    """A response whose list ``field`` is made of ``columns``' rows: returned by
    ``job.table``, stored from the arrays (``stored_table``)."""

    response: XModel
    field: str
    columns: dict[str, NDArray[np.integer]]
    encoded: bool = False  # ``job.encoded``: the columns go into strings of ``field``


def object_member_type(response_type: type[XModel], field: str) -> type[XModel]:
    """The declared type of the object member ``field`` (``job.encoded``'s)."""
    for f in fields(response_type):
        if f.name == field and not f.many and f.kind == OBJ:
            return f.type
    raise ValueError(f"{response_type.__name__} has no object member {field!r}")


def list_item_type(response_type: type[XModel], field: str) -> type[XModel]:
    """The declared item type of the list ``field`` (a customised spyne class:
    ``original`` of it is the one to instantiate)."""
    for f in fields(response_type):
        if f.name == field and f.many and f.kind == OBJ:
            return f.type
    raise ValueError(f"{response_type.__name__} has no list {field!r} of objects")


def stored_table(
    given: Table, declared: type[XModel], into: form.Output = form.IN_MEMORY
) -> bytes | bytearray | form.Written:
    """The store's form of the table's response, as ``pack`` of its encoded text would
    be: every array packed as the compact form packs it (int32 when its values fit,
    else int64).  Arrays short enough that the compact form could keep them as text
    (under 33 items) take the ordinary path, through spyne objects: it is cheap there.
    A large form is written into a buffer from ``into`` (``form.compose_stored``)."""
    import numpy as np

    if given.encoded:
        return _stored_encoded(given, declared, into)
    response, field, columns = given.response, given.field, given.columns
    declared_item = list_item_type(type(response), field)
    item_type = original(declared_item)
    names = [f.name for f in fields(item_type) if f.name in columns]  # the encoded order
    rows = next(iter(columns.values())).shape[0]
    setattr(response, field, [])
    outer = codec.dumps(codec.encode(response, declared))
    if rows == 0 or min(columns[name].shape[1] for name in names) <= form.MIN_PACKED_ITEMS:
        setattr(
            response,
            field,
            [item_type(**{name: columns[name][i].tolist() for name in names}) for i in range(rows)],
        )
        return form.pack(codec.dumps(codec.encode(response, declared)))
    # one item's text with empty lists, then without them: the holes where arrays go
    template = codec.dumps(codec.encode(item_type(**{name: [] for name in names}), declared_item))
    holes: list[int] = []
    skeleton: list[str] = []
    last = 0
    for name in names:
        start, end = member_span(template, name) or (0, 0)
        skeleton.append(template[last:start])
        holes.append(start - 2 * len(holes))
        last = end
    skeleton.append(template[last:])
    item = "".join(skeleton)
    codes = [np.where(_rows_in_int32(columns[name]), "i", "q").tolist() for name in names]
    index = [
        [i * (len(item) + 1) + hole, code[i], columns[name].shape[1]]
        for i in range(rows)
        for hole, name, code in zip(holes, names, codes, strict=True)
    ]
    # the rows' buffers as the index lists them, never joined into one (a copy of the
    # whole matrix): the stored form is written from them
    buffers = [_row_buffers(columns[name], code) for name, code in zip(names, codes, strict=True)]
    binary = [row for rows_alike in zip(*buffers, strict=True) for row in rows_alike]
    return fill_list(outer, field, ",".join([item] * rows), index, binary, into)


def _row_buffers(column: NDArray[np.integer], codes: list[str]) -> list[memoryview]:
    """The little-endian bytes of each row of ``column`` as packed with its code (``i``
    int32, ``q`` int64): slices of the array's own buffer when every row is int32 and
    the array is int32 already (no copy), else each row converted."""
    import numpy as np

    width = {"i": "<i4", "q": "<i8"}
    if "q" not in codes:
        whole = np.ascontiguousarray(column, dtype="<i4").data.cast("B")
        size = 4 * column.shape[1]
        return [whole[at : at + size] for at in range(0, whole.nbytes, size)]
    return [
        np.ascontiguousarray(row, dtype=width[code]).data.cast("B")
        for row, code in zip(column, codes, strict=True)
    ]


def _rows_in_int32(column: NDArray[np.integer]) -> NDArray[np.bool_]:
    """Which rows of a 2-D integer array hold only int32 values (packed as int32, the
    others as int64): every row, without reading one, when its type holds no other (an
    int32 matrix: two passes over it saved, 0.03 s at 2 000²)."""
    import numpy as np

    if np.can_cast(column.dtype, np.int32):
        return np.ones(column.shape[0], dtype=bool)
    return (column.min(axis=1) >= INT32_MIN) & (column.max(axis=1) <= INT32_MAX)


def _stored_encoded(
    given: Table, declared: type[XModel], into: form.Output
) -> bytes | bytearray | form.Written:
    """The store's form of an encoded table's response: its text with each column's
    string cut out (found by a random mark put in its place), and the column's int32
    bytes kept as an item of code ``B`` there, which reads back as that string."""
    import numpy as np

    object_type = original(object_member_type(type(given.response), given.field))
    # (os.urandom as secrets.token_hex does: importing secrets loads OpenSSL's libcrypto
    # through hashlib into every worker process)
    marks = {name: f"\x01{os.urandom(16).hex()}" for name in given.columns}
    setattr(given.response, given.field, object_type(**marks))
    text = codec.dumps(codec.encode(given.response, declared))
    holes = sorted((text.index(codec.dumps(mark)), name) for name, mark in marks.items())
    skeleton: list[str] = []
    index: list[list] = []
    binaries: list[memoryview] = []
    last = removed = 0
    for start, name in holes:
        end = start + len(codec.dumps(marks[name]))
        skeleton.append(text[last:start])
        # (no copy when it is int32 in row-major order already)
        binary = np.ascontiguousarray(given.columns[name], dtype="<i4").data.cast("B")
        index.append([start - removed, "B", binary.nbytes])
        binaries.append(binary)
        removed += end - start
        last = end
    skeleton.append(text[last:])
    # (from the arrays themselves)
    return form.compose("".join(skeleton), index, binaries, into)

"""``job.table`` and ``job.encoded``: a result made of integer NumPy arrays, checked.

A long operation that computes a large table of integers (XDima's distance matrix) may
return ``job.table(response, "rows", distances=metres, travelTimes=seconds)`` instead of
``response`` with one spyne object per row, or ``job.encoded(response, field, ...)``
for the arrays as base64 strings of little-endian int32.  Here the author's columns are
checked and answered as a ``Table``; the worker stores it from the arrays' bytes
(``xruntime.payload.arrays``, which says how).
"""

from __future__ import annotations

from typing import Any

from ..payload.arrays import (
    INT32_MAX,
    INT32_MIN,
    Table,
    list_item_type,
    object_member_type,
)
from ..protocol.typeinfo import STR, fields, original
from ..protocol.types import XModel

__all__ = ["Table", "encoded", "table"]


def table(response: XModel, field: str, **columns: Any) -> Table:
    """Check the columns (2-D integer arrays with as many rows each) and answer the
    ``Table`` to return; TypeError or ValueError otherwise (the author's mistake)."""
    import numpy as np  # loaded only where jobs run

    item_type = original(list_item_type(type(response), field))
    declared = {f.name: f for f in fields(item_type)}
    arrays = {}
    for name, column in columns.items():
        f = declared.get(name)
        if f is None or not f.many:
            raise ValueError(f"{item_type.__name__} has no list member {name!r}")
        array = np.asarray(column)
        if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"column {name!r} is not a 2-D array of integers")
        if array.dtype == np.uint64:  # its values need not fit the int64 the store packs
            raise TypeError(f"column {name!r} is uint64: give int64")
        arrays[name] = array
    if not arrays or len({a.shape[0] for a in arrays.values()}) != 1:
        raise ValueError("a table needs columns with the same number of rows")
    return Table(response, field, arrays)


def encoded(response: XModel, field: str, **columns: Any) -> Table:
    """Check the columns (integer arrays whose values fit int32, any shape: written in
    row-major order) against ``field``'s string members, and answer the ``Table`` to
    return; TypeError or ValueError otherwise (the author's mistake)."""
    import numpy as np

    object_type = original(object_member_type(type(response), field))
    declared = {f.name: f for f in fields(object_type)}
    arrays = {}
    for name, column in columns.items():
        f = declared.get(name)
        if f is None or f.many or f.kind != STR:
            raise ValueError(f"{object_type.__name__} has no string member {name!r}")
        array = np.asarray(column)
        if not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"column {name!r} is not an array of integers")
        if array.size and (array.min() < INT32_MIN or array.max() > INT32_MAX):
            raise ValueError(f"column {name!r} holds values beyond int32")
        arrays[name] = array
    if not arrays:
        raise ValueError("an encoded table needs at least one column")
    return Table(response, field, arrays, encoded=True)

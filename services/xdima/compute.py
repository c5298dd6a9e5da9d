"""The distance matrix arithmetic, vectorised with NumPy, one block of rows at a time,
written straight into the matrix's final integer arrays.

Distances are great-circle distances (``services.geo``: haversine, on a sphere)
times the profile's detour factor; travel times are those distances at the profile's
average speed.  Both are rounded to whole metres and seconds (half away from zero: no
value is negative).

int32 holds every distance: at most half the Earth's circumference (π R = 20 015 087 m)
times the largest detour factor (10), 200 150 868 m, under 2³¹ − 1 = 2 147 483 647.  It
holds the travel times when the speed is at least 0.34 km/h (200 150 868 m at 0.0932 m/s
is 2³¹ − 1 s); slower profiles get int64 (``matrix_dtype``).
"""

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..geo import great_circle, largest_values

#: Longitudes and latitudes (radians), one array each.
Points = tuple[NDArray[np.float64], NDArray[np.float64]]

BLOCK_CELLS = 250_000  # cells per block: about 2 MB per float64 temporary
MIN_BLOCK_ROWS, MAX_BLOCK_ROWS = 1, 250
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def block_rows(destinations: int) -> int:
    """Rows per block for ``destinations`` columns (100-250 rows for usual sizes)."""
    return max(MIN_BLOCK_ROWS, min(MAX_BLOCK_ROWS, BLOCK_CELLS // max(1, destinations)))


def to_radians(points: Sequence[tuple[float, float]]) -> Points:
    """``[(longitude, latitude), ...]`` in degrees as two float64 arrays in radians."""
    a = np.radians(np.asarray(points, dtype=np.float64).reshape(-1, 2))
    return a[:, 0].copy(), a[:, 1].copy()


def matrix_dtype(detour_factor: float, speed_kmh: float) -> tuple[type, type]:
    """The integer types of the distances and of the travel times: int32 when the
    largest possible value fits, else int64; FloatingPointError when not even int64
    holds the travel times (a speed of a few nanometres an hour)."""
    longest, slowest = largest_values(detour_factor, speed_kmh)
    if slowest > INT64_MAX:
        raise FloatingPointError("a travel time would exceed 2⁶³ − 1 seconds")
    return (
        np.int32 if longest <= INT32_MAX else np.int64,
        np.int32 if slowest <= INT32_MAX else np.int64,
    )


def block_into(
    starts: Points,
    destinations: Points,
    detour_factor: float,
    speed_kmh: float,
    metres: NDArray[np.integer],
    seconds: NDArray[np.integer],
) -> None:
    """Compute a block (rows: ``starts``) into ``metres`` and ``seconds``, slices of the
    final arrays of shape (len(starts), len(destinations))."""
    d = great_circle(starts[0], starts[1], destinations[0], destinations[1])
    d *= detour_factor
    if not np.isfinite(d).all():
        raise FloatingPointError("a distance is not finite")
    t = d / (speed_kmh / 3.6)
    _round_into(d, metres)
    _round_into(t, seconds)


def block(
    starts: Points, destinations: Points, detour_factor: float, speed_kmh: float
) -> tuple[NDArray[np.integer], NDArray[np.integer]]:
    """(distances, travel times) of a block as new arrays of ``matrix_dtype``."""
    shape = (len(starts[0]), len(destinations[0]))
    kinds = matrix_dtype(detour_factor, speed_kmh)
    metres: NDArray[np.integer] = np.empty(shape, kinds[0])
    seconds: NDArray[np.integer] = np.empty(shape, kinds[1])
    block_into(starts, destinations, detour_factor, speed_kmh, metres, seconds)
    return metres, seconds


def _round_into(values: NDArray[np.float64], out: NDArray[np.integer]) -> None:
    """``values`` (not negative, overwritten) rounded half up into ``out``."""
    values += 0.5
    np.floor(values, out=values)
    out[...] = values

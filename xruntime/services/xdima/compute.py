"""The distance matrix arithmetic, vectorised with NumPy, one block of rows at a time.

Distances are great-circle distances (``services.geo``: haversine, on a sphere)
times the profile's detour factor; travel times are those distances at the profile's
average speed.  Both are rounded to whole metres and seconds (half away from zero).
"""

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..geo import great_circle

#: Longitudes and latitudes (radians), one array each.
Points = tuple[NDArray[np.float64], NDArray[np.float64]]

BLOCK_CELLS = 250_000  # cells per block: about 2 MB per float64 temporary
MIN_BLOCK_ROWS, MAX_BLOCK_ROWS = 1, 250


def block_rows(destinations: int) -> int:
    """Rows per block for ``destinations`` columns (100-250 rows for usual sizes)."""
    return max(MIN_BLOCK_ROWS, min(MAX_BLOCK_ROWS, BLOCK_CELLS // max(1, destinations)))


def to_radians(points: Sequence[tuple[float, float]]) -> Points:
    """``[(longitude, latitude), ...]`` in degrees as two float64 arrays in radians."""
    a = np.radians(np.asarray(points, dtype=np.float64).reshape(-1, 2))
    return a[:, 0].copy(), a[:, 1].copy()


def block(
    starts: Points, destinations: Points, detour_factor: float, speed_kmh: float
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(distances, travel times) of a block as int64 arrays (rows: starts)."""
    metres = great_circle(starts[0], starts[1], destinations[0], destinations[1])
    metres *= detour_factor
    seconds = metres / (speed_kmh / 3.6)
    return _round(metres), _round(seconds)


def _round(values: NDArray[np.float64]) -> NDArray[np.int64]:
    if not np.all(np.isfinite(values)):
        raise FloatingPointError("a distance or travel time is not finite")
    return np.floor(values + 0.5).astype(np.int64)

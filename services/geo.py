"""Great-circle distances, shared by the services that compute them (XDima, XTour).

A plain module, not a service: the registry imports it and finds no ``service``, so
NumPy is imported only when distances are computed (in worker processes), not in
every process of a node.
"""

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

EARTH_RADIUS = 6_371_000.0  # metres


def largest_values(detour_factor: float, speed_kmh: float) -> tuple[float, float]:
    """Bounds of the largest distance (m) and travel time (s) a profile can give, before
    rounding: half the Earth's circumference times the detour factor, at the speed."""
    longest = math.pi * EARTH_RADIUS * detour_factor + 1
    return longest, longest / (speed_kmh / 3.6) + 1


def great_circle(
    lon1: "NDArray[np.float64]",
    lat1: "NDArray[np.float64]",
    lon2: "NDArray[np.float64]",
    lat2: "NDArray[np.float64]",
) -> "NDArray[np.float64]":
    """Haversine distances (m) on a sphere of radius ``EARTH_RADIUS`` from each point 1
    (rows) to each point 2 (columns); longitudes and latitudes as arrays in radians."""
    import numpy as np

    lat1, lon1 = lat1[:, None], lon1[:, None]
    h = (
        np.sin((lat2 - lat1) / 2) ** 2
        + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))

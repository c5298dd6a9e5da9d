"""Figures the benchmarks print, computed one way for all of them."""


def percentile(values, p):
    """The nearest-rank ``p``-th percentile (0-100) of ``values`` (not empty)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]

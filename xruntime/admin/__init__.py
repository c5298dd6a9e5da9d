"""The administrator's pages: the status page, its live feed, /metrics."""

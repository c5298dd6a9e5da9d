"""What every layer uses: the node's log, its metrics, the pool for blocking work, spyne's shim."""

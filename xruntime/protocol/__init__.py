"""The protocol itself: types, faults, the state table and the watch rules (no I/O)."""

"""A running node: its main process, its HTTP processes, live reload of its file."""

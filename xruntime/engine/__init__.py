"""The engine: supervisor and worker processes, notifier, retention cleaner."""

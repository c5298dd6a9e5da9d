"""Tells whoever listens that a job changed, without any polling.

``notify(job_id)`` is called from any thread after a change is stored: it calls this
process's listeners (the watches of an HTTP process, see ``xruntime.operations.watching``) and
publishes the change on the node's change feed (``bridge``), which carries it to the
node's other processes and to other nodes (``xruntime.store.feed``,
``xruntime.store.channel``).  The supervisor learns of stops and deletes that way
too: it acts on every change it is told of (``Supervisor.changed_elsewhere``).
"""

import threading
from collections.abc import Callable

from ..store.changes import QUEUE, ChangeFeed


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str], None]] = []
        self._closers: list[Callable[[], None]] = []

    #: The change feed: something with ``publish(job_id)``; None in unit tests.
    bridge: ChangeFeed | None = None

    def listen(
        self, on_change: Callable[[str], None], on_close: Callable[[], None] | None = None
    ) -> None:
        """Call ``on_change(job_id)`` (from any thread) for every change seen here
        (``QUEUE`` for "a job was queued"), and ``on_close()`` when the process shuts down."""
        with self._lock:
            self._listeners.append(on_change)
            if on_close is not None:
                self._closers.append(on_close)

    def notify(self, job_id: str) -> None:
        """The job changed here: tell this process's listeners and the other processes."""
        self.notify_local(job_id)
        if self.bridge is not None:
            self.bridge.publish(job_id)

    def notify_queued(self) -> None:
        """A job was queued: idle worker slots, on this node and others, claim it now."""
        self.notify_local(QUEUE)
        if self.bridge is not None:
            self.bridge.publish(QUEUE)

    def notify_local(self, job_id: str) -> None:
        for listener in self._listeners:
            listener(job_id)

    def close(self) -> None:
        """The process is shutting down: every waiting watch answers now."""
        for closer in list(self._closers):
            closer()

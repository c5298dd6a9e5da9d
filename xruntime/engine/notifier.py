"""Wakes the threads waiting for a job to change, without any polling.

A watch subscribes to its job id *before* it reads the job, then sleeps on an event
that ``notify(job_id)`` sets; so a change between the read and the sleep is never
missed.  This is the in-process form for one node; a notifier for several nodes adds
the database's own channel and calls the same ``notify``.
"""
import threading
from contextlib import contextmanager


class Subscription:
    __slots__ = ("_event", "_notifier")

    def __init__(self, notifier):
        self._event = threading.Event()
        self._notifier = notifier

    def wait(self, timeout: float) -> bool:
        """Sleep until the job changes or ``timeout`` seconds pass; True if it changed.
        Once the node is closing, waits end at once so that long polls answer."""
        if self._notifier.closed:
            return True
        woke = self._event.wait(max(0.0, timeout))
        self._event.clear()
        return woke

    @property
    def closing(self) -> bool:
        return self._notifier.closed

    def _wake(self):
        self._event.set()


class Notifier:
    def __init__(self):
        self._lock = threading.Lock()
        self._subscribers: dict[str, set] = {}
        self.closed = False

    @contextmanager
    def subscribe(self, job_id: str):
        sub = Subscription(self)
        with self._lock:
            self._subscribers.setdefault(job_id, set()).add(sub)
        try:
            yield sub
        finally:
            with self._lock:
                subs = self._subscribers.get(job_id)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._subscribers[job_id]

    #: Set for several nodes: something with ``publish(job_id)`` (store.channel).
    bridge = None

    def notify(self, job_id: str) -> None:
        """The job changed here: wake this node's waiters, and tell the other nodes."""
        self.notify_local(job_id)
        if self.bridge is not None:
            self.bridge.publish(job_id)

    def notify_local(self, job_id: str) -> None:
        with self._lock:
            subs = list(self._subscribers.get(job_id, ()))
        for sub in subs:
            sub._wake()

    def waiting(self) -> int:
        """How many subscriptions are open (for runtime information and tests)."""
        with self._lock:
            return sum(len(s) for s in self._subscribers.values())

    def close(self) -> None:
        """The node is shutting down: every waiting watch answers now."""
        self.closed = True
        with self._lock:
            subs = [s for group in self._subscribers.values() for s in group]
        for sub in subs:
            sub._wake()

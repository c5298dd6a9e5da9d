"""What a change feed is: how a process learns of the job changes other processes make.

Two feeds carry changes between processes and nodes: SQLite's, over Unix datagram
sockets (``feed.SocketFeed``), and PostgreSQL's LISTEN/NOTIFY (``channel.PostgresChannel``);
``feed.open_feed`` picks the one for a database.  Both answer ``ChangeFeed`` and carry
the same words: a job's id when it changed, ``QUEUE`` when work was queued, and
``MISSED`` when a feed lost its way to the others for a while.  They live
here so that the feeds and their users (the notifier, the HTTP processes) share them
without importing each other.
"""

import asyncio
from typing import Protocol

#: The id published for "a job was queued".
QUEUE = "*queue*"
#: Handed to ``on_job`` when changes may have been missed (a feed's connection was lost,
#: or came back after a loss): whoever watches jobs reads them again, and learns at
#: once whether the store can be reached, rather than wait for a change never told.
MISSED = "*missed*"


class ChangeFeed(Protocol):
    """One process's membership in its database's change feed.  It hands what the other
    processes publish to the ``on_job(job_id)`` and ``on_queue()`` it was opened with."""

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Join the feed: from now on, changes published elsewhere are handed over
        (by ``loop``'s thread, where the feed can receive on an event loop, else by a
        thread of its own)."""

    def publish(self, job_id: str) -> None:
        """Tell the other processes that the job changed (``QUEUE``: work was queued)."""

    def forget(self, origin_prefix: str) -> None:
        """Forget the members whose origin starts with ``origin_prefix`` (a killed run's)."""

    def close(self) -> None:
        """Leave the feed."""

"""Job changes between nodes, through PostgreSQL's LISTEN/NOTIFY (docs/protocol.md §4).

The change feed on PostgreSQL.  Every change is published on the channel
``xruntime_jobs`` as ``<origin>|<job id>`` (``<origin>|*queue*`` for new work), where
the origin names one process of one node; each process's listener thread hands what
the others published to its own watches and, in the supervisor's process, to the
Supervisor: a watch held in any process of any node wakes when the job changes
anywhere, a stop or delete asked anywhere reaches the worker at once, and idle
workers everywhere claim new jobs at once.
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import make_url

from ..support.logs import OncePerPeriod
from .changes import MISSED, QUEUE
from .postgresql import postgresql_connect_args

if TYPE_CHECKING:
    import psycopg

log = OncePerPeriod(logging.getLogger(__name__), 5.0)  # an outage fails every try

CHANNEL = "xruntime_jobs"


def conninfo(url: str) -> str:
    """A SQLAlchemy URL (postgresql+psycopg://…) as a libpq URI."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresChannel:
    """The change feed of a PostgreSQL database (see the module's docstring)."""

    def __init__(
        self, url: str, origin: str, on_job: Callable[[str], None], on_queue: Callable[[], None]
    ) -> None:
        self.uri = conninfo(url)
        # the store's timeouts and keepalives: a cut-off database must not hold a
        # publisher (a request's thread) or leave the listener on a dead connection
        # (libpq's parameters, which psycopg.connect takes as keywords of any kind)
        self.connect_args: dict[str, Any] = postgresql_connect_args(make_url(url).query)
        self.origin = origin
        #: How the listener shows in pg_stat_activity (PostgreSQL keeps 63 bytes of it).
        self.listener_name = {"application_name": f"xruntime listen {origin}"[:63]}
        self.on_job = on_job  # called with a job id changed on another node
        self.on_queue = on_queue  # called when another node queued work
        self._send_lock = threading.Lock()
        self._sender: psycopg.Connection[Any] | None = None
        self._closed = False
        self._listener = threading.Thread(target=self._listen, name="pg-listen", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start listening (in a thread of its own: its connection blocks; ``loop`` is
        not used)."""
        self._listener.start()

    def forget(self, origin_prefix: str) -> None:
        """Nothing to forget: LISTEN/NOTIFY keeps no list of its listeners."""

    def close(self) -> None:
        """Stop listening (within a second)."""
        self._closed = True

    # ------------------------------------------------------------------ publishing

    def publish(self, job_id: str) -> None:
        """Tell the other nodes; a lost message only delays them (leases catch up).
        A connection the database dropped (a restart) is replaced once at once."""
        import psycopg

        with self._send_lock:
            for last_try in (False, True):
                try:
                    if self._sender is None or self._sender.closed:
                        self._sender = psycopg.connect(
                            self.uri, autocommit=True, **self.connect_args
                        )
                    self._sender.execute(
                        "SELECT pg_notify(%s, %s)", (CHANNEL, f"{self.origin}|{job_id}")
                    )
                    return
                except Exception as exc:  # the database is away: other nodes learn by their leases
                    self._sender = None
                    if last_try:
                        log.warning("could not publish a job change to other nodes: %s", exc)

    # ------------------------------------------------------------------ listening

    def _listen(self):
        """Listen, reconnecting after a loss.  Changes published while this listener
        had no connection are never delivered: on the loss and again on coming back,
        ``on_job(MISSED)`` has the watchers read their jobs again."""
        import psycopg

        lost = False
        while not self._closed:
            try:
                with psycopg.connect(
                    self.uri, autocommit=True, **{**self.listener_name, **self.connect_args}
                ) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if lost:
                        lost = False
                        self.on_job(MISSED)
                    while not self._closed:
                        for message in conn.notifies(timeout=1.0):
                            self._received(message.payload)
            except Exception as exc:
                if not self._closed:
                    log.warning("listening for other nodes' job changes failed (%s); retrying", exc)
                    if not lost:
                        lost = True
                        self.on_job(MISSED)
                    time.sleep(1.0)

    def _received(self, payload: str):
        origin, _, job_id = payload.partition("|")
        if origin == self.origin:
            return  # our own change: already handled in-process
        if job_id == QUEUE:
            self.on_queue()
        else:
            self.on_job(job_id)

"""Job changes between nodes, through PostgreSQL's LISTEN/NOTIFY (PROTOCOL §4).

On one node the Notifier wakes waiters in-process.  With several nodes on one
PostgreSQL database, every change is also published on the channel ``xruntime_jobs``
as ``<node>|<job id>`` (``<node>|*queue*`` for new work), and each node's listener
thread hands what other nodes published to its own Notifier and Supervisor: a watch
held on node B wakes when the job changes on node A, a stop or delete asked on B
reaches the worker on A at once, and idle workers everywhere claim new jobs at once.
"""
import logging
import threading
import time

from sqlalchemy.engine import make_url

log = logging.getLogger("xruntime.channel")

CHANNEL = "xruntime_jobs"
QUEUE = "*queue*"


def conninfo(url: str) -> str:
    """A SQLAlchemy URL (postgresql+psycopg://…) as a libpq URI."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresChannel:
    def __init__(self, url: str, node: str, on_job, on_queue):
        self.uri = conninfo(url)
        self.node = node
        self.on_job = on_job          # called with a job id changed on another node
        self.on_queue = on_queue      # called when another node queued work
        self._send_lock = threading.Lock()
        self._sender = None
        self._closed = False
        self._listener = threading.Thread(target=self._listen, name="pg-listen", daemon=True)

    def start(self):
        self._listener.start()

    def close(self):
        self._closed = True

    # ------------------------------------------------------------------ publishing

    def publish(self, job_id: str) -> None:
        """Tell the other nodes; a lost message only delays them (leases catch up)."""
        import psycopg
        with self._send_lock:
            try:
                if self._sender is None or self._sender.closed:
                    self._sender = psycopg.connect(self.uri, autocommit=True)
                self._sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self.node}|{job_id}"))
            except Exception as exc:   # the database is away: other nodes learn by their leases
                log.warning("could not publish a job change to other nodes: %s", exc)
                self._sender = None

    # ------------------------------------------------------------------ listening

    def _listen(self):
        import psycopg
        while not self._closed:
            try:
                with psycopg.connect(self.uri, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._closed:
                        for message in conn.notifies(timeout=1.0):
                            self._received(message.payload)
            except Exception as exc:
                if not self._closed:
                    log.warning("listening for other nodes' job changes failed (%s); retrying", exc)
                    time.sleep(1.0)

    def _received(self, payload: str):
        node, _, job_id = payload.partition("|")
        if node == self.node:
            return                      # our own change: already handled in-process
        if job_id == QUEUE:
            self.on_queue()
        else:
            self.on_job(job_id)

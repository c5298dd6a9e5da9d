"""The change feed of an SQLite database: job changes between the processes of a node.

A node serves HTTP in several processes and runs its jobs from one more (the
supervisor's).  Each process appends the id of every job it changes to the table
``job_changes`` (``publish``), and one thread per process reads what the others
appended every ``PERIOD`` seconds: one small indexed read per few ms per process,
whatever the number of held watches.  What it reads goes to ``on_job(job_id)`` (the
process's watches; in the supervisor's process, the Supervisor too) and, for new
work (``QUEUE``), to ``on_queue()``.  Nodes sharing one SQLite file on one host see
each other's changes the same way.  PostgreSQL uses LISTEN/NOTIFY instead
(``store.channel``); ``open_feed`` picks the one for a database.
"""
import logging
import sqlite3
import threading
import time

from sqlalchemy.engine import make_url

from .sql import retry_while_busy

log = logging.getLogger("xruntime.feed")

#: The id published for "a job was queued".
QUEUE = "*queue*"
#: How often each process reads the feed (s).
PERIOD = 0.003
#: How long changes are kept (ms); a process that missed them answers its watches
#: at their maximum polling period from a fresh read, as without any feed.
KEEP_MS = 60_000
PRUNE_PERIOD = 10.0


def open_feed(store, origin: str, on_job, on_queue, prune: bool = False):
    """The change feed of the store's database, for the process named ``origin``."""
    if store.dialect == "postgresql":
        from .channel import PostgresChannel
        return PostgresChannel(store.url, origin, on_job, on_queue)
    return SqliteFeed(make_url(store.url).database, origin, on_job, on_queue, prune=prune)


class SqliteFeed:
    def __init__(self, path: str, origin: str, on_job, on_queue, prune: bool = False):
        self.path = path
        self.origin = origin
        self.on_job = on_job
        self.on_queue = on_queue
        self.prune = prune               # one process of the node erases old changes
        self._closed = False
        self._outbox = []                # ids waiting to be written, in order
        self._outbox_ready = threading.Condition()
        self._follower = threading.Thread(target=self._follow, name="change-feed", daemon=True)
        self._publisher = threading.Thread(target=self._publish_loop, name="change-feed-out",
                                           daemon=True)

    def _connect(self, busy_timeout_ms: int = 10000):
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        return conn

    def start(self):
        self._follower.start()
        self._publisher.start()

    def close(self):
        """Stop reading; what is still to be published is written first."""
        self._closed = True
        with self._outbox_ready:
            self._outbox_ready.notify()
        if self._publisher.is_alive():
            self._publisher.join(5)

    def publish(self, job_id: str) -> None:
        """Tell the node's other processes (and nodes on the same file).  The caller
        does not wait for the write: a thread writes what is pending in one
        transaction, so a burst of changes costs one write, off the caller's path."""
        with self._outbox_ready:
            self._outbox.append(job_id)
            self._outbox_ready.notify()

    def _publish_loop(self):
        conn = self._connect(busy_timeout_ms=0)      # retry_while_busy waits less
        while True:
            with self._outbox_ready:
                while not self._outbox and not self._closed:
                    self._outbox_ready.wait()
                pending, self._outbox = self._outbox, []
            if pending:
                self._write(conn, pending)
            elif self._closed:
                break
        conn.close()

    def _write(self, conn, pending):
        at = int(time.time() * 1000)
        rows = [(self.origin, job_id, at) for job_id in dict.fromkeys(pending)]
        try:
            def insert():
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany("INSERT INTO job_changes (origin, job_id, at) VALUES (?, ?, ?)",
                                     rows)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            retry_while_busy(insert)
        except sqlite3.Error as exc:         # they answer their watches a little later
            log.warning("could not publish %d job change(s): %s", len(rows), exc)

    def _follow(self):
        conn = self._connect()
        last = conn.execute("SELECT coalesce(max(seq), 0) FROM job_changes").fetchone()[0]
        pruned = time.monotonic()
        while not self._closed:
            try:
                rows = conn.execute("SELECT seq, origin, job_id FROM job_changes WHERE seq > ? "
                                    "ORDER BY seq", (last,)).fetchall()
                if rows:
                    last = rows[-1][0]
                    self._received([(origin, job_id) for _, origin, job_id in rows])
                if self.prune and time.monotonic() - pruned > PRUNE_PERIOD:
                    pruned = time.monotonic()
                    conn.execute("DELETE FROM job_changes WHERE at < ?",
                                 (int(time.time() * 1000) - KEEP_MS,))
            except sqlite3.Error as exc:
                log.warning("reading the change feed failed (%s); retrying", exc)
                time.sleep(0.5)
            except Exception:
                log.exception("a change from the feed could not be handled")
            time.sleep(PERIOD)
        conn.close()

    def _received(self, changes):
        queued = False
        for origin, job_id in dict.fromkeys(changes):
            if origin == self.origin:
                continue                 # our own change: handled in-process already
            if job_id == QUEUE:
                queued = True
            else:
                self.on_job(job_id)
        if queued:
            self.on_queue()

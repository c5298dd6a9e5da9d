"""The change feed of an SQLite database: job changes between the processes using it.

A node serves HTTP in several processes and runs its jobs from one more (the
supervisor's); each must learn at once of the job changes the others make.  Every
process binds a Unix datagram socket (in Linux's abstract namespace: no file) and
lists its address in the table ``feed_members``.  ``publish(job_id)`` sends the id to
every other member from the caller's thread when the feed is quiet (no send under way,
none pending, none in the last ``INLINE_GAP_S``): waking another thread costs more
than the send.  Otherwise it hands the id to a sender thread, which sends what is
pending, batched: a burst costs a few datagrams per member, not one per change (a
member's socket takes a few hundred at most).  A held watch wakes within a fraction
of a millisecond, and the feed costs the database no write and no polling at all,
whatever the number of watches.  What arrives goes to ``on_job(job_id)`` (the
process's watches; in the supervisor's process, the Supervisor) and, for new work
(``QUEUE``), to ``on_queue()``: received by an HTTP process's event loop itself, where
its watches wait (a thread of the feed's own took the GIL from the loop at every
change, and woke it after), and by a receiver thread in the other processes.  Nodes
sharing one SQLite file on one host are members of one feed.  PostgreSQL uses
LISTEN/NOTIFY instead (``store.channel``); ``open_feed`` picks the one for a database.

A member whose socket cannot be reached (a killed process) is left out for a minute,
not erased: a node that shares the file from another network namespace is as
unreachable as a dead one.  A node's main process erases the rows its own previous
run left (``forget``).  A member so busy that its socket's queue is full (Linux keeps
``net.unix.max_dgram_qlen`` datagrams, 10 by default) is not dropped from: what it
did not take is held for it and sent again by the sender thread, soon and then less
often, merged into one datagram, until it takes it (a watch whose job's end were
dropped would answer only at its maximum polling period).  Past ``HELD_MAX`` ids held
for one member they become ``MISSED``: its watches read their jobs again.
"""

import asyncio
import hashlib
import logging
import os
import re
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

from sqlalchemy import delete, insert, select
from sqlalchemy.sql import Executable

from .changes import MISSED, QUEUE, ChangeFeed
from .channel import PostgresChannel
from .database import Database
from .schema import feed_members
from .sqlite import retry_while_busy

log = logging.getLogger(__name__)
_CREDENTIALS = struct.Struct("3i")  # SCM_CREDENTIALS: pid, uid, gid
_ORIGIN_OR_ID = r"[A-Za-z0-9_.:@/*\[\]-]{1,200}"
#: A well-formed datagram: an origin and ids, one per line, each of _ORIGIN_OR_ID (one
#: match for the whole, not one per line: every change of the node reaches every member)
_WELL_FORMED = re.compile(rf"{_ORIGIN_OR_ID}(?:\n{_ORIGIN_OR_ID})*")
#: This process's user, whose datagrams alone are heard (asked once, not per datagram)
_UID = os.getuid()
_dropped_at = [0.0]  # when a dropped datagram was last logged

#: The message a new member sends the others: "read the members again".
HELLO = "*hello*"
#: How often each member reads the member list anyway (s).
REFRESH_PERIOD = 1.0
#: How long an unreachable member is left out before it is tried again (s).
UNREACHABLE_FOR = 60.0
#: A change published sooner than this after the last one sent from a caller's thread
#: goes to the sender thread, batched with the others of its burst (s).
INLINE_GAP_S = 0.0005
#: Datagrams an event loop receives in one turn at most.
RECEIVED_AT_ONCE = 64
#: Largest datagram sent; more ids go in several.
DATAGRAM_BYTES = 32 * 1024
#: A busy member's held ids are tried again after this (s), doubling while it stays
#: busy up to HELD_RETRY_MAX_S.
HELD_RETRY_S = 0.001
HELD_RETRY_MAX_S = 0.05
#: Ids held for one busy member at most: past it, MISSED instead.
HELD_MAX = 10_000


def open_feed(
    store: Database, origin: str, on_job: Callable[[str], None], on_queue: Callable[[], None]
) -> ChangeFeed:
    """The change feed of the store's database, for the process named ``origin``."""
    if store.dialect == "postgresql":
        return PostgresChannel(store.url, origin, on_job, on_queue)
    return SocketFeed(store, origin, on_job, on_queue)


class SocketFeed:
    """The change feed of an SQLite database (see the module's docstring)."""

    def __init__(
        self,
        store: Database,
        origin: str,
        on_job: Callable[[str], None],
        on_queue: Callable[[], None],
    ):
        self.store = store
        self.origin = origin
        self.on_job = on_job
        self.on_queue = on_queue
        database = os.path.realpath(store.engine.url.database or "")
        key = hashlib.sha1(database.encode()).hexdigest()[:16]
        self.address = f"\0xruntime-feed/{key}/{uuid.uuid4().hex}"
        self._inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._inbox.bind(self.address)
        self._inbox.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        # any local user can reach an abstract socket: each datagram says whose it is
        self._inbox.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self._outbox_socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._outbox_socket.setblocking(False)
        self._members: list[str] = []  # the other members' addresses
        self._unreachable: dict[str, float] = {}  # address → time.monotonic() to try it again
        self._closed = False
        self._outbox: list[str] = []  # job ids to publish
        self._outbox_ready = threading.Condition()
        self._sending = threading.Lock()  # held by whoever sends to the members now
        self._sent_inline_at = 0.0  # time.monotonic() of the last send from a caller
        # (under ``_sending``) a busy member's address → the ids it has not taken yet
        self._held: dict[str, dict[str, None]] = {}
        self._retry_after = HELD_RETRY_S  # until the sender tries the held ids again (s)
        self._loop: asyncio.AbstractEventLoop | None = None  # receiving on it (``start``)
        self._receiver = threading.Thread(
            target=self._receive_loop, name="change-feed", daemon=True
        )
        self._sender = threading.Thread(target=self._send_loop, name="change-feed-out", daemon=True)

    # ------------------------------------------------------------------ life

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """List this process among the members, and start sending and receiving: on
        ``loop`` when given (an HTTP process: its watches wait there, and a thread of
        the feed's own would take the GIL from the loop at every change), else in a
        thread of its own."""
        self._write(
            insert(feed_members).values(
                address=self.address, origin=self.origin, since=int(time.time() * 1000)
            )
        )
        if loop is None:
            self._receiver.start()
        else:
            self._inbox.setblocking(False)
            self._loop = loop
            loop.add_reader(self._inbox.fileno(), self._receive_ready)
        self._sender.start()
        self._read_members()
        self.publish(HELLO)  # the others read the members again: us too

    def forget(self, origin_prefix: str) -> None:
        """Erase the members whose origin starts with ``origin_prefix``: what this
        node's previous run left when it was killed."""
        self._write(delete(feed_members).where(feed_members.c.origin.startswith(origin_prefix)))

    def close(self) -> None:
        """Stop: what is still to be published is sent first, then we leave the feed."""
        self._closed = True
        with self._outbox_ready:
            self._outbox_ready.notify()
        if self._sender.is_alive():
            self._sender.join(5)
        try:
            self._write(delete(feed_members).where(feed_members.c.address == self.address))
        except Exception as exc:  # the database is closed or away: the others
            log.debug("could not leave the change feed: %s", exc)  # drop us on their own
        self._stop_receiving()
        self._inbox.close()  # ends the receiver

    # ------------------------------------------------------------------ sending

    def publish(self, job_id: str) -> None:
        """Tell the other members: from this thread when the feed is quiet (see the
        module's docstring), else through the sender thread.  The caller never waits for
        another's send."""
        now = time.monotonic()
        if (
            not self._outbox
            and now - self._sent_inline_at >= INLINE_GAP_S
            and self._sending.acquire(blocking=False)
        ):
            try:
                if not self._outbox:  # (else: it goes after the pending ones, batched)
                    self._sent_inline_at = now
                    self._send((job_id,))
                    if self._held:  # a member was busy: the sender tries it again
                        with self._outbox_ready:
                            self._outbox_ready.notify()
                    return
            finally:
                self._sending.release()
        with self._outbox_ready:
            self._outbox.append(job_id)
            self._outbox_ready.notify()

    def _send_loop(self):
        refreshed = time.monotonic()
        while True:
            with self._outbox_ready:
                if not self._outbox and not self._closed:
                    self._outbox_ready.wait(self._retry_after if self._held else REFRESH_PERIOD)
                pending, self._outbox = self._outbox, []
            if time.monotonic() - refreshed >= REFRESH_PERIOD:
                refreshed = time.monotonic()
                self._read_members()
            if pending or self._held:
                with self._sending:
                    self._send_held()
                    if pending:
                        self._send(pending)
                    busy = bool(self._held)
                self._retry_after = (
                    min(2 * self._retry_after, HELD_RETRY_MAX_S) if busy else HELD_RETRY_S
                )
            if self._closed and not pending:  # (what a busy member holds: tried once more)
                break

    def _send(self, ids: Iterable[str]) -> None:
        """The ids to every member (under ``_sending``); to a busy one, held."""
        batches = self._encoded(ids)
        for address in list(self._members):
            if address in self._held:  # (it is sent what it holds first)
                self._hold(address, (i for batch, _ in batches for i in batch))
            else:
                self._deliver(address, batches)

    def _send_held(self) -> None:
        """Each busy member what it holds, as far as it takes it (under ``_sending``)."""
        for address in list(self._held):
            self._deliver(address, self._encoded(self._held.pop(address)))

    def _encoded(self, ids: Iterable[str]) -> list[tuple[list[str], bytes]]:
        """The ids in batches, each with its datagram (made once, for every member)."""
        return [(batch, _datagram(self.origin, batch)) for batch in _batches(self.origin, ids)]

    def _deliver(self, address: str, batches: list[tuple[list[str], bytes]]) -> None:
        """The datagrams to ``address`` in turn; from the first it is too busy to take
        (its queue is full), the ids are held for it.  A member gone is left out."""
        for n, (_, datagram) in enumerate(batches):
            try:
                self._outbox_socket.sendto(datagram, address)
            except (ConnectionRefusedError, FileNotFoundError):
                self._leave_out(address)  # gone (killed), or not reachable from here
                return
            except BlockingIOError:
                self._hold(address, (i for later, _ in batches[n:] for i in later))
                return
            except OSError as exc:
                log.warning("could not send a job change: %s", exc)

    def _hold(self, address: str, ids: Iterable[str]) -> None:
        """Keep ``ids`` for the busy member ``address``, up to HELD_MAX of them, past which
        it is told MISSED (with new work and new members, if it was to hear of those)."""
        held = self._held.setdefault(address, {})
        if MISSED in held:
            return  # (it reads every job it watches again: no id adds anything)
        held.update(dict.fromkeys(ids))
        if len(held) > HELD_MAX:
            kept = [MISSED] + [m for m in (QUEUE, HELLO) if m in held]
            self._held[address] = dict.fromkeys(kept)
            _dropped(f"{len(held)} changes for a member too busy to take them (told: missed)")

    def _read_members(self):
        try:
            with self.store.engine.connect() as conn:
                rows = conn.execute(select(feed_members.c.address)).all()
            now = time.monotonic()
            self._unreachable = {a: t for a, t in self._unreachable.items() if t > now}
            self._members = [
                r[0] for r in rows if r[0] != self.address and r[0] not in self._unreachable
            ]
        except Exception as exc:
            log.warning("could not read the members of the change feed: %s", exc)

    def _leave_out(self, address: str):
        self._unreachable[address] = time.monotonic() + UNREACHABLE_FOR
        self._members = [a for a in self._members if a != address]
        self._held.pop(address, None)

    def _write(self, statement: Executable) -> None:
        def run():
            with self.store.engine.begin() as conn:
                conn.execute(statement)

        retry_while_busy(run)

    # ------------------------------------------------------------------ receiving

    def _receive_loop(self):
        while not self._closed:
            try:
                datagram, ancillary, _, _ = self._inbox.recvmsg(
                    65536, socket.CMSG_SPACE(_CREDENTIALS.size)
                )
            except OSError:
                break  # closed
            self._take(datagram, ancillary)

    def _receive_ready(self):
        """(On the loop) the datagrams waiting, up to RECEIVED_AT_ONCE: the loop's
        other work comes between bursts."""
        for _ in range(RECEIVED_AT_ONCE):
            try:
                datagram, ancillary, _, _ = self._inbox.recvmsg(
                    65536, socket.CMSG_SPACE(_CREDENTIALS.size)
                )
            except BlockingIOError:
                return
            except OSError:  # closed
                self._stop_receiving()
                return
            self._take(datagram, ancillary)

    def _stop_receiving(self):
        if self._loop is not None:
            loop, self._loop = self._loop, None
            try:
                loop.remove_reader(self._inbox.fileno())
            except (ValueError, OSError, RuntimeError):  # closed already, or the loop is
                pass

    def _take(self, datagram: bytes, ancillary: list) -> None:
        if not _from_this_user(ancillary):
            _dropped("a datagram from another user")
            return
        try:
            self._received(datagram)
        except Exception:
            log.exception("a change from the feed could not be handled")

    def _received(self, datagram: bytes):
        try:
            text = datagram.decode("utf-8")
        except UnicodeDecodeError:
            _dropped("a datagram that is not UTF-8")
            return
        if not _WELL_FORMED.fullmatch(text):
            _dropped("a malformed datagram")
            return
        origin, *ids = text.split("\n")
        if origin == self.origin:
            return
        queued = False
        for job_id in dict.fromkeys(ids):
            if job_id == QUEUE:
                queued = True
            elif job_id == HELLO:
                self._read_members()
            else:
                self.on_job(job_id)
        if queued:
            self.on_queue()


def _from_this_user(ancillary: Iterable[tuple[int, int, bytes]]) -> bool:
    """Whether the sender's credentials (SO_PASSCRED) name this process's user."""
    for level, kind, data in ancillary:
        if (
            level == socket.SOL_SOCKET
            and kind == socket.SCM_CREDENTIALS
            and len(data) >= _CREDENTIALS.size
        ):
            _, uid, _ = _CREDENTIALS.unpack(data[: _CREDENTIALS.size])
            return uid == _UID
    return False


def _dropped(what: str) -> None:
    """Dropped quietly: one line a minute at most, never a traceback."""
    now = time.monotonic()
    if now - _dropped_at[0] >= 60:
        _dropped_at[0] = now
        log.warning("the change feed dropped %s", what)


def _batches(origin: str, ids: Iterable[str]) -> Iterator[list[str]]:
    """The ids, each once, in batches whose datagrams take at most DATAGRAM_BYTES."""
    batch: list[str] = []
    size = len(origin)
    for job_id in dict.fromkeys(ids):
        if batch and size + len(job_id) + 1 > DATAGRAM_BYTES:
            yield batch
            batch, size = [], len(origin)
        batch.append(job_id)
        size += len(job_id) + 1
    if batch:
        yield batch


def _datagram(origin: str, batch: list[str]) -> bytes:
    """``origin`` and the ids, one per line."""
    return "\n".join([origin] + batch).encode("utf-8")

"""One node: its main process, its HTTP processes and its callbacks process.

The main process opens the listening socket, runs the supervisor (with its worker
processes), the retention cleaner and the live reload of the administrator's file,
and starts ``[server] processes`` HTTP processes (``http_process``) that accept on
its socket, and the callbacks process (``delivery``).  Every process learns of the
others' job changes through the change feed (``store.feed``: SQLite's table,
PostgreSQL's LISTEN/NOTIFY).

``serve(settings)`` runs a node until SIGTERM or SIGINT, then shuts down cleanly: the
HTTP processes answer every held watch and finish their requests, the callbacks process
ends the attempts under way, the running jobs go back to the queue, the workers end.
A process that cannot start (an HTTP process, the callbacks process, a worker) is
started ``START_ATTEMPTS`` times in a row at most: then the node shuts down the same
way and ``serve`` raises ``NodeFailed`` (exit status 1) with that process's error.
The node dies whole: when its main process dies, however (SIGKILL included), its
children die with it (``support.parent_death``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_any
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, cast

from ..admin.node_health import NodeHealth
from ..engine.cleaner import RetentionCleaner
from ..engine.notifier import Notifier
from ..engine.process import START_ATTEMPTS
from ..engine.supervisor import Supervisor, default_node_name
from ..store import open_store
from ..store.feed import open_feed
from ..support import malloc, metrics, stop_signals
from ..support.lifeline import last_words
from ..support.parent_death import start_child
from . import callbacks_entry, http_entry
from .reload import ConfigReloader

if TYPE_CHECKING:
    from ..settings.config import Settings

log = logging.getLogger(__name__)

#: s an HTTP process gets to answer its watches and finish its requests at shutdown.
HTTP_STOP_TIMEOUT = 15.0
#: Pending connections the kernel keeps for the node (capped by net.core.somaxconn).
BACKLOG = 4096


class NodeFailed(SystemExit):
    """The node stopped because one of its processes could not start; ``why`` names
    it and its error (logged by ``serve``).  A SystemExit: ``xruntime serve`` exits
    with status 1."""

    def __init__(self, why: str) -> None:
        super().__init__(1)
        self.why = why


class Node:
    """The main process's parts: store, notifier and change feed, supervisor, cleaner."""

    def __init__(
        self, settings: Settings, services: Sequence[str], node_name: str | None = None
    ) -> None:
        self._settings = settings
        self.name = node_name or settings.node_name or default_node_name(settings.port)
        self.started_at = time.time()  # the node's uptime counts from here
        self.store = open_store(settings.database_url, background_checkpoints=True)
        self.notifier = Notifier()
        self.cleaner = RetentionCleaner(self.store, self.settings)
        self.supervisor = Supervisor(
            self.store, self.notifier, self.settings, self.name, self.cleaner, services
        )
        self.feed = open_feed(
            self.store,
            f"{self.name}/main/{os.getpid()}",
            on_job=self.supervisor.changed_elsewhere,  # it acts on stops and deletes
            on_queue=self.supervisor.work.ring,
        )
        self.feed.forget(f"{self.name}/")  # what a killed previous run of this node left
        self.notifier.bridge = self.feed

    def settings(self) -> Settings:
        """The settings in force (a reload swaps them as a whole)."""
        return self._settings

    def replace_settings(self, settings: Settings) -> None:
        self._settings = settings

    def start(self) -> None:
        self.store.checkpoint_in_background()  # (SQLite: see store.sqlite.WalCheckpointer)
        self.feed.start()
        self.supervisor.start()

    def health(self) -> NodeHealth:
        """Its worker processes up, and whether it shuts down (``/readyz``)."""
        slots = self.supervisor.slots
        up = sum(1 for slot in slots if slot.worker is not None and slot.worker.alive)
        return NodeHealth(up, len(slots), self.supervisor.closing)

    def close(self) -> None:
        self.notifier.close()
        self.supervisor.shutdown()
        self.feed.close()
        self.store.close()


#: The key of the callbacks process among the node's processes (the HTTP ones are 0, 1…).
CALLBACKS = -1


class NodeProcesses:
    """The node's HTTP processes, each passed the listening socket, and its callbacks
    process: started with ``spawn`` (the main process has threads); restarted when one
    dies.  (A fork server would let them share the imported code, but itself costs a
    process that holds all of it; spawned, the node's processes take less memory in
    all.)

    Restarts are bounded for a process that cannot start.  Each process says "up" on
    its control pipe once it serves, and sends the exception its entry ends with
    (``lifeline``).  ``failed_starts[key]`` counts the processes of that key in a row
    that ended without having said "up"; one that did say it (it served, then died,
    e.g. killed by the OOM killer after hours) sets it back to 0 and is replaced as
    often as that happens.  When the count reaches START_ATTEMPTS, nothing more is
    started: ``failure`` says which process and its error, and ``serve`` stops the
    node."""

    def __init__(self, sock: socket.socket, node: Node) -> None:
        self.sock = sock
        self.node = node
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: dict[int, tuple[BaseProcess, Connection]] = {}  # key → its control end
        self.stopping = False
        self.failed_starts: dict[int, int] = {}  # key → its starts in a row that never served
        self.failure: str | None = None  # set: the node stops (see the class's docstring)
        self.health = NodeHealth(0, node.settings().workers)  # as last told (``tell``)

    def start(self, http_count: int) -> None:
        for index in range(http_count):
            self._start(index)
        self._start_callbacks_when_wanted()

    def _start_callbacks_when_wanted(self) -> None:
        """The callbacks process runs once ``[callbacks] allowed`` lists a target (at the
        start or after a reload): a node without callbacks spares its memory (~50 MB).
        Events a node could not send while nothing is allowed wait in the outbox."""
        if (
            CALLBACKS not in self.procs
            and not self.stopping
            and self.failure is None
            and self.node.settings().callbacks.allowed
        ):
            self._start(CALLBACKS)

    def _start(self, index: int) -> None:
        receiver, sender = self.ctx.Pipe()  # (duplex: the process answers on it: ``lifeline``)
        node = self.node
        if index == CALLBACKS:
            proc = self.ctx.Process(
                target=callbacks_entry.delivery_main,
                name="xruntime-callbacks",
                args=(node.settings(), node.name, receiver),
            )
        else:
            proc = self.ctx.Process(
                target=http_entry.http_main,
                name=f"xruntime-http-{index}",
                args=(self.sock, node.settings(), node.name, index, receiver, node.started_at),
            )
        start_child(proc)  # (from the main thread: see ``serve``)
        receiver.close()
        self.procs[index] = (proc, sender)
        if index != CALLBACKS:
            sender.send(("health", self.health))

    def send(self, message: tuple[object, ...]) -> None:
        """Send every process ``message``: ``("settings", new)`` or ``("stop",)``."""
        for _proc, conn in list(self.procs.values()):  # (from the reloader's thread)
            try:
                conn.send(message)
            except OSError:
                pass  # it died; ``watch`` restarts it

    def tell(self, health: NodeHealth) -> None:
        """Tell the HTTP processes the node's health (``/readyz``), when it changed."""
        if health == self.health:
            return
        self.health = health
        for index, (_proc, conn) in list(self.procs.items()):
            if index != CALLBACKS:
                try:
                    conn.send(("health", health))
                except OSError:
                    pass  # it died; ``watch`` restarts it

    def watch(self, timeout: float) -> None:
        """Wait up to ``timeout`` s; restart a process that died meanwhile (unless it
        could not start START_ATTEMPTS times in a row: then set ``failure``), and start
        the callbacks process once a reload allows a target."""
        self._start_callbacks_when_wanted()
        sentinels = {proc.sentinel: index for index, (proc, _) in self.procs.items()}
        for sentinel in wait_for_any(list(sentinels), timeout):
            index = sentinels[cast(int, sentinel)]  # (one of the descriptors it was given)
            proc, conn = self.procs[index]
            proc.join(1)
            up, error = last_words(conn)
            conn.close()
            assert proc.pid is not None  # (it was started: ``_start`` starts it)
            metrics.process_died(proc.pid)
            if self.stopping or self.failure is not None:
                continue
            ended = f"{_name(index)} (pid {proc.pid}) exited with {proc.exitcode}"
            if up:
                self.failed_starts[index] = 0
                log.error("%s%s; starting another", ended, f" ({error})" if error else "")
                self._start(index)
                continue
            failed = self.failed_starts[index] = self.failed_starts.get(index, 0) + 1
            why = error or f"exited with {proc.exitcode}"
            if failed >= START_ATTEMPTS:
                self.failure = f"{_name(index)} could not start, {failed} times in a row: {why}"
                continue
            log.error(
                "%s before it was up (%s); starting another (start %d of at most %d)",
                ended,
                why,
                failed + 1,
                START_ATTEMPTS,
            )
            self._start(index)

    def stop(self, timeout: float = HTTP_STOP_TIMEOUT) -> None:
        self.stopping = True
        self.send(("stop",))
        deadline = time.monotonic() + timeout
        for proc, conn in self.procs.values():
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                log.warning("process %s did not stop in time; killed", proc.pid)
                proc.kill()
                proc.join(2)
            conn.close()


def _name(index: int) -> str:
    return "the callbacks process" if index == CALLBACKS else f"HTTP process {index}"


def listen(host: str, port: int) -> socket.socket:
    """The node's listening socket; OSError when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(settings: Settings, services: Sequence[str], reload_path: str | None = None) -> None:
    """Run a node of ``services`` (names, the registry's) until SIGTERM/SIGINT.  With
    ``reload_path``, edits of that file are applied live, in every process
    (xruntime.serving.reload).

    Either signal stops the node cleanly at any moment, also while it starts: until the
    node is made, ``support.stop_signals`` only records it (``xruntime serve`` catches
    it so from its first moment); then ``on_signal`` takes over, acts on one recorded
    before, and what is left of the start-up is skipped.  The children are started by
    this thread (the HTTP processes, the callbacks process) and by the worker slots'
    threads, which live as long as the node: each child dies with the main process,
    however that one dies (``support.parent_death``)."""
    stop_signals.catch()  # (``xruntime serve`` did already)
    came = stop_signals.received()
    if came is not None:
        log.info("signal %s: the node does not start", came.name)
        return
    sock = listen(settings.host, settings.port)  # first: a taken port stops us here
    metrics.use_directory()  # before any process records a metric
    _raise_file_limit()
    malloc.share_one_heap()  # (before any thread: it stores large results)
    # SIGHUP means "re-read the configuration" to the main process alone (its children
    # ignore it: ``support.parent_death``); ignored until the reloader takes it
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    node = Node(settings, services)
    children = NodeProcesses(sock, node)
    stop = threading.Event()
    reloader = None

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        node.supervisor.closing = True
        children.tell(node.health())  # /readyz: 503 while the jobs are handed back
        children.stopping = True  # processes that exit now are not replaced
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    early = stop_signals.received()
    if early is not None:  # it came while the node was being made
        on_signal(early, None)
    failure = None
    try:
        if not stop.is_set():
            children.start(settings.http_processes())
        if not stop.is_set():
            node.start()
        if reload_path and not stop.is_set():
            reloader = ConfigReloader(
                node.settings,
                node.replace_settings,
                reload_path,
                services,
                [lambda new: children.send(("settings", new))],
            )
            reloader.start()
            signal.signal(signal.SIGHUP, lambda *_: reloader.wake.set())
        if not stop.is_set():
            log.info(
                "xruntime node %s serving on http://%s:%s (%d HTTP processes of %d threads, "
                "%d workers, database %s)",
                node.name,
                settings.host,
                sock.getsockname()[1],
                settings.http_processes(),
                settings.threads,
                settings.workers,
                _safe_url(settings.database_url),
            )
        while not stop.is_set():
            children.watch(0.5)
            children.tell(node.health())
            failure = children.failure or node.supervisor.failure
            if failure is not None:
                break
    finally:
        if reloader is not None:
            reloader.stopped = True
        stopping = threading.Thread(target=children.stop, name="children-stop")
        stopping.start()  # watches answer while the jobs are handed back
        node.close()
        stopping.join()
        sock.close()
        metrics.release_directory()
        if failure is None:
            log.info("xruntime node %s stopped", node.name)
    if failure is not None:  # the one line that says why the node is not running
        log.error("xruntime node %s stopped: %s", node.name, failure)
        raise NodeFailed(failure)


def _raise_file_limit() -> None:
    """Every held watch is an open connection: allow as many as the system lets a
    process have (the soft limit is often 1 024; the hard one much higher).  The HTTP
    processes inherit it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1_048_576)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
    if hard < 20_000:
        log.warning("at most %d open files per process: each held watchJob is one connection", hard)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)

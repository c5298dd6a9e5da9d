"""One HTTP process of a node: every binding, served by uvicorn on the node's socket.

A node runs ``[server] processes`` of these beside its main process (which runs the
supervisor and the worker processes).  Each has its own event loop (uvloop), its own
store connections, its own held watches and its own pool for blocking work
(``[server] threads``); the kernel spreads the connections over them, as they all
accept on the one listening socket the main process opened.  Changes reach them
through the change feed (``store.feed``); the main process sends them the settings
after a reload, and "stop" at shutdown, over a pipe whose end also tells them that
the main process is gone; on it they answer that they are up, or the error they end
with (``support.lifeline``: a process that cannot start is not restarted for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

import uvicorn

from ..admin.metrics_page import MetricsPage
from ..admin.node_health import NodeHealth
from ..admin.node_status import Snapshot, snapshot
from ..admin.readiness import Liveness, Readiness
from ..admin.status_page import StatusPage, ToStatus
from ..admin.status_stream import StatusEvents, StatusFeed, StatusJson
from ..bindings.json_binding import JsonBinding
from ..bindings.jsonrpc import JsonRpcBinding
from ..bindings.ogcapi.binding import OgcApiBinding
from ..bindings.soap import SoapBinding
from ..engine.notifier import Notifier
from ..operations.dispatch import Dispatcher
from ..operations.jobs import JobManager
from ..operations.runtime_service import served_services
from ..operations.watching import Watches
from ..store import open_store
from ..store.changes import QUEUE
from ..store.feed import open_feed
from ..support import blocking, malloc, metrics
from ..support.lifeline import say_up
from ..support.logs import set_level, setup_logging
from ..web.asgi import XRuntimeApp
from ..web.connection_guard import guarded_protocol

if TYPE_CHECKING:
    from ..settings.config import Settings

log = logging.getLogger(__name__)

#: s the in-flight requests get at shutdown (held watches answer at once).
GRACEFUL = 10


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: this process installs its own.
    ``up`` is called once it accepts connections."""

    def __init__(self, config: uvicorn.Config, up: Callable[[], None]) -> None:
        super().__init__(config)
        self._up = up

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._up()


class HttpProcess:
    """One HTTP process's parts: its store, notifier and change feed, the operation
    layer, and the ASGI application uvicorn serves on the node's socket.  ``control``
    is its end of the pipe from the main process."""

    def __init__(
        self,
        sock: socket.socket,
        settings: Settings,
        node_name: str,
        index: int,
        control: Connection,
        node_started_at: float,
    ) -> None:
        self.sock = sock
        self._settings = settings
        self.control = control
        self.index = index
        services = served_services()
        self.store = open_store(settings.database_url, background_checkpoints=True)
        self.notifier = Notifier()
        self.watches = Watches(self.store, self.notifier)
        self.jobs = JobManager(
            self.store, self.notifier, self.settings, node_name, self.watches, services=services
        )
        self.jobs.started_at = node_started_at  # uptime is the node's, not this process's
        self.feed = open_feed(
            self.store,
            f"{node_name}/http{index}/{os.getpid()}",
            on_job=self.notifier.notify_local,
            on_queue=lambda: self.notifier.notify_local(QUEUE),
        )
        self.notifier.bridge = self.feed
        dispatcher = Dispatcher(self.jobs, services)

        def node_snapshot() -> Snapshot:
            return snapshot(self.store, node_name, settings.workers, node_started_at)

        self.app = XRuntimeApp(
            {
                "/services/rs": JsonBinding(dispatcher, self.settings),
                "/services/ws": SoapBinding(dispatcher, self.settings),
                "/services/rpc": JsonRpcBinding(dispatcher, self.settings),
                "/ogcapi": OgcApiBinding(dispatcher, self.settings),
            },
            self.settings,
            pages={
                "/": ToStatus(),
                "/status": StatusPage(),
                "/status/events": StatusEvents(StatusFeed(node_snapshot, self.notifier)),
                "/status.json": StatusJson(node_snapshot),
                "/metrics": MetricsPage(self.store, node_name, self.settings),
                "/healthz": Liveness(),
                "/readyz": Readiness(
                    self.store, self.jobs.disk_room, self.settings, lambda: self.health
                ),
            },
        )
        self.server: _Server | None = None
        #: what the main process last said of the node (``/readyz``): not ready until
        #: it has said its workers are up
        self.health = NodeHealth(0, settings.workers)

    def settings(self) -> Settings:
        """The settings in force (the main process sends new ones after a reload)."""
        return self._settings

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        blocking.install(loop, self._settings.threads)
        # SIGTERM alone: SIGINT (Ctrl-C reaches every process of the terminal's group)
        # stays ignored, the main process tells it "stop" (``support.parent_death``)
        loop.add_signal_handler(signal.SIGTERM, self.shutdown)
        loop.add_reader(self.control.fileno(), self._from_main)
        config = uvicorn.Config(
            self.app,
            http=guarded_protocol(self.settings),
            lifespan="off",
            log_config=None,
            access_log=False,
            # (timeout_keep_alive: [server] keep_alive_timeout, in guarded_protocol)
            timeout_graceful_shutdown=GRACEFUL,
            server_header=False,
            proxy_headers=False,
        )  # X-Forwarded-* never move an address
        config.load()
        metrics.recorded()  # prometheus_client's import and files now, not in a first request
        # What exists now (the modules, the services' types, the app) lives as long as
        # the process: full collections, which come during bursts of requests, need not
        # walk it again each time.
        gc.freeze()
        self.server = _Server(config, self._up)
        self.feed.start(loop)  # changes are received on the loop, where the watches wait
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            self.feed.close()
            self.store.close()

    def _up(self) -> None:
        log.info("HTTP process %d is up (pid %d)", self.index, os.getpid())
        say_up(self.control)  # from now on, its end is a crash, not a failed start

    def shutdown(self) -> None:
        """Answer every held watch now, finish the requests in flight, then exit."""
        if self.server is not None and not self.server.should_exit:
            self.notifier.close()
            self.server.should_exit = True

    def _from_main(self) -> None:
        try:
            message = self.control.recv()
        except (EOFError, OSError):  # the main process is gone: so is the node
            asyncio.get_running_loop().remove_reader(self.control.fileno())
            log.warning("HTTP process %d: the node's main process is gone; stopping", self.index)
            self.shutdown()
            return
        if message[0] == "settings":
            self._settings = message[1]
            set_level(self._settings.log_level, f"HTTP process {self.index}")
            log.debug("HTTP process %d: the settings of a reload are in force", self.index)
        elif message[0] == "health":
            self.health = message[1]
        elif message[0] == "stop":
            self.health = NodeHealth(self.health.workers_up, self.health.workers, closing=True)
            self.shutdown()


def http_main(
    sock: socket.socket,
    settings: Settings,
    node_name: str,
    index: int,
    control: Connection,
    node_started_at: float,
) -> None:
    """Entry point of an HTTP process (started by ``node.NodeProcesses``)."""
    setup_logging(form=settings.log_format, level=settings.log_level)
    malloc.share_one_heap()  # before any thread
    import uvloop

    process = HttpProcess(sock, settings, node_name, index, control, node_started_at)
    uvloop.run(process.serve())

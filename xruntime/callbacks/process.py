"""A node's callbacks process: it delivers the callbacks (``delivery``), beside the main
process and the HTTP processes; the main process starts it (``serving.node``).

In the main process, the deliveries took the GIL and SQLite's writer turns
(``store.sqlite.WriterTurns``) from the worker slots, whose thread runs every job's
cycle: the node ran its jobs slower by more than the deliveries' own cost
(docs/architecture.md, "Callbacks under load").  Here they share neither.  It learns of
job changes through the change feed (``store.feed``), as the HTTP processes do; the
main process sends it the settings after a reload and "stop" at shutdown over a pipe,
whose end also tells it that the main process is gone, and starts another when it dies
(it answers on the pipe that it is up, or the error it ends with: ``lifeline``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from ..store import open_store
from ..store.feed import open_feed
from ..support import lifeline
from ..support.logs import set_level, setup_logging
from ..support.parent_death import die_with_parent
from .delivery import CallbackDelivery

if TYPE_CHECKING:
    from ..settings.config import Settings

log = logging.getLogger(__name__)

#: The process's name in ps and top (Linux; 15 characters at most).
PROCESS_NAME = "xr-callbacks"


def delivery_main(settings: Settings, node_name: str, control: Connection) -> None:
    """Entry point of the callbacks process (started by ``serving.node.NodeProcesses``):
    first of all, it ignores Ctrl-C and ends with the main process
    (``support.parent_death``)."""
    die_with_parent()
    with lifeline.reporting(control):
        _deliver(settings, node_name, control)


def _deliver(settings: Settings, node_name: str, control: Connection) -> None:
    setup_logging(form=settings.log_format, level=settings.log_level)
    try:  # its name in ps and top, beside the HTTP processes'
        with open("/proc/self/comm", "w") as comm:
            comm.write(PROCESS_NAME)
    except OSError:
        pass  # not Linux: it goes unnamed
    stop = threading.Event()
    # SIGTERM alone: SIGINT (Ctrl-C reaches every process of the terminal's group) stays
    # ignored, the main process sends "stop"
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    current = [settings]
    store = open_store(settings.database_url, background_checkpoints=True)
    delivery = CallbackDelivery(store, lambda: current[0], node_name)
    feed = open_feed(
        store,
        f"{node_name}/callbacks/{os.getpid()}",
        on_job=delivery.changed,
        on_queue=lambda: None,  # new work is the worker slots' business
    )
    feed.start()
    delivery.start()
    log.info("callbacks process is up (pid %d)", os.getpid())
    lifeline.say_up(control)
    try:
        while not stop.is_set():
            if not control.poll(0.5):
                continue
            try:
                message = control.recv()
            except (EOFError, OSError):  # the main process is gone: so is the node
                log.warning("callbacks process: the node's main process is gone; stopping")
                break
            if message[0] == "settings":
                current[0] = message[1]
                set_level(current[0].log_level, "callbacks process")
            elif message[0] == "stop":
                break
    finally:
        delivery.close()
        feed.close()
        store.close()

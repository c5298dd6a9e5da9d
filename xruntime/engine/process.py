"""One worker process as the server sees it: started, told to stop, killed, replaced.

A worker slot (``engine.slot``) owns one at a time.  Everything that touches the
operating system's process, its pipe and the two values it shares with the server (the
stop event and the ``StopReason``) is here, so that the slot reads as the rules of a
job's run, not as process plumbing.

Processes are started with ``spawn``: the server has threads, and fork would copy them.
A worker process dies with the node's main process, however that one died, and is deaf
to the terminal's Ctrl-C (``support.parent_death``: the slot's thread, which starts it,
lives as long as the node).
"""

import dataclasses
from multiprocessing.context import SpawnContext
from typing import TYPE_CHECKING

from ..support.parent_death import start_child
from .messages import Exit, FromWorker, Ready, RunJob, StartFailed, StopReason
from .supervisor_log import log
from .worker import worker_main

if TYPE_CHECKING:
    from ..settings.model import Settings

WORKER_START_TIMEOUT = 120.0  # s a new worker process gets to import the services
#: Starts in a row a node's process (a worker, an HTTP process) gets: when this many
#: end before the process is ready, the node stops with the last one's error instead
#: of starting it for ever (``engine.slot``, ``serving.node``).
START_ATTEMPTS = 3
KILL_JOIN_TIMEOUT = 5.0  # s a killed process gets to be reaped
EXIT_TIMEOUT = 2.0  # s an idle process asked to exit gets before it is killed
REAP_TIMEOUT = 1.0  # s to reap a process that died, so that its exit code is known


class CannotStart(Exception):
    """A worker process that did not become ready; the message says why in one line
    (``ValueError: …``, ``exited with 1``, …)."""


class WorkerProcess:
    """A worker process, its end of the pipe, and the stop it shares with the server."""

    def __init__(self, mp: SpawnContext, index: int) -> None:
        self.index = index
        self.conn, child = mp.Pipe()
        self._stop_event = mp.Event()
        self._stop_reason = mp.Value("i", StopReason.NOT_STOPPED, lock=False)
        self._process = mp.Process(
            target=worker_main,
            args=(child, self._stop_event, self._stop_reason),
            name=f"xruntime-worker-{index}",
            daemon=True,
        )
        self._child_conn = child
        self._killed = False
        self._settings_sent: object = None  # the node's settings whose own part it has

    def start(self) -> None:
        """Start the process and wait until it has imported the services; ``CannotStart``
        if it does not (the caller kills it).  Called by the worker slot's thread, which
        outlives the process: Linux kills the process when the thread that started it
        ends (``support.parent_death``)."""
        start_child(self._process)
        self._child_conn.close()
        if not self.conn.poll(WORKER_START_TIMEOUT):
            raise CannotStart(f"not ready after {WORKER_START_TIMEOUT:g} s")
        try:
            message = self.conn.recv()
        except (EOFError, OSError):  # it died before a word
            raise CannotStart(f"exited with {self.exit_code()}") from None
        if isinstance(message, StartFailed):
            raise CannotStart(message.error)
        if not isinstance(message, Ready):
            raise CannotStart(f"said {message!r} instead of being ready")
        log.info("worker %d started (pid %d)", self.index, self._process.pid)

    @property
    def alive(self) -> bool:
        return not self._killed and self._process.is_alive()

    @property
    def sentinel(self) -> int:
        """Ready (for ``multiprocessing.connection.wait``) when the process has ended."""
        return self._process.sentinel

    # ---------------------------------------------------------------- a job's run

    def clear_stop(self) -> None:
        """Forget the stop of the last run (before the signals for the next are taken)."""
        self._stop_event.clear()
        self._stop_reason.value = StopReason.NOT_STOPPED

    def run(self, job: RunJob, settings: "Settings") -> None:
        """Send the run, with the services' own part of ``settings`` (the node's, in
        force) only when the process was not given it yet: a new process, a reload."""
        if settings is not self._settings_sent:
            job = dataclasses.replace(job, settings=settings.services_own())
            self._settings_sent = settings
        self.conn.send(job)

    def receive(self) -> FromWorker | None:
        """The next message (the caller knows one is there); None once the pipe is broken."""
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def ask_to_stop(self, reason: StopReason) -> None:
        """Tell the running function to stop, at once (a shared event, not the pipe,
        which it may not read for a long while).  The first reason stays, but an abort
        overrides any: whatever the function returns then is thrown away."""
        if self._stop_reason.value == StopReason.NOT_STOPPED or reason == StopReason.ABORTED:
            self._stop_reason.value = reason
        self._stop_event.set()

    # ---------------------------------------------------------------- the end

    def exit_code(self) -> int | None:
        """The exit code of a process that died (None if it has not ended yet)."""
        self._process.join(REAP_TIMEOUT)
        return self._process.exitcode

    def kill(self) -> None:
        """Kill the process (if it runs) and close the pipe; safe to call again."""
        if self._killed:
            return
        self._killed = True
        if self._process.is_alive():
            self._process.kill()
        if self._process.pid is not None:
            self._process.join(KILL_JOIN_TIMEOUT)
        self.conn.close()
        self._child_conn.close()

    def end(self) -> None:
        """Ask an idle process to exit, killing it if it does not."""
        if self.alive:
            try:
                self.conn.send(Exit())
                self._process.join(EXIT_TIMEOUT)
            except OSError:
                pass
        self.kill()

"""What the parts of a node's supervisor share: the store, the notifier, the settings in
force, the node's name, the bell that wakes idle slots (``work``), whether the node is closing,
the stops and deletes no slot took yet, and the rules every part applies to a job run
here (its limits, the run its writes are fenced by).

``engine.supervisor``'s ``Supervisor`` is one of these, with the parts on top (the
slots, the outcome rules, the housekeeping); the parts are handed this, not the whole
supervisor, so that they sit below it.
"""

import multiprocessing
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..store import JobRecord, Run
from .messages import StopReason
from .work_bell import WorkBell

if TYPE_CHECKING:
    from ..settings.config import Limits, Settings
    from ..store import JobStore
    from .cleaner import RetentionCleaner
    from .notifier import Notifier


class PendingSignal(NamedTuple):
    """A stop or delete no slot took yet: the job may be between its claim and its run."""

    reason: StopReason
    why: str
    at: float  # time.monotonic() when it came


class Shared:
    """The state and the rules the supervisor's parts share."""

    def __init__(
        self,
        store: "JobStore",
        notifier: "Notifier",
        settings: Callable[[], "Settings"],
        node: str,
        cleaner: Optional["RetentionCleaner"] = None,
        services: Iterable[str] = (),
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.settings = settings  # a callable answering the settings in force
        self.node = node
        self.cleaner = cleaner
        self.services = list(services)  # the names of every service found (the registry's)
        #: (the settings it was read from, ``served_services``): read once per settings,
        #: not for every claim (a reload swaps the settings as a whole)
        self._served: tuple[object, list[str] | None] = (None, None)
        self.mp = multiprocessing.get_context("spawn")
        self.work = WorkBell()  # rung where work may be waiting: wakes an idle slot
        self.closing = False
        self.signal_lock = threading.Lock()
        self.pending_signals: dict[str, PendingSignal] = {}  # by job id
        #: where workers write their large results (engine.spill), while the node runs
        self.spill_folder: str | None = None
        #: why the node must stop (a worker that cannot start: ``fail``); None while it may run
        self.failure: str | None = None

    # ---------------------------------------------------------------- settings

    def limits_for(self, job: JobRecord) -> "Limits":
        return self.settings().limits_for(
            job.service, job.queueing_timeout, job.computation_timeout
        )

    def served_services(self) -> list[str] | None:
        """The services whose jobs this node runs; None when it runs every service's."""
        cfg = self.settings()
        read_from, served = self._served
        if read_from is not cfg:
            enabled = [name for name in self.services if cfg.service_enabled(name)]
            served = None if len(enabled) == len(self.services) else enabled
            self._served = (cfg, served)
        return served

    # ---------------------------------------------------------------- life

    def fail(self, why: str) -> None:
        """A part of the node cannot go on (``why``: which, and its error, in one line):
        the node stops with it (``serving.node.serve`` looks at ``failure``).  The
        first reason stays."""
        if self.failure is None:
            self.failure = why

    # ---------------------------------------------------------------- signals

    def forget_old_signals(self, older_than: float) -> None:
        """Drop the signals no slot took within ``older_than`` s: their job runs elsewhere."""
        with self.signal_lock:
            limit = time.monotonic() - older_than
            for job_id in [j for j, pending in self.pending_signals.items() if pending.at < limit]:
                del self.pending_signals[job_id]

    # ---------------------------------------------------------------- for the slots

    def run_of(self, job: JobRecord) -> Run:
        """The run of ``job`` that this node's slot holds: its writes are fenced by it."""
        return Run(self.node, job.attempts)

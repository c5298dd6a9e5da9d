"""The supervisor: one per node; claims queued jobs and runs them in worker processes.

It is what the node sees of the engine, and what its parts share (``engine.shared``,
which the parts are handed): the store, the notifier, the settings in force, the
node's name, the "work may be waiting" event, whether the node is closing.  The work
itself is split by idea:

* ``engine.slot``: a ``WorkerSlot`` thread per worker process claims jobs and drives
  their runs, enforcing stop, delete and the computation timeout;
* ``engine.process``: the worker process itself, started, stopped, killed, replaced;
* ``engine.messages``: what the slot and its worker process say over their pipe;
* ``engine.outcomes``: what becomes of a job when its run ends (done, retried,
  waiting for children, failed because its worker died or was killed, let go of);
* ``engine.housekeeping``: leases, recovery of dead nodes' jobs, the timeouts no
  worker sees, retention.

Here remain the node's life (start, shutdown), the stops and deletes that come from
outside (this node's HTTP processes, other nodes), and the rule of writes that must
not be lost while the store is unreachable (``persist``): a job's outcome (or its
hand-back) waits in the slot and is written once the store answers again; only the
leases of jobs a slot holds are renewed, so a job no slot holds any more runs out of
lease and is recovered.
"""

import socket
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TypeVar

from ..protocol.states import Status
from ..store import StoreFull, StoreUnavailable, result_files
from ..store.changes import MISSED
from . import spill
from .housekeeping import Housekeeping
from .messages import StopReason
from .outcomes import Outcomes
from .shared import PendingSignal, Shared
from .slot import WorkerSlot
from .supervisor_log import log

STORE_RETRY_MAX = 2.0  # s between tries of a write that waits for the store
CLOSING_PATIENCE = 5.0  # s a node shutting down keeps trying such a write

Answer = TypeVar("Answer")


def default_node_name(port: int) -> str:
    """A node's name: stable across restarts of the same server, unique per host+port."""
    return f"{socket.gethostname()}:{port}"


class Supervisor(Shared):
    """Runs the node's worker slots and its housekeeping (what they share: ``Shared``,
    whose constructor it takes as it is)."""

    #: one per ``[workers] count``, made at ``start``
    slots: Sequence[WorkerSlot] = ()

    @cached_property
    def outcomes(self) -> Outcomes:
        return Outcomes(self, self.persist)

    @cached_property
    def housekeeping(self) -> Housekeeping:
        return Housekeeping(self, self.outcomes, signals=self)

    # ---------------------------------------------------------------- life

    def start(self) -> None:
        self.housekeeping.recover(self.node)  # what this node ran when it last died
        # beside the result files a SQLite store keeps, so that a worker's file is
        # taken in by a rename (store.result_files); else in /dev/shm
        folder = self.store.result_folder
        self.spill_folder = spill.make_spill_folder(
            None if folder is None else result_files.make_private_folder(folder)
        )
        self.slots = [WorkerSlot(self, self.outcomes, i) for i in range(self.settings().workers)]
        for slot in self.slots:
            slot.start()
        self.housekeeping.start()

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop taking jobs, hand running jobs back to the queue, end the workers."""
        self.closing = True
        self.work.ring_all()
        for slot in self.slots:
            slot.poke()
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            slot.join(max(0.1, deadline - time.monotonic()))
        if self.spill_folder is not None and not any(slot.is_alive() for slot in self.slots):
            spill.remove_folder(self.spill_folder)  # (else at the next start of a node)

    # ---------------------------------------------------------------- from the operation layer

    def changed_elsewhere(self, job_id: str) -> None:
        """Another process (an HTTP process of this node, or another node) changed a
        job: if it runs here, or may have just been claimed here, and was stopped or
        deleted, act on it now (a signal for a run about to start waits for it).
        ``MISSED``: changes may have been lost; each job running here is checked."""
        if job_id == MISSED:
            for running in {slot.current for slot in self.slots}:
                if running is not None:
                    self.changed_elsewhere(running)
            return
        if not any(slot.current == job_id or slot.claiming for slot in self.slots):
            return
        try:
            rec = self.store.peek(job_id)
        except StoreUnavailable:  # the lease renewal finds the stop or delete later
            return
        if rec is None or rec.status == Status.DELETED:
            self.abort(job_id)
        elif rec.status == Status.STOPPING:
            self.stop(job_id)

    def held(self) -> list[str]:
        """The jobs the slots hold now (the only ones whose leases are renewed)."""
        return [job_id for job_id in (slot.current for slot in self.slots) if job_id]

    def stop(self, job_id: str) -> bool:
        return self._signal(job_id, StopReason.STOPPED)

    def abort(self, job_id: str, why: str = "it was deleted") -> bool:
        return self._signal(job_id, StopReason.ABORTED, why)

    def _signal(self, job_id: str, reason: StopReason, why: str = "it was deleted") -> bool:
        """Tell the slot running the job; if none does yet (it may be between its claim
        and the start of the run), the slot finds the signal when it starts."""
        with self.signal_lock:
            if any(slot.signal(job_id, reason, why) for slot in self.slots):
                return True
            self.pending_signals[job_id] = PendingSignal(reason, why, time.monotonic())
            return False

    # ---------------------------------------------------------------- for the slots

    def persist(
        self, write: Callable[[], Answer], what: str, full_is_final: bool = False
    ) -> Answer | None:
        """``write()``, a store write that must not be lost (a job's outcome, its
        hand-back), tried again while the store is unreachable; answers its answer.
        A node shutting down gives up after CLOSING_PATIENCE s (answering None): the
        job then runs out of lease and the next start of a node recovers it.
        ``full_is_final``: a full disk raises ``StoreFull`` at once instead (a result
        needs room that may never come back; its job fails instead: engine.outcomes)."""
        delay, waited, give_up_at = 0.05, False, None
        while True:
            try:
                answer = write()
            except StoreUnavailable as exc:
                if full_is_final and isinstance(exc, StoreFull):
                    raise
                if not waited:
                    log.warning("%s waits for the job store: %s", what, exc)
                    waited = True
                if self.closing:
                    give_up_at = give_up_at or time.monotonic() + CLOSING_PATIENCE
                    if time.monotonic() > give_up_at:
                        log.error(
                            "%s given up (shutting down, store unreachable); "
                            "its lease runs out and it is recovered",
                            what,
                        )
                        return None
                time.sleep(delay)
                delay = min(delay * 2, STORE_RETRY_MAX)
                continue
            if waited:
                log.info("%s written: the job store answers again", what)
            return answer

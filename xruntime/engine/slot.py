"""A worker slot: the thread in the server that claims jobs and drives one worker process.

The slot claims a job, sends it down the pipe, and then, until the run ends, waits on
three things at once: a message from the worker (progress, the outcome), the end of the
worker process, and a poke from another thread (a stop, a delete, the node shutting
down).  On each it enforces the rules of a running job:

* stop: the worker's stop event is set; the function winds down and returns;
* computation timeout: the same, with reason "timed out", and if the function does not
  return within ``STOP_GRACE`` its process is killed and the job fails;
* delete: the stop event is set and the process is killed if the function has not
  returned within ``DELETE_GRACE``; then the record is erased;
* a worker process that dies fails its job with ``InternalErrorFault`` and is replaced;
  one that cannot start (it dies, or says why, before it is ready) is tried
  ``START_ATTEMPTS`` times in a row, then the node stops with its error;
* shutdown: the running job is handed back to the queue untouched;
* the store unreachable for a while: progress is dropped but for the latest, which is
  written once the store answers (or with the outcome).

How the run ended is handed to the outcome rules (``engine.outcomes``); the process
itself is ``engine.process``.
"""

import math
import multiprocessing
import select
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from ..protocol.faults import InternalErrorFault, RequestTimedOutFault
from ..protocol.states import Status
from ..store import JobRecord, StoreUnavailable, now_ms
from ..support import metrics
from .child_jobs import cores_of
from .housekeeping import LEASE_MS
from .messages import Done, Progress, RunJob, StopReason
from .outcomes import Died, Ending, Killed, Outcomes, Returned
from .process import START_ATTEMPTS, CannotStart, WorkerProcess
from .shared import Shared
from .supervisor_log import log, outage_log

if TYPE_CHECKING:
    from ..settings.config import Limits

DELETE_GRACE = 3.0  # s a deleted job's function gets before its process is killed
STOP_GRACE = 5.0  # s a timed-out job's function gets to return its result
IDLE_CLAIM_PERIOD = 0.5  # s between an idle slot's looks for work (other nodes' jobs)
FAILED_SLOT_PAUSE = 0.5  # s a slot whose loop failed waits before it starts again
#: s a progress message waits before it is written: an outcome that follows within it
#: carries it instead (one write, one change, not two: most short jobs report progress
#: just before they return).  Watches answer progress no sooner than 250 ms after
#: they arrive (docs/protocol.md §4), so none answers later for it.
PROGRESS_SETTLE = 0.01
#: s after its worker has a job that the job's RUNNING (a claim, a resume) is told on
#: the change feed, unless the run ended, or reported progress, by then: that change is
#: told instead, and carries it (a job of a few ms costs its watches one notice and one
#: read, not two).  Watches answer a status change other than the end no sooner than
#: 250 ms after they arrive (docs/protocol.md §4).
RUNNING_SETTLE = 0.01


class WorkerSlot(threading.Thread):
    """One worker process and the thread in the server that drives it."""

    def __init__(self, shared: Shared, outcomes: Outcomes, index: int) -> None:
        super().__init__(name=f"worker-slot-{index}", daemon=True)
        self.sup = shared  # the supervisor's, which owns this slot
        self.outcomes = outcomes
        self.index = index
        self.worker: WorkerProcess | None = None
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self._idle = threading.Event()  # set by the supervisor's bell (``Shared.work``)
        self.current: str | None = None  # id of the job being run
        self.claiming = False  # between a claim and ``current`` being set
        self.discard = False  # the job was deleted: erase instead of finishing
        self.kill_at: float | None = None  # time.monotonic() past which the process is killed
        self.kill_reason: str | None = None
        self.kill_grace = 0.0  # the grace that ``kill_at`` ends
        self.failed_starts = 0  # starts of its worker in a row that did not become ready

    # ---------------------------------------------------------------- signals from outside

    def poke(self) -> None:
        """Wake the slot's loop, so that it looks at its state now."""
        self._wake_w.send_bytes(b"!")

    def signal(self, job_id: str, reason: StopReason, why: str = "it was deleted") -> bool:
        """Stop (or, with ABORTED, let go of: ``why``) the job if this slot runs it."""
        with self._lock:
            if self.current != job_id or self.worker is None:
                return False
            if reason == StopReason.ABORTED:
                self.discard = True
                self._arm_kill(DELETE_GRACE, why)
            self.worker.ask_to_stop(reason)
        self.poke()
        return True

    def _arm_kill(self, grace: float, why: str) -> None:
        """Kill the process ``grace`` s from now, unless an earlier kill is armed."""
        at = time.monotonic() + grace
        if self.kill_at is None or at < self.kill_at:
            self.kill_at, self.kill_reason, self.kill_grace = at, why, grace

    # ---------------------------------------------------------------- the loop

    def run(self) -> None:
        sup = self.sup
        saw_more: bool | None = None  # after a run: whether the look that found it saw more
        while not sup.closing:
            job = None
            try:
                if (self.worker is None or not self.worker.alive) and not self._start_worker():
                    if sup.failure is not None:
                        break  # the node stops
                    continue
                if sup.closing:  # it shut down while the worker started: claim nothing
                    break
                if saw_more is not None:
                    more, saw_more = saw_more, None
                    if sup.work.after_run(self._idle, more, IDLE_CLAIM_PERIOD):
                        continue  # (idle until a ring or the period's end)
                sup.work.looking()
                self.claiming = True
                claimed_at = now_ms()
                queued, waiting = sup.store.work_waiting()  # (no write where none can win)
                job = None
                if waiting:  # a parent whose children are done goes first: it runs already
                    job = sup.store.resume(
                        sup.node,
                        claimed_at,
                        LEASE_MS,
                        sup.served_services(),
                        f"resumed on worker {self.index}: its child jobs are done",
                    )
                resumed = job is not None
                if job is None and queued:
                    settings = sup.settings()
                    job = sup.store.claim(
                        sup.node,
                        claimed_at,
                        LEASE_MS,
                        sup.served_services(),
                        settings.running_limits(),
                        f"running on worker {self.index}",
                        between_owners=settings.auth.required,
                    )
                sup.work.seen(bool(queued or waiting), job is not None)
                if job is None:
                    self.claiming = False
                    sup.work.wait(
                        self._idle, self._idle_wait(claimed_at) if queued else IDLE_CLAIM_PERIOD
                    )
                    continue
                saw_more = waiting or queued > 1
                if saw_more:  # more than this slot took: the next idle one looks
                    sup.work.ring()
                self.execute(job, resumed)
            except StoreUnavailable as exc:  # the claim: nothing is held, wait for the store
                self.claiming = False
                outage_log.warning("worker slot %d cannot claim jobs: %s", self.index, exc)
                time.sleep(IDLE_CLAIM_PERIOD)
            except Exception:
                self.claiming = False
                log.exception("worker slot %d failed; restarting its process", self.index)
                if self.worker is not None:
                    self.worker.kill()
                if job is not None:
                    self._failed_here(job)
                time.sleep(FAILED_SLOT_PAUSE)
        if self.worker is not None:
            self.worker.end()

    def _start_worker(self) -> bool:
        """Start a worker process in place of the last one (which may have died after
        any number of jobs, as by the OOM killer: started again, as often as it
        happens); False when it did not become ready.  Counting is per slot and simple:
        ``failed_starts`` is the number of starts in a row that did not become ready,
        back to 0 at each start that does.  The START_ATTEMPTS-th such start in a row
        stops the node with the process's error (``Supervisor.fail``), rather than
        starting workers that cannot start for ever."""
        try:
            self._replace_worker()
        except CannotStart as exc:
            assert self.worker is not None
            self.worker.kill()
            if self.sup.closing:  # the node shuts down (and may have ended it): no failure
                return False
            self.failed_starts += 1
            if self.failed_starts >= START_ATTEMPTS:
                self.sup.fail(
                    f"worker {self.index} could not start, {self.failed_starts} times in a "
                    f"row: {exc}"
                )
            else:
                log.error(
                    "worker %d could not start: %s; starting another (start %d of at most %d)",
                    self.index,
                    exc,
                    self.failed_starts + 1,
                    START_ATTEMPTS,
                )
                time.sleep(FAILED_SLOT_PAUSE)
            return False
        self.failed_starts = 0
        return True

    def _replace_worker(self) -> None:
        """Start a new worker process, from this slot's thread: it lives as long as the
        node (its loop ends only after it ended its worker), and Linux kills a worker
        whose starting thread has ended (``support.parent_death``)."""
        if self.worker is not None:
            self.worker.kill()
        self.worker = WorkerProcess(self.sup.mp, self.index)
        self.worker.start()

    def _idle_wait(self, claimed_at: int) -> float:
        """How long an idle slot whose claim at ``claimed_at`` (ms) found nothing waits
        before it looks again, unless woken: IDLE_CLAIM_PERIOD, or less when a job
        waiting for its retry (planned on any node) falls due sooner, or fell due since
        that claim; the store knows when."""
        due = self.sup.store.next_due(claimed_at)
        if due is None:
            return IDLE_CLAIM_PERIOD
        return min(IDLE_CLAIM_PERIOD, max(0.0, (due - now_ms()) / 1000) + 0.001)

    def _failed_here(self, job: JobRecord) -> None:
        """A bug in this slot broke off the job's run: fail the job rather than leave
        it running for ever (a deleted one is erased)."""
        outcomes = self.outcomes
        fault = InternalErrorFault("the server failed while running this job; see its log")
        if outcomes.fail(job, fault, "server error") is False:
            outcomes.let_go(job)

    # ---------------------------------------------------------------- one job

    def execute(self, job: JobRecord, resumed: bool = False) -> None:
        """Run the claimed (or resumed) ``job`` on this slot's worker process, to its end."""
        sup = self.sup
        assert self.worker is not None
        assert job.started_at is not None  # claimed (or resumed): it started
        limits = sup.limits_for(job)
        queued_for = job.started_at - (job.not_before or job.queued_at)  # a retry: since it was due
        if not resumed:
            metrics.job_started(job.service, queued_for / 1000)
        if not resumed and limits.queueing_timeout_ms and queued_for > limits.queueing_timeout_ms:
            self.claiming = False
            fault = RequestTimedOutFault(
                f"the job waited {queued_for} ms in the queue, longer than its queueing timeout "
                f"of {limits.queueing_timeout_ms} ms"
            )
            self.outcomes.fail(job, fault, "queueing timeout")
            return
        with sup.signal_lock:
            with self._lock:
                self.current = job.id
                self.claiming = False
                self.discard = False
                self.kill_at = self.kill_reason = None
                self.worker.clear_stop()
            early = sup.pending_signals.pop(job.id, None)
        if early is not None:  # a stop or delete came between the claim and now
            self.signal(job.id, early.reason, early.why)
        if job.status == Status.STOPPING:  # a parent stopped while it waited for its children
            timeout_ms = limits.computation_timeout_ms
            over = timeout_ms and now_ms() >= job.started_at + timeout_ms
            self.signal(job.id, StopReason.TIMED_OUT if over else StopReason.STOPPED)
        try:
            # what its earlier runs started (§13); a result file: where it is, not its bytes
            children = sup.store.children_of(job.id, located=True)
        except StoreUnavailable as exc:  # claimed, not started: back to the queue
            outage_log.warning("job %s: its child jobs cannot be read: %s", job.id, exc)
            with self._lock:
                self.current = None
            self.outcomes.hand_back(job, "its child jobs could not be read")
            return
        log.debug(  # every job's: at DEBUG, not paid for on every run (its history keeps it)
            "job %s %s.%s %s%s on worker %d (attempt %d%s)",
            job.id,
            job.service,
            job.operation,
            Status.RUNNING,
            " again" if resumed else "",
            self.index,
            job.attempts,
            f", {len(children)} child jobs done" if children else "",
        )
        settings = sup.settings()  # (one reading: a reload swaps them as a whole)
        try:
            self.worker.run(
                RunJob(
                    job.id,
                    job.service,
                    job.operation,
                    job.request,
                    job.attempts,
                    job.retries,
                    children,
                    None,  # (the services' own settings: the process sends them if new)
                    sup.spill_folder,
                    sup.store.result_folder is not None,
                    cores_of(job, settings.workers),
                ),
                settings,
            )
            # its change (RUNNING, a resumed run) is told RUNNING_SETTLE after the worker
            # has its job, unless the run's end or progress is told first (``_drive``)
            ending = self._drive(job, limits)
            if ending is not None:
                self.outcomes.conclude(job, ending, deleted=self.discard)
        finally:
            with self._lock:
                self.current = None

    def _drive(self, job: JobRecord, limits: "Limits") -> Ending | None:
        """Relay the run's progress to the store and enforce its stop, delete and
        timeout rules until it ends; answers how (None: handed back at shutdown)."""
        sup = self.sup
        worker = self.worker
        assert worker is not None
        assert job.started_at is not None  # claimed (or resumed): it started
        deadline = None  # on this process's monotonic clock
        if limits.computation_timeout_ms:  # (the start is on the database's: see store.clock)
            deadline = (
                time.monotonic()
                + (job.started_at + limits.computation_timeout_ms - now_ms()) / 1000
            )
        progress = None  # progress not yet written (the outcome may follow)
        progress_due = None  # when it is written, unless the outcome comes first
        running_due: float | None = time.monotonic() + RUNNING_SETTLE  # (see RUNNING_SETTLE)
        ready = _Ready(worker.conn, worker.sentinel, self._wake_r)
        while True:
            now = time.monotonic()
            if progress_due is not None and now >= progress_due:
                assert progress is not None  # (a due time is set only with a progress)
                progress = self._write_progress(job, progress)
                progress_due = None
                if progress is None:  # written (and told: its change tells the status too)
                    running_due = None
            if running_due is not None and now >= running_due:
                sup.notifier.notify(job.id)
                running_due = None
            due = [t for t in (deadline, self.kill_at, progress_due, running_due) if t is not None]
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            message_in, ended, woken = ready.wait(timeout)
            if woken:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            if message_in:
                message = worker.receive()
                if message is None:
                    return self._died(job)
                # no ``return`` after a progress: the checks below run on every message,
                # so a stream of them cannot hold off a shutdown, a kill or a timeout
                if isinstance(message, Progress):
                    progress = message.progress
                    if progress_due is None:
                        progress_due = time.monotonic() + PROGRESS_SETTLE
                elif isinstance(message, Done):
                    return Returned(message.outcome, progress)
            elif ended:
                return self._died(job)
            if sup.closing:
                worker.kill()
                self.outcomes.hand_back(job, "node shutting down")
                return None
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at:
                return self._killed(job)
            if deadline is not None and now >= deadline:
                deadline = None
                self._time_out(job, limits)

    def _write_progress(self, job: JobRecord, progress: str) -> str | None:
        """Write the latest progress; answers it back when the store is away (kept:
        written later, or with the outcome), else None."""
        sup = self.sup
        try:
            if sup.store.set_progress(job.id, progress, sup.run_of(job)):
                sup.notifier.notify(job.id)
            return None
        except StoreUnavailable as exc:
            outage_log.warning("job %s: progress not written yet: %s", job.id, exc)
            return progress

    def _time_out(self, job: JobRecord, limits: "Limits") -> None:
        """The computation timeout is over: the job is STOPPING, and killed if it does
        not return within STOP_GRACE."""
        sup = self.sup
        try:
            if sup.store.request_stop(job.id, "stop asked: computation timeout"):
                sup.notifier.notify(job.id)
                log.info(
                    "job %s %s (computation timeout of %d ms)",
                    job.id,
                    Status.STOPPING,
                    limits.computation_timeout_ms,
                )
        except StoreUnavailable as exc:  # the stop below is what counts
            outage_log.warning("job %s: %s not written: %s", job.id, Status.STOPPING, exc)
        self.signal(job.id, StopReason.TIMED_OUT)
        with self._lock:
            self._arm_kill(STOP_GRACE, "the computation timeout stopped it")

    def _died(self, job: JobRecord) -> Died:
        assert self.worker is not None
        code = self.worker.exit_code()
        self.worker.kill()
        log.error("worker %d died (exit code %s) while running job %s", self.index, code, job.id)
        return Died(code)

    def _killed(self, job: JobRecord) -> Killed:
        assert self.worker is not None
        self.worker.kill()
        log.warning(
            "job %s: worker %d killed: the operation did not return after %s",
            job.id,
            self.index,
            self.kill_reason,
        )
        return Killed(self.kill_grace)


class _Ready:
    """What a running job's slot waits on: a message from the worker, the end of its
    process, a poke.  One ``poll`` object for the run, registered once, rather than
    ``multiprocessing.connection.wait``, which builds and tears down a selector on every
    call (a few per job)."""

    def __init__(self, conn: Connection, sentinel: int, wake: Connection) -> None:
        self._message, self._ended, self._wake = conn.fileno(), sentinel, wake.fileno()
        self._poll = select.poll()
        for fd in (self._message, self._ended, self._wake):
            self._poll.register(fd, select.POLLIN)

    def wait(self, timeout: float | None) -> tuple[bool, bool, bool]:
        """(a message came, the process ended, a poke came) within ``timeout`` s (None:
        until one of them).  Any event counts: a hang-up too, as for ``wait``."""
        events = self._poll.poll(None if timeout is None else math.ceil(timeout * 1000))
        fds = {fd for fd, _ in events}
        return self._message in fds, self._ended in fds, self._wake in fds

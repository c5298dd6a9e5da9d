"""The supervisor: one per node; claims queued jobs and runs them in worker processes.

Each worker process has a *slot*, a thread in the server that claims a job, sends it
down the pipe, relays progress and the outcome to the store, and enforces the stop,
delete and timeout rules:

* stop: the worker's stop event is set; the function winds down and returns;
* computation timeout: the same, with reason "timed out", and if the function does not
  return within ``STOP_GRACE`` its process is killed and the job fails;
* delete: the stop event is set and the process is killed if the function has not
  returned within ``DELETE_GRACE``; then the record is erased;
* a worker process that dies fails its job with ``InternalErrorFault`` and is replaced;
* shutdown: running jobs are handed back to the queue untouched;
* the store unreachable for a while: a job's outcome (or its hand-back) waits in the
  slot and is written once the store answers again; progress meanwhile is dropped but
  for the latest; only the leases of jobs a slot holds are renewed, so a job no slot
  holds any more runs out of lease and is recovered.

Processes are started with ``spawn``: the server has threads, and fork would copy them.
"""
import collections
import json
import logging
import multiprocessing
import random
import socket
import threading
import time
import uuid
from multiprocessing.connection import wait as wait_for_ready

from ..support import metrics
from ..support.logs import OncePerPeriod
from ..protocol.codec import dumps, encode_fault
from ..protocol.faults import (InternalErrorFault, QueueOverflowFault, QuotaExceededFault,
                               RequestTimedOutFault, TransientFault)
from ..operations.jobs import bulk_progress, stop_children
from ..store import JobRecord, JobStore, QueueFull, QueueLimit, Run, StoreUnavailable, now_ms
from .worker import ABORTED, STOPPED, TIMED_OUT, worker_main

log = logging.getLogger("xruntime.supervisor")
outage_log = OncePerPeriod(log, 5.0)
#: one throttled log per housekeeping step, so that one failing every second hides no other
step_failure_logs = collections.defaultdict(lambda: OncePerPeriod(log, 60.0))

DELETE_GRACE = 3.0        # s a deleted job's function gets before its process is killed
STOP_GRACE = 5.0          # s a timed-out job's function gets to return its result
LEASE_MS = 30_000         # a running job's lease; another node may recover it after that
HOUSEKEEPING_PERIOD = 1.0
LEASE_RENEW_PERIOD = 5.0
IDLE_CLAIM_PERIOD = 0.5   # an idle slot also looks for work this often (other nodes' jobs)
WORKER_START_TIMEOUT = 120.0
STORE_RETRY_MAX = 2.0     # s between tries of a write that waits for the store
CLOSING_PATIENCE = 5.0    # s a node shutting down keeps trying such a write


def fault_json(fault) -> str:
    return dumps(encode_fault(fault))


def default_node_name(port: int) -> str:
    """A node's name: stable across restarts of the same server, unique per host+port."""
    return f"{socket.gethostname()}:{port}"


def queue_full_fault(full: QueueFull, children: int):
    """The fault of a parent whose ``children`` did not fit in the queue: as a start
    past the same limit is answered."""
    if full.own:
        return QuotaExceededFault(
            f"this job's {children} child jobs would take your queued {full.service} jobs past your "
            f"max_queued of {full.limit}; none was queued",
            hint="Ask for fewer child jobs (e.g. a lower parallelism), or wait until fewer of your jobs are queued.")
    return QueueOverflowFault(
        f"this job's {children} child jobs would take the queue past its max_queued of {full.limit}; "
        "none was queued", hint="Try again later, when fewer jobs are waiting, or ask for fewer child jobs.")


class WorkerSlot(threading.Thread):
    """One worker process and the thread in the server that drives it."""

    def __init__(self, supervisor, index: int):
        super().__init__(name=f"worker-slot-{index}", daemon=True)
        self.sup = supervisor
        self.index = index
        self.process = None
        self.conn = None
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = multiprocessing.Pipe(duplex=False)
        self.current = None          # id of the job being run
        self.claiming = False        # between a claim and ``current`` being set
        self.discard = False         # the job was deleted: erase instead of finishing
        self.kill_at = None          # time.monotonic() past which the process is killed
        self.kill_reason = None

    # ---------------------------------------------------------------- process

    def spawn(self):
        ctx = self.sup.mp
        parent, child = ctx.Pipe()
        self.stop_event = ctx.Event()
        self.stop_reason = ctx.Value("i", 0, lock=False)
        self.process = ctx.Process(target=worker_main, args=(child, self.stop_event, self.stop_reason),
                                   name=f"xruntime-worker-{self.index}", daemon=True)
        self.process.start()
        child.close()
        self.conn = parent
        if not parent.poll(WORKER_START_TIMEOUT) or parent.recv() != ("ready",):
            raise RuntimeError("worker process did not start")
        log.info("worker %d started (pid %d)", self.index, self.process.pid)

    def kill(self):
        if self.process is not None and self.process.is_alive():
            self.process.kill()
        if self.process is not None:
            self.process.join(5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def end(self):
        """Ask an idle worker process to exit, killing it if it does not."""
        if self.process is None:
            return
        try:
            self.conn.send(("exit",))
            self.process.join(2)
        except OSError:
            pass
        self.kill()

    # ---------------------------------------------------------------- signals from outside

    def poke(self):
        self._wake_w.send_bytes(b"!")

    def signal(self, job_id: str, reason: int, why: str = "it was deleted") -> bool:
        """Stop (or, with ABORTED, let go of: ``why``) the job if this slot runs it."""
        with self._lock:
            if self.current != job_id:
                return False
            if reason == ABORTED:
                self.discard = True
                self._arm_kill(DELETE_GRACE, why)
            if self.stop_reason.value == 0 or reason == ABORTED:
                self.stop_reason.value = reason
            self.stop_event.set()
        self.poke()
        return True

    def _arm_kill(self, grace, why):
        at = time.monotonic() + grace
        if self.kill_at is None or at < self.kill_at:
            self.kill_at, self.kill_reason = at, why

    # ---------------------------------------------------------------- the loop

    def run(self):
        sup = self.sup
        while not sup.closing:
            job = None
            try:
                if self.process is None or not self.process.is_alive():
                    self.kill()
                    self.spawn()
                sup.work.clear()
                self.claiming = True
                claimed_at = now_ms()
                # a parent whose children are done goes first: it is running already
                job = sup.store.resume(sup.node, claimed_at, LEASE_MS, sup.served_services(),
                                       f"resumed on worker {self.index}: its child jobs are done")
                resumed = job is not None
                if job is None:
                    job = sup.store.claim(sup.node, claimed_at, LEASE_MS, sup.served_services(),
                                          sup.settings().running_limits(), f"running on worker {self.index}")
                if job is None:
                    self.claiming = False
                    sup.work.wait(sup.idle_wait(claimed_at))
                    continue
                self.execute(job, resumed)
            except StoreUnavailable as exc:      # the claim: nothing is held, wait for the store
                self.claiming = False
                outage_log.warning("worker slot %d cannot claim jobs: %s", self.index, exc)
                time.sleep(IDLE_CLAIM_PERIOD)
            except Exception:
                self.claiming = False
                log.exception("worker slot %d failed; restarting its process", self.index)
                self.kill()
                if job is not None:
                    self._failed_here(job)
                time.sleep(0.5)
        self.end()

    def _failed_here(self, job):
        """A bug in this slot broke off the job's run: fail the job rather than leave
        it running for ever (a deleted one is erased)."""
        sup = self.sup
        fault = InternalErrorFault("the server failed while running this job; see its log")
        if sup.fail(job, fault, "server error") is False:
            sup.let_go(job)

    def execute(self, job, resumed=False):
        sup = self.sup
        limits = sup.limits_for(job)
        queued_for = job.started_at - (job.not_before or job.queued_at)   # a retry: since it was due
        if not resumed:
            metrics.job_started(job.service, queued_for / 1000)
        if not resumed and limits.queueing_timeout_ms and queued_for > limits.queueing_timeout_ms:
            self.claiming = False
            fault = RequestTimedOutFault(
                f"the job waited {queued_for} ms in the queue, longer than its queueing timeout "
                f"of {limits.queueing_timeout_ms} ms")
            sup.fail(job, fault, "queueing timeout")
            return
        with sup.signal_lock:
            with self._lock:
                self.current = job.id
                self.claiming = False
                self.discard = False
                self.kill_at = self.kill_reason = None
                self.stop_event.clear()
                self.stop_reason.value = 0
            early = sup.pending_signals.pop(job.id, None)
        if early is not None:            # a stop or delete came between the claim and now
            self.signal(job.id, early[0])
        if job.status == "STOPPING":     # a parent stopped while it waited for its children
            over = limits.computation_timeout_ms and now_ms() >= job.started_at + limits.computation_timeout_ms
            self.signal(job.id, TIMED_OUT if over else STOPPED)
        sup.notifier.notify(job.id)
        try:
            children = sup.store.children_of(job.id)     # what its earlier runs started (§13)
        except StoreUnavailable as exc:     # claimed, not started: back to the queue
            outage_log.warning("job %s: its child jobs cannot be read: %s", job.id, exc)
            with self._lock:
                self.current = None
            if sup.persist(lambda: sup.store.hand_back(job.id, sup.node, sup.run_of(job)),
                           f"the hand-back of job {job.id}") is False:
                sup.let_go(job)          # deleted, or taken over while the store was away
            return
        log.info("job %s %s.%s %s on worker %d (attempt %d%s)", job.id, job.service, job.operation,
                 "RUNNING again" if resumed else "RUNNING", self.index, job.attempts,
                 f", {len(children)} child jobs done" if children else "")
        try:
            self.conn.send(("run", job.id, job.service, job.operation, job.request, job.attempts,
                            job.retries, children))
            self._drive(job, limits)
        finally:
            with self._lock:
                self.current = None

    def _drive(self, job, limits):
        sup = self.sup
        deadline = None                  # on this process's monotonic clock
        if limits.computation_timeout_ms:  # (the start is on the database's: see store.clock)
            deadline = time.monotonic() + (job.started_at + limits.computation_timeout_ms - now_ms()) / 1000
        progress = None                  # progress not yet written (the outcome may follow)
        while True:
            if progress is not None and not self.conn.poll(0):
                try:
                    if sup.store.set_progress(job.id, progress, sup.run_of(job)):
                        sup.notifier.notify(job.id)
                    progress = None
                except StoreUnavailable as exc:   # kept: written later, or with the outcome
                    outage_log.warning("job %s: progress not written yet: %s", job.id, exc)
            now = time.monotonic()
            due = [t for t in (deadline, self.kill_at) if t is not None]
            timeout = max(0.0, min(due) - now) if due else None
            ready = wait_for_ready([self.conn, self.process.sentinel, self._wake_r], timeout)
            if self._wake_r in ready:
                while self._wake_r.poll():
                    self._wake_r.recv_bytes()
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is None:
                    self._died(job)
                    return
                # no ``continue`` after a progress: the checks below run on every message,
                # so a stream of them cannot hold off a shutdown, a kill or a timeout
                if message[0] == "progress":
                    progress = message[2]
                elif message[0] == "done":
                    self._done(job, message[2], message[3], progress)
                    return
            elif self.process.sentinel in ready:
                self._died(job)
                return
            if sup.closing:
                self.kill()
                handed = sup.persist(lambda: sup.store.hand_back(job.id, sup.node, sup.run_of(job)),
                                     f"the hand-back of job {job.id}")
                if handed is False:      # deleted, or taken over while the store was away
                    sup.let_go(job)
                    return
                sup.notifier.notify(job.id)
                if handed:
                    log.info("job %s handed back to the queue (node shutting down)", job.id)
                return
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at:
                self._killed(job)
                return
            if deadline is not None and now >= deadline:
                deadline = None
                try:
                    if sup.store.request_stop(job.id, "stop asked: computation timeout"):
                        sup.notifier.notify(job.id)
                        log.info("job %s STOPPING (computation timeout of %d ms)",
                                 job.id, limits.computation_timeout_ms)
                except StoreUnavailable as exc:    # the stop below is what counts
                    outage_log.warning("job %s: STOPPING not written: %s", job.id, exc)
                self.signal(job.id, TIMED_OUT)
                with self._lock:
                    self._arm_kill(STOP_GRACE, "the computation timeout stopped it")

    def _done(self, job, kind, payload, progress=None):
        sup = self.sup
        if self.discard:
            sup.let_go(job)
            return
        if kind == "children":
            self._wait_for_children(job, json.loads(payload))
            return
        if kind in ("transient", "retry"):
            kind, payload = self._retry(job, kind, payload)
            if kind is None:
                return
        status = "SUCCEEDED" if kind == "result" else "FAILED"
        won = sup.persist(lambda: sup.store.finish(
            job.id, status, now_ms(), result=payload if kind == "result" else None,
            fault=payload if kind == "fault" else None, progress=progress, run=sup.run_of(job)),
            f"the outcome of job {job.id}")
        if won is None:                  # given up at shutdown: recovered later
            return
        if not won:                      # deleted while it finished, or no longer this run's
            sup.let_go(job)
            return
        sup.finished(job, True, status)

    def _retry(self, job, kind, payload):
        """Plan the job's next run (docs/protocol.md §11); answers ("fault", fault JSON) when
        it is not retried: past ``max_retries``, or stopped meanwhile (a stopped job is
        not run again).  Answers (None, None) when the retry is written."""
        sup = self.sup
        cfg = sup.settings().jobs_for(job.service)
        retry = job.retries + 1
        if kind == "retry":
            asked = json.loads(payload)
            # as a request's timeouts are (§15): a due time past any the database can hold,
            # or years away, is the longest a request may ask for
            delay_ms = max(0, min(asked["after_ms"], cfg.max_request_timeout_ms))
            reason = asked["reason"] or "the operation asked to run later"
            payload = fault_json(TransientFault(f"the operation asked to run again later: {reason}"))
        else:
            delay_ms = int(cfg.retry_delay_ms(retry) * random.uniform(0.9, 1.1))
            fault = json.loads(payload)
            reason = f"{fault['faultInfo']['$type']}: {fault['message']}"
        if retry > cfg.max_retries:
            log.info("job %s: no retry left (max_retries = %d); it fails", job.id, cfg.max_retries)
            return "fault", payload
        due = now_ms() + delay_ms
        won = sup.persist(lambda: sup.store.retry(
            job.id, due, f"retry {retry} of {cfg.max_retries} planned in {delay_ms / 1000:.1f} s: {reason}",
            sup.run_of(job)), f"the retry of job {job.id}")
        if won is None:                  # given up at shutdown: recovered later
            return None, None
        if not won:                      # stopped or deleted meanwhile: the fault stands
            return "fault", payload
        log.info("job %s QUEUING: retry %d of %d in %.1f s (%s)", job.id, retry, cfg.max_retries,
                 delay_ms / 1000, reason)
        sup.notifier.notify(job.id)
        sup.work.set()                   # an idle slot learns the new due time from the store
        return None, None

    def _wait_for_children(self, job, asked):
        """The function called run_children (docs/protocol.md §13): store the children and let
        the parent wait for them holding no worker; ``resume`` takes it once they are
        done.  A parent stopped meanwhile stops them at once."""
        sup = self.sup
        now = now_ms()
        settings = sup.settings()

        def bounded(value, service):       # as a start request's are (docs/protocol.md §15)
            limit = settings.jobs_for(service).max_request_timeout_ms
            return None if value is None else max(0, min(value, limit))

        children = [JobRecord(id=str(uuid.uuid4()), service=c["service"], operation=c["operation"],
                              fetch_type=c["fetch_type"], status="QUEUING", request=c["request"],
                              queued_at=now, queueing_timeout=bounded(c["queueing_timeout"], c["service"]),
                              computation_timeout=bounded(c["computation_timeout"], c["service"]))
                    for c in asked["children"]]
        note = f"waiting for {len(children)} child jobs"
        limits = [QueueLimit(service, *settings.queue_limit(service),
                             settings.quota_of(job.owner, service).max_queued)
                  for service in sorted({c.service for c in children})]
        status = sup.persist(lambda: sup.store.suspend(
            job.id, sup.node, asked["stage"], asked["fail_fast"], children, bulk_progress(0, 0, len(children)),
            note, limits, sup.run_of(job)), f"the child jobs of job {job.id}")
        if status is None:               # given up at shutdown: the parent is recovered, runs again
            return
        if status is False:              # deleted while it fanned out, or no longer this run's
            sup.let_go(job)
            return
        if isinstance(status, QueueFull):   # children count against max_queued (docs/protocol.md §15)
            sup.fail(job, queue_full_fault(status, len(children)), "its child jobs would overflow the queue")
            return
        log.info("job %s waits for %d child jobs (stage %d), holding no worker",
                 job.id, len(children), asked["stage"])
        sup.notifier.notify(job.id)
        sup.notifier.notify_queued()     # idle slots here and on other nodes claim them
        sup.work.set()
        if status == "STOPPING":
            stop_children(sup.store, sup.notifier, job.id, "its parent job was stopped")

    def _died(self, job):
        sup = self.sup
        if self.process is not None:
            self.process.join(1)          # reap it, so that its exit code is known
        code = self.process.exitcode if self.process else None
        self.kill()
        log.error("worker %d died (exit code %s) while running job %s", self.index, code, job.id)
        if self.discard:
            sup.let_go(job)
            return
        fault = InternalErrorFault(f"the worker process running this job died (exit code {code}); "
                                   "the job is not run again")
        sup.fail(job, fault, "worker died")

    def _killed(self, job):
        sup = self.sup
        why = self.kill_reason
        self.kill()
        log.warning("job %s: worker %d killed: the operation did not return after %s",
                    job.id, self.index, why)
        if self.discard:
            sup.let_go(job)
            return
        fault = RequestTimedOutFault("the computation timeout stopped the job and it did not "
                                     f"return within {STOP_GRACE:g} s; it was aborted")
        sup.fail(job, fault, "aborted after timeout")


class Supervisor:
    """Runs the node's worker slots and its housekeeping."""

    def __init__(self, store: JobStore, notifier, settings, node: str, cleaner=None, services=()):
        self.store = store
        self.notifier = notifier
        self.settings = settings          # a callable answering the settings in force
        self.node = node
        self.cleaner = cleaner
        self.services = list(services)    # the names of every service found (the registry's)
        self.mp = multiprocessing.get_context("spawn")
        self.work = threading.Event()
        self.closing = False
        self.signal_lock = threading.Lock()
        self.pending_signals = {}         # job id → (reason, time): signals no slot took yet
        self.slots = []
        self._housekeeper = None

    # ---------------------------------------------------------------- settings

    def limits_for(self, job):
        return self.settings().limits_for(job.service, job.queueing_timeout, job.computation_timeout)

    def idle_wait(self, claimed_at: int) -> float:
        """How long an idle slot whose claim at ``claimed_at`` (ms) found nothing waits
        before it looks again, unless woken: IDLE_CLAIM_PERIOD, or less when a job
        waiting for its retry (planned on any node) falls due sooner, or fell due since
        that claim; the store knows when."""
        due = self.store.next_due(claimed_at)
        if due is None:
            return IDLE_CLAIM_PERIOD
        return min(IDLE_CLAIM_PERIOD, max(0.0, (due - now_ms()) / 1000) + 0.001)

    def served_services(self):
        """The services whose jobs this node runs; None when it runs every service's."""
        cfg = self.settings()
        served = [name for name in self.services if cfg.service_enabled(name)]
        return None if len(served) == len(self.services) else served

    # ---------------------------------------------------------------- life

    def start(self):
        cfg = self.settings()
        for r in self.store.recover(self.node, now_ms(), cfg.jobs.max_attempts, self._attempts_fault):
            self._log_recovered(r)
        self.slots = [WorkerSlot(self, i) for i in range(cfg.workers)]
        for slot in self.slots:
            slot.start()
        self._housekeeper = threading.Thread(target=self._housekeeping, name="housekeeping", daemon=True)
        self._housekeeper.start()

    def shutdown(self, timeout: float = 10.0):
        """Stop taking jobs, hand running jobs back to the queue, end the workers."""
        self.closing = True
        self.work.set()
        for slot in self.slots:
            slot.poke()
        deadline = time.time() + timeout
        for slot in self.slots:
            slot.join(max(0.1, deadline - time.time()))

    # ---------------------------------------------------------------- from the operation layer

    def changed_elsewhere(self, job_id: str):
        """Another process (an HTTP process of this node, or another node) changed a
        job: if it runs here, or may have just been claimed here, and was stopped or
        deleted, act on it now (a signal for a run about to start waits for it)."""
        if not any(slot.current == job_id or slot.claiming for slot in self.slots):
            return
        try:
            rec = self.store.peek(job_id)
        except StoreUnavailable:       # the lease renewal finds the stop or delete later
            return
        if rec is None or rec.status == "DELETED":
            self.abort(job_id)
        elif rec.status == "STOPPING":
            self.stop(job_id)

    def stop(self, job_id: str) -> bool:
        return self._signal(job_id, STOPPED)

    def abort(self, job_id: str, why: str = "it was deleted") -> bool:
        return self._signal(job_id, ABORTED, why)

    def _signal(self, job_id: str, reason: int, why: str = "it was deleted") -> bool:
        """Tell the slot running the job; if none does yet (it may be between its claim
        and the start of the run), the slot finds the signal when it starts."""
        with self.signal_lock:
            if any(slot.signal(job_id, reason, why) for slot in self.slots):
                return True
            self.pending_signals[job_id] = (reason, time.time())
            return False

    def _forget_old_signals(self, older_than: float = 60.0):
        with self.signal_lock:
            limit = time.time() - older_than
            for job_id in [j for j, (_, t) in self.pending_signals.items() if t < limit]:
                del self.pending_signals[job_id]

    # ---------------------------------------------------------------- for the slots

    def finished(self, job, won: bool, status: str):
        if won:
            log.info("job %s %s.%s %s", job.id, job.service, job.operation, status)
            metrics.job_finished(job.service, status.split()[0], (now_ms() - job.started_at) / 1000)
        self.notifier.notify(job.id)
        if won and job.parent_id is not None:
            self._child_finished(job, status)

    def _child_finished(self, job, status: str):
        """A child finished: its parent's BulkProgress counts it; with failures raised,
        a failed child stops its siblings, so that the parent fails soon; the parent
        may now be ready to run again (a slot looks)."""
        try:
            fail_fast = self.store.refresh_waiting_progress(job.parent_id, bulk_progress)
            if fail_fast is not None:
                self.notifier.notify(job.parent_id)
            if fail_fast and status.startswith("FAILED"):
                stop_children(self.store, self.notifier, job.parent_id, "a sibling child job failed")
        except StoreUnavailable as exc:   # the count is only progress; the resume needs none
            outage_log.warning("job %s: its parent's progress is not updated: %s", job.id, exc)
        self.work.set()

    def fail(self, job, fault, why: str):
        """Fail the running job with ``fault``, written once the store answers; answers
        whether it was still running (False: deleted meanwhile; None: given up at
        shutdown)."""
        won = self.persist(lambda: self.store.finish(job.id, "FAILED", now_ms(), fault=fault_json(fault),
                                                     note=why, run=self.run_of(job)),
                           f"the outcome of job {job.id}")
        self.finished(job, won, f"FAILED ({why})")
        return won

    def persist(self, write, what: str):
        """``write()``, a store write that must not be lost (a job's outcome, its
        hand-back), tried again while the store is unreachable; answers its answer.
        A node shutting down gives up after CLOSING_PATIENCE s (answering None): the
        job then runs out of lease and the next start of a node recovers it."""
        delay, waited, give_up_at = 0.05, False, None
        while True:
            try:
                answer = write()
            except StoreUnavailable as exc:
                if not waited:
                    log.warning("%s waits for the job store: %s", what, exc)
                    waited = True
                if self.closing:
                    give_up_at = give_up_at or time.monotonic() + CLOSING_PATIENCE
                    if time.monotonic() > give_up_at:
                        log.error("%s given up (shutting down, store unreachable); "
                                  "its lease runs out and it is recovered", what)
                        return None
                time.sleep(delay)
                delay = min(delay * 2, STORE_RETRY_MAX)
                continue
            if waited:
                log.info("%s written: the job store answers again", what)
            return answer

    def run_of(self, job) -> Run:
        """The run of ``job`` that this node's slot holds: its writes are fenced by it."""
        return Run(self.node, job.attempts)

    def let_go(self, job):
        """A run let go of its job, or a write of it was refused: the job was deleted
        (it is erased now), or it is no longer this run's (its lease ran out and another
        run took it over: nothing of this run is kept).  The log says which."""
        try:
            rec = self.store.peek(job.id)
        except StoreUnavailable:
            log.info("job %s: this run (attempt %d) let go of it; the store cannot say why now",
                     job.id, job.attempts)
            return
        if rec is None:
            log.info("job %s was erased meanwhile; worker let go", job.id)
        elif rec.status == "DELETED" and rec.node in (self.node, None):
            self.erase_deleted(job.id)
        elif rec.node != self.node or rec.attempts != job.attempts:
            log.warning("job %s lost to another run: this run (attempt %d) no longer holds it, its "
                        "lease ran out; it is %s%s (attempt %d); nothing of this run is kept",
                        job.id, job.attempts, rec.status, f" on {rec.node}" if rec.node else "", rec.attempts)
        else:
            log.info("job %s is %s; this run let go of it", job.id, rec.status)

    def erase_deleted(self, job_id: str):
        self.persist(lambda: self.store.erase(job_id, ("DELETED",)), f"the erasure of job {job_id}")
        self.notifier.notify(job_id)
        log.info("job %s erased (deleted, worker let go)", job_id)

    def _attempts_fault(self, attempts: int) -> str:
        return fault_json(InternalErrorFault(
            f"the job was running when its node or worker died, {attempts} times "
            f"(max_attempts = {self.settings().jobs.max_attempts}); it is not run again"))

    def _log_recovered(self, r):
        if r.requeued:
            log.warning("job %s was running on a node that died; queued again (attempt %d done)",
                        r.id, r.attempts)
        else:
            log.error("job %s FAILED: its node died during %d attempts", r.id, r.attempts)
        self.notifier.notify(r.id)
        self.work.set()

    # ---------------------------------------------------------------- housekeeping

    def _housekeeping(self):
        """The node's periodic duties, each on its own: one that fails (a bad row, a
        value its database refuses) is logged and never skips the others, and the
        leases come first, since other nodes take over the jobs whose lease runs out."""
        last_lease = 0.0
        while not self.closing:
            # a cleanup interval under a second sets the pace (it is honoured, not rounded up)
            time.sleep(min(HOUSEKEEPING_PERIOD, self.cleaner.interval_s() if self.cleaner else 1.0))
            now = time.time()
            cfg = self.settings()
            steps = []
            if now - last_lease >= LEASE_RENEW_PERIOD:
                last_lease = now
                steps += [("lease renewal", self._renew_leases),
                          ("signal cleanup", self._forget_old_signals),
                          ("recovery", lambda: self._recover(cfg))]
            steps += [("queueing timeouts", lambda: self._fail_timed_out_queued(cfg)),
                      ("computation timeouts of waiting parents", lambda: self._stop_timed_out_parents(cfg))]
            if self.cleaner is not None:
                steps.append(("retention cleanup", lambda: self.cleaner.tick(now)))
            for name, step in steps:
                self._housekeeping_step(name, step)

    def _housekeeping_step(self, name, step):
        try:
            step()
        except StoreUnavailable as exc:
            outage_log.warning("housekeeping (%s) waits for the job store: %s", name, exc)
        except Exception:
            step_failure_logs[name].exception("housekeeping step %s failed; the others go on", name)

    def _recover(self, cfg):
        for r in self.store.recover(None, now_ms(), cfg.jobs.max_attempts, self._attempts_fault):
            self._log_recovered(r)

    def _fail_timed_out_queued(self, cfg):
        fault = fault_json(RequestTimedOutFault("the job waited in the queue longer than its "
                                                "queueing timeout"))
        for jobs, only, exclude in cfg.job_setting_groups():
            for job_id in self.store.fail_timed_out_queued(now_ms(), jobs.queueing_timeout_ms,
                                                           fault, only, exclude):
                log.info("job %s FAILED (queueing timeout)", job_id)
                self.notifier.notify(job_id)

    def _stop_timed_out_parents(self, cfg):
        """A parent waiting for its children past its computation timeout holds no
        worker to notice it: stop it and its tree here; it then runs again and hands
        back its intermediate result, as a job on a worker would."""
        for jobs, only, exclude in cfg.job_setting_groups():
            for job_id in self.store.waiting_timed_out(now_ms(), jobs.computation_timeout_ms, only, exclude):
                if self.store.request_stop(job_id, "stop asked: computation timeout"):
                    log.info("job %s STOPPING (computation timeout, waiting for its child jobs)", job_id)
                    self.notifier.notify(job_id)
                    stop_children(self.store, self.notifier, job_id, "its parent job's computation timeout ended")

    def _renew_leases(self):
        """Keep alive the leases of the jobs the slots hold (only those: a job no slot
        holds must run out of lease to be recovered), and act on stops and deletes
        asked for on other nodes (or between a claim and the start of the run)."""
        held = [job_id for job_id in (slot.current for slot in self.slots) if job_id]
        found = self.store.renew_leases(self.node, now_ms() + LEASE_MS, held)
        for job_id, status in found:
            if status == "STOPPING":
                self.stop(job_id)
            elif status == "DELETED" and not self.abort(job_id):
                self.erase_deleted(job_id)
        for job_id in set(held) - {job_id for job_id, _ in found}:
            # erased meanwhile (with its parent), or its lease ran out and another run took it
            self.abort(job_id, "its job was erased or taken over by another run")

"""The node's periodic duties: leases, recovery, timeouts no worker sees, retention.

No slot notices a job that no slot holds: one queued past its queueing timeout, a
parent waiting for its children past its computation timeout, a job whose node died
(its lease ran out).  And a slot cannot keep its own job's lease alive while it waits
for the worker.  One thread of the node does all of that, each duty on its own: one
that fails (a bad row, a value its database refuses) is logged and never skips the
others, and the leases come first, since other nodes take over the jobs whose lease
runs out.
"""

import collections
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

from ..protocol.faults import InternalErrorFault, RequestTimedOutFault
from ..protocol.states import Status
from ..store import Recovered, StoreUnavailable, now_ms
from ..support.logs import OncePerPeriod
from .child_jobs import stop_children
from .outcomes import Outcomes, fault_json
from .shared import Shared
from .supervisor_log import log, outage_log

if TYPE_CHECKING:
    from ..settings.config import Settings

LEASE_MS = 30_000  # a running job's lease; another node may recover it after that
LEASE_RENEW_PERIOD = 5.0  # s between renewals of the leases this node's slots hold
HOUSEKEEPING_PERIOD = (
    1.0  # s between two rounds of the other duties (or a shorter cleanup interval)
)
#: s between two sweeps of the result files of erased jobs (store.result_files)
RESULT_SWEEP_PERIOD = 10.0
SIGNAL_MEMORY = 60.0  # s a stop or delete no slot took is kept for a slot about to start the job

#: one throttled log per step, so that one failing every second hides no other
step_failure_logs: collections.defaultdict = collections.defaultdict(
    lambda: OncePerPeriod(log, 60.0)
)


class Signals(Protocol):
    """What the lease renewal asks of the node's supervisor (``engine.supervisor``): the
    jobs its slots hold, and the stop or the abort of the run of one of them."""

    def held(self) -> list[str]: ...

    def stop(self, job_id: str) -> bool: ...

    def abort(self, job_id: str, why: str = ...) -> bool: ...


class Housekeeping(threading.Thread):
    """The housekeeping thread of one node's supervisor."""

    def __init__(self, shared: Shared, outcomes: Outcomes, signals: Signals) -> None:
        super().__init__(name="housekeeping", daemon=True)
        self.sup = shared  # the supervisor's
        self.outcomes = outcomes
        self.signals = signals

    def run(self) -> None:
        sup = self.sup
        cleaner = sup.cleaner
        last_lease = float("-inf")  # time.monotonic() of the last renewal: none yet
        last_sweep = time.monotonic()  # (of the result files: the first a period after start)
        while not sup.closing:
            # a cleanup interval under a second sets the pace (it is honoured, not rounded up)
            time.sleep(min(HOUSEKEEPING_PERIOD, cleaner.interval_s() if cleaner else 1.0))
            now = time.monotonic()
            cfg = sup.settings()
            steps: list[tuple[str, Callable[[], object]]] = []
            if now - last_lease >= LEASE_RENEW_PERIOD:
                last_lease = now
                steps += [
                    ("lease renewal", self.renew_leases),
                    ("signal cleanup", lambda: sup.forget_old_signals(SIGNAL_MEMORY)),
                    ("recovery", lambda: self.recover(None)),
                ]
            steps += [
                ("queueing timeouts", partial(self.fail_timed_out_queued, cfg)),
                (
                    "computation timeouts of waiting parents",
                    partial(self.stop_timed_out_parents, cfg),
                ),
            ]
            if cleaner is not None:
                steps.append(("retention cleanup", partial(cleaner.tick, now)))
            if sup.store.result_folder is not None and now - last_sweep >= RESULT_SWEEP_PERIOD:
                last_sweep = now
                steps.append(("result files of erased jobs", sup.store.sweep_result_files))
            for name, step in steps:
                self._step(name, step)

    @staticmethod
    def _step(name: str, step: Callable[[], object]) -> None:
        try:
            step()
        except StoreUnavailable as exc:
            outage_log.warning("housekeeping (%s) waits for the job store: %s", name, exc)
        except Exception:
            step_failure_logs[name].exception("housekeeping step %s failed; the others go on", name)

    # ---------------------------------------------------------------- the duties

    def renew_leases(self) -> None:
        """Keep alive the leases of the jobs the slots hold (only those: a job no slot
        holds must run out of lease to be recovered), and act on stops and deletes
        asked for on other nodes (or between a claim and the start of the run)."""
        sup = self.sup
        signals = self.signals
        held = signals.held()
        found = sup.store.renew_leases(sup.node, now_ms() + LEASE_MS, held)
        for job_id, status in found:
            if status == Status.STOPPING:
                signals.stop(job_id)
            elif status == Status.DELETED and not signals.abort(job_id):
                self.outcomes.erase_deleted(job_id)
        for job_id in set(held) - {job_id for job_id, _ in found}:
            # erased meanwhile (with its parent), or its lease ran out and another run took it
            signals.abort(job_id, "its job was erased or taken over by another run")

    def recover(self, node: str | None) -> None:
        """Queue again (or fail, past ``max_attempts``) the jobs that were running on
        ``node`` (this node, at its start: it died), or, with None, on any node whose
        lease ran out."""
        sup = self.sup
        for r in sup.store.recover(
            node, now_ms(), sup.settings().jobs.max_attempts, self._attempts_fault
        ):
            self._log_recovered(r)

    def _attempts_fault(self, attempts: int) -> str:
        return fault_json(
            InternalErrorFault(
                f"the job was running when its node or worker died, {attempts} times "
                f"(max_attempts = {self.sup.settings().jobs.max_attempts}); it is not run again"
            )
        )

    def _log_recovered(self, r: Recovered) -> None:
        if r.requeued:
            log.warning(
                "job %s was running on a node that died; queued again (attempt %d done)",
                r.id,
                r.attempts,
            )
        else:
            log.error(
                "job %s %s: its node died during %d attempts", r.id, Status.FAILED, r.attempts
            )
        self.sup.notifier.notify(r.id)
        self.sup.work.ring()

    def fail_timed_out_queued(self, cfg: "Settings") -> None:
        sup = self.sup
        fault = fault_json(
            RequestTimedOutFault("the job waited in the queue longer than its queueing timeout")
        )
        for jobs, only, exclude in cfg.job_setting_groups():
            for job_id in sup.store.fail_timed_out_queued(
                now_ms(), jobs.queueing_timeout_ms, fault, only, exclude
            ):
                log.info("job %s %s (queueing timeout)", job_id, Status.FAILED)
                sup.notifier.notify(job_id)

    def stop_timed_out_parents(self, cfg: "Settings") -> None:
        """A parent waiting for its children past its computation timeout holds no
        worker to notice it: stop it and its tree here; it then runs again and hands
        back its intermediate result, as a job on a worker would."""
        sup = self.sup
        for jobs, only, exclude in cfg.job_setting_groups():
            for job_id in sup.store.waiting_timed_out(
                now_ms(), jobs.computation_timeout_ms, only, exclude
            ):
                if sup.store.request_stop(job_id, "stop asked: computation timeout"):
                    log.info(
                        "job %s %s (computation timeout, waiting for its child jobs)",
                        job_id,
                        Status.STOPPING,
                    )
                    sup.notifier.notify(job_id)
                    stop_children(
                        sup.store,
                        sup.notifier,
                        job_id,
                        "its parent job's computation timeout ended",
                    )

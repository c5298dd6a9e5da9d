"""The retention cleaner: erases finished jobs whose retention has run out (docs/protocol.md §5).

Expiry is computed from each job's own time stamps and the settings in force at each
run, so an administrator's edit applies to jobs already stored.  It deletes in small
batches, each its own short transaction, and pauses after each one, so that a million
expired jobs (with their events) never stall a request nor a claim:

* a batch of ``BATCH`` jobs holds the database's write lock a few ms (the WAL's
  checkpoint is left to the node's ``WalCheckpointer``, not paid at the batch's commit);
* after each batch the cleaner waits ``PAUSE_S`` before it takes the lock again, so
  that the writes that queued up meanwhile go first: this node's worker slots (same
  process, waiting for the store's lock) and its HTTP processes and other nodes
  (``retry_while_busy`` tries every 2 ms at most); without a pause, the slots' claims
  would wait for the lock until the whole cleanup was done;
* one tick works at most ``TICK_BUDGET_S``; a cleanup that is not done by then goes on
  at the next tick (housekeeping runs every second) instead of after
  ``cleanup_interval``, so that the housekeeping thread renews this node's leases (30 s,
  every 5 s) and fails timed-out queued jobs meanwhile.

"retention: erased N expired job(s)" is logged when a cleanup is done, N counting all
its ticks.  Figures: ``benchmarks/store_growth.py``.
"""

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..store import now_ms

if TYPE_CHECKING:
    from ..settings.config import Settings
    from ..store import JobStore

log = logging.getLogger(__name__)

BATCH = 100
PAUSE_S = 0.002
TICK_BUDGET_S = 4.0


class RetentionCleaner:
    def __init__(
        self,
        store: "JobStore",
        settings: Callable[[], "Settings"],
        batch: int = BATCH,
        pause_s: float = PAUSE_S,
        budget_s: float = TICK_BUDGET_S,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock  # now, in ms since the epoch: the store's clock (tests fix it)
        self.batch = batch
        self.pause_s = pause_s
        self.budget_s = budget_s
        self._last: float | None = None  # time.monotonic() when the last cleanup began
        self._unfinished = False  # the last tick stopped at its budget, expired jobs left
        self._erased = 0  # erased so far by the cleanup under way

    def interval_s(self) -> float:
        """The shortest cleanup interval in force ([jobs] or a service's own)."""
        return (
            min(jobs.cleanup_interval_ms for jobs, _, _ in self.settings().job_setting_groups())
            / 1000
        )

    def tick(self, now: float) -> int:
        """Run a cleanup when the cleanup interval has passed since the last one began
        (``now``: ``time.monotonic()``), or go on with one that its budget cut short;
        answers how many jobs it erased."""
        if not self._unfinished:
            if self._last is not None and now - self._last < self.interval_s():
                return 0
            self._last = now
        return self._run(self.budget_s)

    def clean(self) -> int:
        """Erase every expired finished job now; answers how many."""
        return self._run(None)

    def _run(self, budget_s: float | None) -> int:
        started = time.monotonic()
        erased, cut = 0, False
        for jobs, only, exclude in self.settings().job_setting_groups():
            while not cut:
                n = self.store.erase_expired(
                    self.clock(),
                    jobs.unfetched_retention_ms,
                    jobs.fetched_retention_ms,
                    self.batch,
                    only,
                    exclude,
                )
                erased += n
                if n < self.batch:
                    break
                cut = budget_s is not None and time.monotonic() - started >= budget_s
                if not cut:
                    time.sleep(self.pause_s)  # the writes that waited for this batch go first
            if cut:
                break
        self._unfinished = cut
        self._erased += erased
        if not cut and self._erased:
            log.info("retention: erased %d expired job(s)", self._erased)
            self._erased = 0
        return erased

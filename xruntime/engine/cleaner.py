"""The retention cleaner: erases finished jobs whose retention has run out (PROTOCOL §5).

Expiry is computed from each job's own time stamps and the settings in force at each
run, so an administrator's edit applies to jobs already stored.  It deletes in bounded
batches, each its own short transaction, so a million expired jobs never hold a long
lock nor stall requests.
"""
import logging
import time

from ..store import now_ms

log = logging.getLogger("xruntime.cleaner")

BATCH = 1000


class RetentionCleaner:
    def __init__(self, store, settings, batch: int = BATCH):
        self.store = store
        self.settings = settings
        self.batch = batch
        self._last = 0.0

    def interval_s(self) -> float:
        """The shortest cleanup interval in force ([jobs] or a service's own)."""
        return min(jobs.cleanup_interval_ms for jobs, _, _ in self.settings().job_setting_groups()) / 1000

    def tick(self, now: float) -> int:
        """Run a cleanup when the cleanup interval has passed since the last one."""
        if now - self._last < self.interval_s():
            return 0
        self._last = now
        return self.clean()

    def clean(self) -> int:
        """Erase every expired finished job now; answers how many."""
        erased = 0
        for jobs, only, exclude in self.settings().job_setting_groups():
            while True:
                n = self.store.erase_expired(now_ms(), jobs.unfetched_retention_ms,
                                             jobs.fetched_retention_ms, self.batch, only, exclude)
                erased += n
                if n < self.batch:
                    break
                time.sleep(0)      # let request threads in between batches
        if erased:
            log.info("retention: erased %d expired job(s)", erased)
        return erased

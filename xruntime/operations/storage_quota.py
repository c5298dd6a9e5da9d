"""What one user may keep stored (docs/protocol.md §15): ``max_stored_bytes``, checked
at each start and again when a job's result is about to be stored.

The figure is what the payloads (request, result, fault, progress) of the user's jobs
not yet erased take as stored, all services together, plus the bound of the result of
each of their unfinished jobs (``store.stored_bytes``, summed from two indexes).  A
start is refused when that figure and the new job's own bound pass the limit: the
user's queued and running jobs cannot together store past it, whatever they return.
A result past the limit when its job ends fails that job instead of being stored
(``engine.outcomes``): a service's bound may be wrong, or the limit lowered meanwhile.
Child jobs count as their results are stored, not before (their parent's bound counts
for the whole).  Refused, nothing is stored.

The store checks the limit as part of the write (``JobStore.create``'s ``max_stored``;
on SQLite a condition of the insert itself, on the running total ``owner_bytes``);
``StoredBytesQuota`` reads the figure once a start was refused, to tell a start past it
from one past a queue's limit, and to say by how much.
"""

from typing import TYPE_CHECKING

from ..protocol.faults import QuotaExceededFault

if TYPE_CHECKING:
    from ..store import JobStore

HINT = (
    "Fetch and delete your finished jobs (deleteJob), or wait until retention erases "
    "them or your running jobs end; then start again."
)


class StoredBytesQuota:
    def __init__(self, store: "JobStore") -> None:
        self.store = store

    def check(self, owner: str, limit: int, bound: int) -> None:
        """Refuse a start of ``owner`` whose result may take ``bound`` bytes when that
        passes ``limit`` (0: no limit) with what they store and may store already (read
        now: after the store refused the start)."""
        if not limit:
            return
        stored = self.store.stored_bytes(owner)
        if stored + bound > limit:
            raise QuotaExceededFault(
                f"your jobs take {stored} bytes stored or to be stored, and this job's result "
                f"may take {bound} more: past max_stored_bytes of {limit}; this job was refused",
                hint=HINT,
            )

"""The engine's share of child jobs (docs/protocol.md §13): stopping a tree, a waiting
parent's progress, the fault of children that do not fit in the queue, the cores a
child may use.

They sit here, below the operation layer, because the engine needs them on its own
(a child that fails stops its siblings, a waiting parent's computation timeout stops
its tree); ``jobs.py`` (stopJob) uses the same ``stop_children`` from here.
"""

import os
from typing import TYPE_CHECKING

from ..protocol import codec
from ..protocol.faults import (
    QueueOverflowFault,
    QuotaExceededFault,
    RequestStoppedFault,
    XServerFault,
)
from ..protocol.types import BulkProgress
from ..store import QueueFull, now_ms
from .notifier import Notifier

if TYPE_CHECKING:
    from ..store import JobRecord, JobStore


def cores_of(job: "JobRecord", workers: int) -> int:
    """The cores ``job`` may use (``job.cores``), 0 for all of the node's: a child job
    gets its worker's share of them, since its parent split the work so that its
    siblings run beside it, on the node's other workers; a child taking every core
    would make each core run several of the family's threads at once."""
    if job.parent_id is None:
        return 0
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def stop_children(store: "JobStore", notifier: Notifier, parent_id: str, why: str) -> None:
    """Stop a parent's tree: running children wind down and hand back what they have;
    those not started yet fail with RequestStoppedFault saying ``why``."""
    fault = codec.dumps(
        codec.encode_fault(RequestStoppedFault(f"{why} before this child job started"))
    )
    for child_id in store.stop_children(parent_id, now_ms(), fault):
        notifier.notify(child_id)


def bulk_progress(successful: int, failed: int, remaining: int) -> str:
    """A waiting parent's progress over its children, as stored (JSON text)."""
    return codec.dumps(
        codec.encode(BulkProgress(successful=successful, failed=failed, remaining=remaining))
    )


def queue_full_fault(full: QueueFull, children: int) -> XServerFault:
    """The fault of a parent whose ``children`` did not fit in the queue: as a start
    past the same limit is answered."""
    if full.own:
        return QuotaExceededFault(
            f"this job's {children} child jobs would take your queued {full.service} jobs past "
            f"your max_queued of {full.limit}; none was queued",
            hint="Ask for fewer child jobs (e.g. a lower parallelism), or wait until fewer of your "
            "jobs are queued.",
        )
    return QueueOverflowFault(
        f"this job's {children} child jobs would take the queue past its max_queued of "
        f"{full.limit}; none was queued",
        hint="Try again later, when fewer jobs are waiting, or ask for fewer child jobs.",
    )

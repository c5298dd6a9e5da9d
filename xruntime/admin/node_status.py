"""What the status page shows, as one plain dict: a snapshot of the node and its jobs.

No HTTP here: ``snapshot`` reads the store (three queries) and answers a dict ready for
JSON, which the status page's stream sends to every open page (``status_stream``) and
``/status.json`` answers as it is.  The workers are this node's (the busy ones are the
worker slots holding a job, ``store.busy_workers``); the job counts and the running jobs
are the store's, i.e. of every node sharing the database.  The three reads are not one
transaction: a snapshot read while a job changes may count it in its old state and
list it in its new one, and the change, told meanwhile, brings the next snapshot.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..protocol import states
from ..protocol.progress_view import view_of
from ..store import now_ms

if TYPE_CHECKING:
    from ..store import JobRecord, JobStore

#: A snapshot as it goes out: plain JSON-ready data (``snapshot`` below says which keys).
Snapshot = dict[str, Any]

#: The running jobs listed at most (newest first); the others are counted.
RUNNING_SHOWN = 50
#: The states of a job that holds a worker and shows a progress.
RUNNING = (states.RUNNING, states.STOPPING)


def snapshot(
    store: JobStore, node: str, workers: int, started_at: float, limit: int = RUNNING_SHOWN
) -> Snapshot:
    """The node ``node`` (``workers`` worker processes, started at ``started_at``, s since
    the epoch) and the store's jobs, now."""
    counts = store.counts_by_status()
    busy = store.busy_workers(node)
    page, _ = store.list_jobs(RUNNING, limit=limit)
    now = now_ms()
    running = [_running_job(rec, now) for _, rec in page]
    return {
        "node": node,
        "version": __version__,
        "at": now,
        "startedAt": int(started_at * 1000),
        "uptimeMs": max(0, int((time.time() - started_at) * 1000)),
        "workers": {"total": workers, "busy": busy, "idle": max(0, workers - busy)},
        "queued": counts.get(states.QUEUING, 0),
        "jobs": {status: counts.get(status, 0) for status in states.STORED_STATES},
        "running": running,
        # (counted and listed by two reads: a job may finish in between)
        "moreRunning": max(0, sum(counts.get(s, 0) for s in RUNNING) - len(running)),
    }


def _running_job(rec: JobRecord, now: int) -> dict[str, Any]:
    progress = json.loads(rec.progress) if rec.progress else None
    view = view_of(progress)
    return {
        "id": rec.id,
        "service": rec.service,
        "operation": rec.operation,
        "user": rec.owner or None,  # None: anonymous (accounts off)
        "status": rec.status,
        "node": rec.node,
        "elapsedMs": rec.elapsed_ms(now),  # since it was queued, as watchJob's elapsedTime
        "parentId": rec.parent_id,
        "progress": progress,
        "bar": None if view is None else {"fraction": view.fraction, "text": view.text},
    }

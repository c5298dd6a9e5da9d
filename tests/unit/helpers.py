"""Helpers shared by the unit tests (fixtures are in conftest.py)."""

import json
import uuid

from xruntime.protocol import codec
from xruntime.protocol.faults import ProcessingFault
from xruntime.protocol.types import BulkProgress, IntermediateResponseLimitation
from xruntime.store import JobRecord, now_ms
from xruntime_services.xdemo.types import SimulateRequest, SimulateResponse

NODE = "node-under-test"
LEASE_MS = 30_000


def new_record(status="QUEUING", queued_at=None, service="XDemo", **fields) -> JobRecord:
    """A record as JobManager.start would create it (for the store-level tests)."""
    return JobRecord(
        id=str(uuid.uuid4()),
        service=service,
        operation="simulate",
        fetch_type="SimulateResponse",
        status=status,
        request="{}",
        queued_at=now_ms() if queued_at is None else queued_at,
        **fields,
    )


def progress_json(remaining, successful, failed=0) -> str:
    return json.dumps(
        codec.encode(BulkProgress(remaining=remaining, successful=successful, failed=failed))
    )


def claim_exactly(store, job_id, node=NODE, now=None):
    """Claim the (only) queued job and check it is ``job_id``."""
    rec = store.claim(node, now_ms() if now is None else now, LEASE_MS)
    assert rec is not None and rec.id == job_id, "the queued job should have been claimed"
    return rec


def stored_response(steps_done=3, stopped=False) -> SimulateResponse:
    limitations = (
        [IntermediateResponseLimitation(message="stopped", reason="REQUEST_STOPPED")]
        if stopped
        else None
    )
    return SimulateResponse(
        stepsDone=steps_done, payload="p" * steps_done, resultLimitations=limitations
    )


def result_json(response) -> str:
    return json.dumps(codec.encode(response, SimulateResponse))


def fault_json(fault) -> str:
    return json.dumps(codec.encode_fault(fault))


STATES = ("QUEUING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")


def put_in_state(jobs, op, state, *, progress=None, response=None, fault=None, finished_at=None):
    """A new XDemo job in ``state``, moved there with the store's own methods.

    ``progress`` (JSON text) is reported while it runs; ``response``/``fault`` are the
    stored outcome of a SUCCEEDED/FAILED job.  Answers the job id (an id the store has
    never held for UNKNOWN).
    """
    store = jobs.store
    if state == "UNKNOWN":
        return str(uuid.uuid4())
    job = jobs.start(op, SimulateRequest(steps=3, durationMs=30))
    assert job.status == "QUEUING"
    if state == "QUEUING":
        return job.id
    claim_exactly(store, job.id)
    if progress is not None:
        assert store.set_progress(job.id, progress)
    if state == "STOPPING":
        assert store.request_stop(job.id)
    elif state == "SUCCEEDED":
        assert store.finish(
            job.id,
            "SUCCEEDED",
            finished_at or now_ms(),
            result=result_json(response or stored_response()),
        )
    elif state == "FAILED":
        assert store.finish(
            job.id,
            "FAILED",
            finished_at or now_ms(),
            fault=fault_json(
                fault or ProcessingFault("the simulation failed at step 2", hint="send it again")
            ),
        )
    elif state == "DELETED":
        assert store.mark_deleted(job.id)
    assert store.peek(job.id).status == state
    return job.id


class BlockingJobs:
    """The operation layer as a unit test drives it: plain calls from any thread.

    ``watch`` and ``run`` wait on an event loop, as in an HTTP process; here that loop
    runs in a thread of its own, and the calls block until they answer.  Everything
    else is the JobManager's own."""

    def __init__(self, store, notifier, settings):
        import asyncio
        import threading

        from xruntime.operations.jobs import JobManager
        from xruntime.operations.watching import Watches

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True).start()
        self.watches = Watches(store, notifier)
        self.manager = JobManager(store, notifier, settings, watches=self.watches)

    def __getattr__(self, name):
        return getattr(self.manager, name)

    def _await(self, coro):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def watch(self, *args, **kwargs):
        return self._await(self.manager.watch(*args, **kwargs))

    def watch_jobs(self, *args, **kwargs):
        return self._await(self.manager.watch_jobs(*args, **kwargs))

    def run(self, op, request):
        return self._await(self.manager.run(op, request))

    def close(self):
        self.watches.close()
        self.loop.call_soon_threadsafe(self.loop.stop)

"""Every cell of the state table (docs/protocol.md §3), through the real operation layer.

Each job is put in its state with the store's own guarded methods, then fetched,
stopped or deleted through ``JobManager`` as a binding would; the answer, the fault
(type and fields) and what is left in the store are checked.
"""

import json
import time

import pytest
from spyne import Unicode

from xruntime.author.service import Service
from xruntime.protocol import codec, states
from xruntime.protocol.faults import (
    InternalErrorFault,
    InvalidFetchTypeFault,
    JobStateFault,
    ProcessingFault,
    QueueOverflowFault,
    RequestStoppedFault,
    RequestTimedOutFault,
    UnknownJobFault,
)
from xruntime.protocol.types import BulkProgress, ResponseBase
from xruntime.settings.config import JobSettings, ServiceSettings, Settings
from xruntime.store import now_ms
from xruntime_services.xdemo.types import SimulateRequest

from .helpers import (
    STATES,
    claim_exactly,
    progress_json,
    put_in_state,
    result_json,
    stored_response,
)

ACTIVE = ("QUEUING", "RUNNING", "STOPPING")


class NoRouteFault(ProcessingFault):
    """A service's own ProcessingFault subtype with a field of its own."""

    station = Unicode


class OtherDemoResponse(ResponseBase):
    """A second response type: its jobs belong to another fetch operation."""

    answer = Unicode


def _other_fetch_op(service_name="XDemo", response=OtherDemoResponse):
    svc = Service(service_name)

    @svc.long_operation(request=SimulateRequest, response=response)
    def other(request, job):  # pragma: no cover - never run here
        return response()

    return svc.long_operations["other"]


def _job_state_fault(excinfo, job_id, status):
    fault = excinfo.value
    assert type(fault) is JobStateFault
    assert fault.jobId == job_id
    assert fault.status == status
    return fault


# --------------------------------------------------------------------------- the table as data

# docs/protocol.md §3, cell by cell, written out independently of states.py.
PROTOCOL_FETCH = {
    "QUEUING": states.REFUSE,
    "RUNNING": states.REFUSE,
    "STOPPING": states.REFUSE,
    "SUCCEEDED": states.ANSWER_RESULT,
    "FAILED": states.RAISE_STORED_FAULT,
    "DELETED": states.REFUSE,
    "UNKNOWN": states.UNKNOWN_JOB,
}
PROTOCOL_STOP = {
    "QUEUING": states.REFUSE,
    "RUNNING": states.TO_STOPPING,
    "STOPPING": states.UNCHANGED,
    "SUCCEEDED": states.UNCHANGED,
    "FAILED": states.UNCHANGED,
    "DELETED": states.REFUSE,
    "UNKNOWN": states.UNKNOWN_JOB,
}
PROTOCOL_DELETE = {
    "QUEUING": states.ERASE_NOW,
    "RUNNING": states.TO_DELETED,
    "STOPPING": states.TO_DELETED,
    "SUCCEEDED": states.ERASE_NOW,
    "FAILED": states.ERASE_NOW,
    "DELETED": states.UNCHANGED,
    "UNKNOWN": states.UNCHANGED,
}
PROTOCOL_PROGRESS = {
    "QUEUING": False,
    "RUNNING": True,
    "STOPPING": True,
    "SUCCEEDED": True,
    "FAILED": True,
    "DELETED": False,
    "UNKNOWN": False,
}


@pytest.mark.parametrize(
    "name, table, expected",
    [
        ("FETCH", states.FETCH, PROTOCOL_FETCH),
        ("STOP", states.STOP, PROTOCOL_STOP),
        ("DELETE", states.DELETE, PROTOCOL_DELETE),
        ("SHOWS_PROGRESS", states.SHOWS_PROGRESS, PROTOCOL_PROGRESS),
    ],
)
def test_states_module_matches_the_protocol_table(name, table, expected):
    assert set(table) == set(STATES), f"{name} must have a cell for every status"
    for status in STATES:
        assert table[status] == expected[status], f"{name}[{status}]"


def test_state_sets_match_the_protocol():
    assert set(states.STORED_STATES) == set(STATES) - {"UNKNOWN"}
    assert states.TERMINAL == {"SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"}
    assert states.ACTIVE == {"QUEUING", "RUNNING", "STOPPING"}
    assert states.FINISHED == {"SUCCEEDED", "FAILED"}


# --------------------------------------------------------------------------- fetch


@pytest.mark.parametrize("state", ["QUEUING", "RUNNING", "STOPPING", "DELETED"])
def test_fetch_refused_with_job_state_fault(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state)
    with pytest.raises(JobStateFault) as excinfo:
        jobs.fetch(simulate_op, job_id)
    _job_state_fault(excinfo, job_id, state)
    rec = jobs.store.get(job_id)
    assert rec.status == state, "a refused fetch must not change the job"
    assert rec.first_fetched_at is None, "a refused fetch is no fetch"


def test_fetch_unknown_raises_unknown_job_fault(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "UNKNOWN")
    with pytest.raises(UnknownJobFault) as excinfo:
        jobs.fetch(simulate_op, job_id)
    assert type(excinfo.value) is UnknownJobFault
    assert excinfo.value.jobId == job_id
    assert jobs.store.get(job_id) is None


def test_fetch_succeeded_answers_the_stored_response(jobs, simulate_op):
    response = stored_response(steps_done=2, stopped=True)
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED", response=response)
    answer = jobs.fetch(simulate_op, job_id)
    assert codec.encode(answer, simulate_op.response) == codec.encode(
        response, simulate_op.response
    )
    assert answer.stepsDone == 2
    [limitation] = answer.resultLimitations
    assert type(limitation).__name__ == "IntermediateResponseLimitation"
    assert limitation.reason == "REQUEST_STOPPED"
    # Fetching again (a client whose connection broke) answers the same result.
    again = jobs.fetch(simulate_op, job_id)
    assert codec.encode(again, simulate_op.response) == codec.encode(response, simulate_op.response)
    assert jobs.store.get(job_id).status == "SUCCEEDED"


@pytest.mark.parametrize(
    "fault",
    [
        ProcessingFault("the simulation failed at step 2", hint="send it without failAtStep"),
        NoRouteFault("no route to the depot", station="Karlsruhe"),
        RequestStoppedFault("stopped before the first step"),
        RequestTimedOutFault("the computation timeout stopped the job"),
        InternalErrorFault("the worker died 3 times under this job"),
    ],
    ids=lambda f: type(f).__name__,
)
def test_fetch_failed_raises_the_jobs_own_fault(jobs, simulate_op, fault):
    job_id = put_in_state(jobs, simulate_op, "FAILED", fault=fault)
    with pytest.raises(type(fault)) as excinfo:
        jobs.fetch(simulate_op, job_id)
    raised = excinfo.value
    assert type(raised) is type(fault)
    assert raised.message == fault.message
    assert raised.fields() == fault.fields()
    # A second fetch raises the same fault again.
    with pytest.raises(type(fault)) as again:
        jobs.fetch(simulate_op, job_id)
    assert again.value.fields() == fault.fields()
    assert jobs.store.get(job_id).status == "FAILED"


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED"])
def test_fetch_stamps_first_fetch_once(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state)
    assert jobs.store.get(job_id).first_fetched_at is None
    before = now_ms()

    def fetch():
        try:
            jobs.fetch(simulate_op, job_id)
        except ProcessingFault:
            assert state == "FAILED"

    fetch()
    first = jobs.store.get(job_id).first_fetched_at
    assert first is not None and before <= first <= now_ms()
    time.sleep(0.02)  # (time passes: a later fetch that stamped would stamp later)
    fetch()
    assert jobs.store.get(job_id).first_fetched_at == first, "a later fetch keeps the first stamp"


def test_watch_is_never_a_fetch(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED")
    assert jobs.watch(job_id).status == "SUCCEEDED"
    assert jobs.store.get(job_id).first_fetched_at is None


def test_fetch_with_another_fetch_operation_is_invalid_fetch_type(jobs, simulate_op):
    other = _other_fetch_op()
    assert other.fetch_type != simulate_op.fetch_type
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED")
    with pytest.raises(InvalidFetchTypeFault) as excinfo:
        jobs.fetch(other, job_id)
    assert type(excinfo.value) is InvalidFetchTypeFault
    assert excinfo.value.jobId == job_id
    rec = jobs.store.get(job_id)
    assert rec.status == "SUCCEEDED" and rec.first_fetched_at is None
    # The right fetch operation still answers.
    assert jobs.fetch(simulate_op, job_id).stepsDone == 3


def test_fetch_with_same_response_type_of_another_service_is_invalid_fetch_type(jobs, simulate_op):
    other = _other_fetch_op("XOther", simulate_op.response)
    assert other.fetch_type == simulate_op.fetch_type
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED")
    with pytest.raises(InvalidFetchTypeFault) as excinfo:
        jobs.fetch(other, job_id)
    assert excinfo.value.jobId == job_id


def test_operations_sharing_a_response_type_share_the_fetch(jobs, simulate_op):
    """Several start operations of one service may share one fetch operation."""
    sibling = _other_fetch_op("XDemo", simulate_op.response)
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED")
    assert jobs.fetch(sibling, job_id).stepsDone == 3


# --------------------------------------------------------------------------- stop


@pytest.mark.parametrize("state", ["QUEUING", "DELETED"])
def test_stop_refused_with_job_state_fault(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state)
    with pytest.raises(JobStateFault) as excinfo:
        jobs.stop(job_id)
    _job_state_fault(excinfo, job_id, state)
    assert jobs.store.get(job_id).status == state


def test_stop_queued_job_hints_at_delete(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "QUEUING")
    with pytest.raises(JobStateFault) as excinfo:
        jobs.stop(job_id)
    assert "delete" in (excinfo.value.hint or "").lower()


def test_stop_unknown_raises_unknown_job_fault(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "UNKNOWN")
    with pytest.raises(UnknownJobFault) as excinfo:
        jobs.stop(job_id)
    assert type(excinfo.value) is UnknownJobFault
    assert excinfo.value.jobId == job_id
    assert jobs.store.get(job_id) is None


def test_stop_running_answers_stopping(jobs, simulate_op, notifier):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    told = []
    notifier.listen(told.append)
    job = jobs.stop(job_id)
    assert job_id in told, "a stop must wake the job's watchers"
    assert job.id == job_id
    assert job.status == "STOPPING"
    assert jobs.store.get(job_id).status == "STOPPING"


@pytest.mark.parametrize("state", ["STOPPING", "SUCCEEDED", "FAILED"])
def test_stop_answers_the_job_unchanged(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state, progress=progress_json(1, 2))
    before = jobs.store.get(job_id)
    job = jobs.stop(job_id)
    assert job.id == job_id
    assert job.status == state
    assert job.progress.successful == 2
    after = jobs.store.get(job_id)
    assert after == before, "stopping a job that cannot stop any more must change nothing"


# --------------------------------------------------------------------------- delete


@pytest.mark.parametrize("state", ["QUEUING", "SUCCEEDED", "FAILED"])
def test_delete_erases_queued_and_finished_jobs(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state)
    job = jobs.delete(job_id)
    assert job.id == job_id
    assert job.status == "DELETED"
    assert job.progress is None
    assert jobs.store.get(job_id) is None, "the record must be erased at once"
    watched = jobs.watch(job_id)
    assert watched.status == "UNKNOWN"
    assert watched.elapsedTime == 0
    # Now it is unknown to every operation.
    with pytest.raises(UnknownJobFault):
        jobs.fetch(simulate_op, job_id)
    assert jobs.delete(job_id).status == "UNKNOWN"


def test_deleted_queued_job_never_runs(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "QUEUING")
    jobs.delete(job_id)
    assert jobs.store.claim("n", now_ms(), 30_000) is None


@pytest.mark.parametrize("state", ["RUNNING", "STOPPING"])
def test_delete_running_job_answers_deleted_and_keeps_a_deleted_record(
    jobs, simulate_op, notifier, state
):
    job_id = put_in_state(jobs, simulate_op, state, progress=progress_json(2, 1))
    told = []
    notifier.listen(told.append)
    job = jobs.delete(job_id)
    assert job_id in told, "a delete must wake the job's watchers"
    assert job.id == job_id
    assert job.status == "DELETED"
    assert job.progress is None
    rec = jobs.store.get(job_id)
    assert rec is not None and rec.status == "DELETED"
    assert rec.result is None and rec.fault is None
    watched = jobs.watch(job_id)
    assert watched.status == "DELETED"
    assert watched.progress is None


def test_delete_deleted_job_answers_deleted_without_effect(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "DELETED")
    before = jobs.store.get(job_id)
    job = jobs.delete(job_id)
    assert job.id == job_id and job.status == "DELETED"
    assert jobs.store.get(job_id) == before


def test_delete_unknown_answers_unknown_without_effect(jobs, simulate_op, store):
    job_id = put_in_state(jobs, simulate_op, "UNKNOWN")
    job = jobs.delete(job_id)
    assert job.id == job_id
    assert job.status == "UNKNOWN"
    assert job.elapsedTime == 0
    assert store.get(job_id) is None
    assert store.counts_by_status() == {}


# --------------------------------------------------------------------------- the Job answer


def test_start_answers_queuing(jobs, simulate_op):
    job = jobs.start(simulate_op, SimulateRequest(steps=2))
    assert job.status == "QUEUING"
    assert job.elapsedTime == 0
    assert job.progress is None
    assert len(job.id) == 36
    rec = jobs.store.get(job.id)
    assert rec.status == "QUEUING"
    assert rec.service == "XDemo" and rec.operation == "simulate"
    assert rec.fetch_type == "SimulateResponse"
    assert codec.decode(json.loads(rec.request), SimulateRequest).steps == 2


def test_ids_are_unguessable_uuid4(jobs, simulate_op):
    import uuid

    ids = {jobs.start(simulate_op, SimulateRequest()).id for _ in range(20)}
    assert len(ids) == 20
    for job_id in ids:
        assert uuid.UUID(job_id).version == 4


def test_start_records_the_requests_own_timeouts(jobs, simulate_op):
    request = codec.decode(
        {"timeouts": {"queueingTimeout": 1500, "computationTimeout": 2500}}, SimulateRequest
    )
    rec = jobs.store.get(jobs.start(simulate_op, request).id)
    assert rec.queueing_timeout == 1500
    assert rec.computation_timeout == 2500


def test_start_past_max_queued_is_queue_overflow(jobs, simulate_op, settings):
    settings[0] = Settings(jobs=JobSettings(max_queued=2))
    first = jobs.start(simulate_op, SimulateRequest())
    jobs.start(simulate_op, SimulateRequest())
    with pytest.raises(QueueOverflowFault) as excinfo:
        jobs.start(simulate_op, SimulateRequest())
    assert type(excinfo.value) is QueueOverflowFault
    assert jobs.store.counts_by_status() == {"QUEUING": 2}
    # only QUEUING jobs count: once one runs there is room again
    claim_exactly(jobs.store, first.id)
    assert jobs.start(simulate_op, SimulateRequest()).status == "QUEUING"


def test_start_uses_the_services_own_max_queued(jobs, simulate_op, settings):
    settings[0] = Settings(
        jobs=JobSettings(max_queued=100),
        services={"XDemo": ServiceSettings(jobs=JobSettings(max_queued=1))},
    )
    jobs.start(simulate_op, SimulateRequest())
    with pytest.raises(QueueOverflowFault):
        jobs.start(simulate_op, SimulateRequest())


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED"])
def test_elapsed_time_is_frozen_after_finish(jobs, simulate_op, store, state):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    queued_at = store.get(job_id).queued_at
    outcome = (
        {"result": result_json(stored_response())}
        if state == "SUCCEEDED"
        else {"fault": json.dumps(codec.encode_fault(ProcessingFault("x")))}
    )
    assert store.finish(job_id, state, queued_at + 1234, **outcome)
    first = jobs.watch(job_id)
    assert first.status == state
    assert first.elapsedTime == 1234
    time.sleep(0.05)  # (time passes: a running clock would show it)
    assert jobs.watch(job_id).elapsedTime == 1234
    assert jobs.stop(job_id).elapsedTime == 1234


def test_elapsed_time_runs_while_active(jobs, simulate_op, store):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    queued_at = store.get(job_id).queued_at
    time.sleep(0.06)  # (the time that must show in elapsedTime)
    job = jobs.stop(job_id)
    assert job.elapsedTime >= 50
    assert job.elapsedTime <= now_ms() - queued_at


@pytest.mark.parametrize("state", STATES)
def test_progress_shown_by_state(jobs, simulate_op, state):
    """Progress: no for QUEUING/DELETED/UNKNOWN; yes (the last) for the others."""
    reported = progress_json(remaining=1, successful=2)
    job_id = put_in_state(
        jobs, simulate_op, state, progress=None if state in ("QUEUING", "UNKNOWN") else reported
    )
    job = jobs.watch(job_id, 250, 250)  # active jobs answer after 250 ms unchanged
    assert job.status == state
    if PROTOCOL_PROGRESS[state]:
        assert isinstance(job.progress, BulkProgress)
        assert (job.progress.remaining, job.progress.successful, job.progress.failed) == (1, 2, 0)
    else:
        assert job.progress is None


def test_progress_absent_while_running_until_reported(jobs, simulate_op, store):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    assert jobs.watch(job_id, 250, 250).progress is None
    assert store.set_progress(job_id, progress_json(2, 1))
    assert jobs.watch(job_id, 250, 250).progress.successful == 1
    assert store.set_progress(job_id, progress_json(1, 2))
    assert jobs.watch(job_id, 250, 250).progress.successful == 2


def test_progress_absent_for_a_job_handed_back_to_the_queue(jobs, simulate_op, store):
    from .helpers import NODE

    job_id = put_in_state(jobs, simulate_op, "RUNNING", progress=progress_json(2, 1))
    assert store.hand_back(job_id, NODE)
    job = jobs.watch(job_id, 250, 250)
    assert job.status == "QUEUING"
    assert job.progress is None
    claim_exactly(store, job_id)
    assert jobs.watch(job_id, 250, 250).progress is None, "a re-run starts without progress"

"""XDemo: a real service to try the protocol with (docs/protocol.md §9).

``simulate`` runs ``steps`` steps over ``durationMs``, reporting a BulkProgress after
each, sleeping (or, with ``busy``, burning CPU), and notices a stop at once, also in
the middle of a step.  ``transientFailures`` and ``retryLaterMs`` show retries
(docs/protocol.md §11): its first runs fail with a TransientFault, or ask RetryLater.
"""

import time

from xruntime.author import (
    BulkProgress,
    JobContext,
    ProcessingFault,
    RetryLater,
    Service,
    TransientFault,
)

from .types import SimulateRequest, SimulateResponse

service = Service("XDemo", "Simulates long operations, for trying the job protocol.")

PAYLOAD_PATTERN = "xruntime-demo-payload/"


def _burn(job: JobContext, seconds: float) -> bool:
    """Keep one core busy for ``seconds``; True if stopped meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if job.stop_requested:
            return True
        sum(i * i for i in range(2000))
    return job.stop_requested


def payload(size: int) -> str:
    repeats = size // len(PAYLOAD_PATTERN) + 1
    return (PAYLOAD_PATTERN * repeats)[:size]


@service.long_operation(
    request=SimulateRequest,
    response=SimulateResponse,
    faults=(ProcessingFault,),
    # the payload asked for, and the few fields beside it
    result_bound=lambda request: (request.resultSize or 0) + 4096,
)
def simulate(request: SimulateRequest, job: JobContext) -> SimulateResponse:
    if request.retryLaterMs and job.retries == 0:
        raise RetryLater(request.retryLaterMs / 1000, "the request asked XDemo to run later")
    if job.retries < (request.transientFailures or 0):
        raise TransientFault(
            f"transient failure {job.retries + 1} of {request.transientFailures}, "
            "as the request asked"
        )
    steps = request.steps or 1
    step_seconds = (request.durationMs or 0) / 1000 / steps
    done = 0
    for step in range(1, steps + 1):
        if request.failAtStep == step:
            raise ProcessingFault(
                f"the simulation failed at step {step}, as the request asked",
                hint="Send the request without failAtStep to let it succeed.",
            )
        stopped = _burn(job, step_seconds) if request.busy else job.wait(step_seconds)
        if stopped:
            break
        done += 1
        job.report_progress(BulkProgress(remaining=steps - done, successful=done, failed=0))
    if job.stop_requested and done == 0:
        raise job.stop_fault()
    return SimulateResponse(stepsDone=done, payload=payload(request.resultSize or 0))

"""XDemo's request and response (docs/protocol.md §9).

``steps`` and ``durationMs`` have upper bounds so that one request cannot occupy a
worker for centuries or report progress without end; a larger value is an
InvalidValueFault naming the field.
"""

from xruntime.author import Boolean, Long, RequestBase, ResponseBase, Unicode

MAX_STEPS = 1_000_000
MAX_DURATION_MS = 7 * 24 * 3600 * 1000  # 7 days


class SimulateRequest(RequestBase):
    durationMs = Long(ge=0, le=MAX_DURATION_MS)
    steps = Long(ge=1, le=MAX_STEPS)
    failAtStep = Long(ge=1)
    resultSize = Long(ge=0, le=100 * 1024 * 1024)
    busy = Boolean
    transientFailures = Long(ge=0, le=1000)  # the first N runs fail with a TransientFault
    retryLaterMs = Long(ge=0, le=MAX_DURATION_MS)  # the first run asks RetryLater with this delay


class SimulateResponse(ResponseBase):
    stepsDone = Long
    payload = Unicode

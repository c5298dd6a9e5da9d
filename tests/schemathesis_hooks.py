"""schemathesis hooks for tests/e2e/test_openapi_conformance.py (loaded through
``SCHEMATHESIS_HOOKS``): XDemo's requests made short and successful before they are sent.

A node answers 5xx where a request asks for it: ``failAtStep`` and ``transientFailures``
fail the job (``ProcessingFault``/``TransientFault``, 500), a short ``timeouts`` ends it
with ``RequestTimedOutFault`` (504), and ``retryLaterMs`` or a long ``durationMs`` hold
the synchronous form for up to days. Those are the document's declared answers, not
server errors; so that "no 5xx" stays a strict check, valid values of these fields are
taken out or bounded here (in every phase: ``before_call`` sees each request as it is
sent), and a value the schema refuses is left as it is, for the node to refuse."""

import schemathesis

from xruntime_services.xdemo.types import MAX_DURATION_MS, MAX_STEPS

#: The operations whose body is XDemo's SimulateRequest.
SIMULATE = ("/services/rs/XDemo/startSimulate", "/services/rs/XDemo/simulate")
#: Fields that ask for a failure or a delay, taken out when their value is valid (within
#: the schema's least and most, services/xdemo/types.py).
FAILING = (
    ("failAtStep", 1, 2**63 - 1),
    ("transientFailures", 0, 1000),
    ("retryLaterMs", 0, MAX_DURATION_MS),
)
#: Fields bounded to a job of a few milliseconds: (field, its schema's least and most,
#: the most here).
BOUNDED = (
    ("durationMs", 0, MAX_DURATION_MS, 20),
    ("steps", 1, MAX_STEPS, 5),
    ("resultSize", 0, 100 * 1024 * 1024, 1000),
)
#: A request's own timeouts are raised to at least this (ms): none ends a short job.
LEAST_TIMEOUT = 60_000


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


@schemathesis.hook
def before_call(context, case, **kwargs):
    if context.operation is None or context.operation.path not in SIMULATE:
        return
    body = case.body
    if not isinstance(body, dict):
        return
    for name, least, greatest in FAILING:
        if _integer(body.get(name)) and least <= body[name] <= greatest:
            del body[name]
    for name, least, greatest, most in BOUNDED:
        if _integer(body.get(name)) and least <= body[name] <= greatest:
            body[name] = min(body[name], most)
    timeouts = body.get("timeouts")
    if isinstance(timeouts, dict):
        for name, value in timeouts.items():
            if _integer(value) and 0 <= value < LEAST_TIMEOUT:
                timeouts[name] = LEAST_TIMEOUT

"""A job's whole life through any of the kit's clients: start, watch until it ends,
fetch (docs/protocol.md §3)."""

import time
from typing import Any

from .clients import Fault

#: The statuses a job ends in (a watch of such a job answers at once).
TERMINAL = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")


def _cap(name: str) -> str:
    return name[:1].upper() + name[1:]


def wait_done(client: Any, job_id: str, timeout: float = 60) -> dict[str, Any]:
    """Watch the job (watchJob) until it ends; answers its last ``Job``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job: dict[str, Any] = client.call(
            "XRuntime",
            "watchJob",
            {"id": job_id, "progressUpdatePeriod": 250, "maximumPollingPeriod": 5000},
        )
        if job["status"] in TERMINAL:
            return job
    raise AssertionError(f"job {job_id} did not end within {timeout:g} s")


def fetch(client: Any, service: str, job_id: str) -> Any:
    """The response of a finished job; its fault, raised, when it FAILED.

    A fetch operation is named after the response type (``fetchCountWordsResponse``),
    which a client cannot derive from the operation's name; the node refuses a fetch of
    another type with ``InvalidFetchTypeFault`` before it reads or marks anything, so
    the service's fetch operations are tried in turn."""
    services = client.call("XRuntime", "getRuntimeInformation", {"withJobCounts": False})
    listed = {s["name"]: s.get("operations", []) for s in services.get("services", [])}
    if service not in listed:
        raise AssertionError(f"the node does not serve {service!r}; it serves {sorted(listed)}")
    refused: Fault | None = None
    for operation in listed[service]:
        if operation.startswith("fetch"):
            try:
                return client.call(service, operation, {"id": job_id})
            except Fault as fault:
                if fault.type != "InvalidFetchTypeFault":
                    raise
                refused = fault
    raise refused or AssertionError(f"{service} has no fetch operation")


def run_job(
    client: Any,
    service: str,
    operation: str,
    request: dict[str, Any] | None = None,
    timeout: float = 60,
) -> tuple[dict[str, Any], Any]:
    """Start ``operation`` (``start<Operation>``), watch the job until it ends and fetch
    its response: answers (the last ``Job``, the response).  A FAILED job's fault is
    raised as ``Fault`` by the fetch, as a client would meet it."""
    job = client.call(service, "start" + _cap(operation), request or {})
    ended = wait_done(client, job["id"], timeout)
    return ended, fetch(client, service, job["id"])

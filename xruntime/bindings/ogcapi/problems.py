"""The OGC API binding's errors: RFC 7807 problem documents that carry the xServer fault.

OGC API – Processes answers an error as ``application/problem+json``: ``type`` (a URI),
``title``, ``status``, ``detail``, ``instance``.  Every error here is one of our faults
(docs/protocol.md §6), so each document is also the JSON binding's fault document: its
``message`` and ``faultInfo`` (``{"$type", "hint", …}``, ``codec.encode_fault``) are
extension members beside RFC 7807's, and a client that reads the JSON binding's faults
reads these unchanged.

- ``type`` is one of the standard's exception URIs where it names one
  (``no-such-process``, ``no-such-job``, ``result-not-ready``: each answered 404), else
  the fault's own type as a URI, its namespace and name
  (``http://xruntime.org/xserver/types#InvalidValueFault``);
- ``status`` is the HTTP status of the answer: the fault's ``http_status``, as in the
  JSON binding, but for the three OGC types and the HTTP-level answers of this binding
  (no such path: 404; a method a path does not serve: 405);
- ``Retry-After`` is sent where the JSON binding sends it.
"""

import json
from typing import Any

from werkzeug.wrappers import Response

from ...protocol import codec
from ...protocol.faults import XServerFault
from ...support import metrics

PROBLEM_TYPE = "application/problem+json"
OGC_EXCEPTIONS = "http://www.opengis.net/def/exceptions/ogcapi-processes-1/1.0/"
NO_SUCH_PROCESS = OGC_EXCEPTIONS + "no-such-process"
NO_SUCH_JOB = OGC_EXCEPTIONS + "no-such-job"
RESULT_NOT_READY = OGC_EXCEPTIONS + "result-not-ready"

#: The titles of the standard's exception types.
_TITLES = {
    NO_SUCH_PROCESS: "No such process",
    NO_SUCH_JOB: "No such job",
    RESULT_NOT_READY: "Result not ready",
}


def fault_type(fault: XServerFault) -> str:
    """The URI of a fault's type: its namespace and its name."""
    return f"{fault.get_namespace()}#{fault.get_type_name()}"


class ProblemResponse(Response):
    """An ``application/problem+json`` answer whose ``status`` member follows the
    answer's status, even when the ASGI application sets it afterwards (missing
    credentials: its 401 instead of the fault's 403)."""

    def __init__(
        self, problem: dict[str, Any], status: int, headers: dict[str, str] | None = None
    ) -> None:
        self.problem = problem
        super().__init__(status=status, content_type=PROBLEM_TYPE, headers=headers)
        self._render()

    @Response.status.setter  # type: ignore[attr-defined]
    def status(self, value: Any) -> None:
        Response.status.fset(self, value)  # type: ignore[attr-defined]
        if getattr(self, "problem", None) is not None:
            self._render()

    def _render(self) -> None:
        self.problem["status"] = self.status_code
        self.set_data(json.dumps(self.problem, ensure_ascii=False).encode("utf-8"))


def problem(
    fault: XServerFault,
    instance: str | None = None,
    ogc_type: str | None = None,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> ProblemResponse:
    """The answer to ``fault``: its problem document, with the OGC exception type
    ``ogc_type`` when the standard names one, at ``status`` (default: the fault's)."""
    metrics.fault_answered(fault)
    document: dict[str, Any] = {
        "type": ogc_type or fault_type(fault),
        "title": _TITLES.get(ogc_type or "", fault.get_type_name()),
        "status": 0,  # (set by the response)
        "detail": fault.faultstring,
    }
    if instance:
        document["instance"] = instance
    document.update(codec.encode_fault(fault))
    extra = dict(headers or {})
    if fault.retry_after_s is not None:
        extra["Retry-After"] = str(fault.retry_after_s)
    return ProblemResponse(document, status or fault.http_status, extra)

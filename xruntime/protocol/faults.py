"""The fault hierarchy of docs/protocol.md §6, one definition for every binding.

Each fault is at once a Python exception (raise it anywhere in the operation layer or
in service code) and a spyne model (its fields are declared, so the WSDL describes it
and the JSON codec writes it as ``faultInfo``).  ``message`` travels as the SOAP
``faultstring`` and the JSON ``message``; every other field is part of the fault info.
"""

from typing import Any

from spyne import Fault, Unicode

from .typeinfo import subclasses
from .types import NAMESPACE, JobStatus


class XServerFault(Fault):
    """Root of all xruntime faults: a message for people and a hint on what to do."""

    __namespace__ = NAMESPACE
    hint = Unicode

    #: SOAP faultcode family: ``Client`` for the caller's mistakes, ``Server`` otherwise.
    soap_faultcode = "Server"
    #: HTTP status of the JSON binding.
    http_status = 500
    #: Seconds for a JSON answer's ``Retry-After`` header, when trying again makes sense.
    retry_after_s: int | None = None
    default_hint = ""

    def __init__(self, message: str = "", **fields: Any) -> None:
        Fault.__init__(
            self, faultcode=self.soap_faultcode, faultstring=message or self.get_type_name()
        )
        for name in self.field_names():
            setattr(self, name, None)
        self.hint = self.default_hint or None
        for name, value in fields.items():
            if name not in self.field_names():
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, value)

    @classmethod
    def field_names(cls) -> list[str]:
        return list(cls.get_flat_type_info(cls).keys())

    @property
    def message(self) -> str:
        return self.faultstring

    def fields(self) -> dict:
        """The fault info fields that are set, in declaration order."""
        return {
            name: getattr(self, name)
            for name in self.field_names()
            if getattr(self, name) is not None
        }

    def __str__(self) -> str:
        return f"{type(self).__name__}: {self.faultstring}"

    __repr__ = __str__


class InvalidRequestFault(XServerFault):
    soap_faultcode = "Client"
    http_status = 400
    default_hint = "Correct the request and send it again."


class InvalidValueFault(InvalidRequestFault):
    parameter = Unicode
    value = Unicode


class MissingParameterFault(InvalidRequestFault):
    parameter = Unicode


class InvalidFetchTypeFault(InvalidRequestFault):
    jobId = Unicode
    default_hint = "Fetch the job with the fetch operation of the service that started it."


class UnknownJobFault(InvalidRequestFault):
    jobId = Unicode
    http_status = 404
    default_hint = (
        "The job never existed, was deleted or has expired; "
        "start it again if you still need its result."
    )


class JobStateFault(InvalidRequestFault):
    jobId = Unicode
    status = JobStatus
    http_status = 409
    default_hint = "Watch the job until it reaches a state that allows this operation."


class RejectedRequestFault(XServerFault):
    soap_faultcode = "Client"
    http_status = 500


class AccessDeniedFault(RejectedRequestFault):
    http_status = 403


class QueueOverflowFault(RejectedRequestFault):
    http_status = 503
    default_hint = "Too many jobs are waiting; try again later."


class QuotaExceededFault(RejectedRequestFault):
    """The caller has as many jobs of this service queued as their ``max_queued``
    allows (docs/protocol.md §10), their jobs could store past ``max_stored_bytes`` (§15,
    its own hint; a job whose result would pass it fails with it), or they hold as many
    watches as they may (§14); others' jobs are still accepted."""

    http_status = 429
    default_hint = "Wait until some of your queued jobs have started, then try again."


class RequestTimedOutFault(RejectedRequestFault):
    http_status = 504
    default_hint = "Allow more time, or make the request smaller."


class RequestStoppedFault(RejectedRequestFault):
    default_hint = "The job was stopped before it had any result to return."


class TemporarilyUnavailableFault(RejectedRequestFault):
    """The server cannot answer for a moment (its job store is unreachable): the same
    request, sent again a little later, is expected to succeed.  Not in the xServer fault
    hierarchy: a deviation, docs/protocol.md §6 and docs/architecture.md (decisions)."""

    http_status = 503
    retry_after_s = 2
    default_hint = (
        "The server cannot reach its job store for a moment; "
        "send the same request again in a few seconds."
    )


class ServiceNotConfiguredFault(RejectedRequestFault):
    service = Unicode
    http_status = 503
    default_hint = "The administrator has switched this service off."


class ProcessingFault(XServerFault):
    """The operation failed on valid input; services add subtypes."""


class TransientFault(ProcessingFault):
    """A failure that may pass (a backend briefly down): the job is run again from the
    start after a growing delay, up to ``max_retries`` times (docs/protocol.md §11).  Services
    raise it, or their own subtypes of it."""

    default_hint = "The job was retried and failed each time; try again later."


class InternalErrorFault(XServerFault):
    default_hint = "This is a fault of the server; the administrator finds the details in its log."


def all_fault_classes() -> list[type[XServerFault]]:
    """Every fault class known so far (services' subtypes included), root first."""
    return subclasses(XServerFault)


def fault_class(type_name: str, namespace: str | None = None) -> type[XServerFault] | None:
    """The fault class of a ``$type`` name, or None.  Two services may each define a
    fault of one name in their own namespace: the one in ``namespace`` (the service's
    whose job failed) is taken first, then the protocol's own."""
    named = [cls for cls in all_fault_classes() if cls.get_type_name() == type_name]
    for cls in named:
        if cls.get_namespace() == namespace:
            return cls
    return next((cls for cls in named if cls.get_namespace() == NAMESPACE), None) or next(
        iter(named), None
    )


for _cls in all_fault_classes():
    if _cls.__dict__.get("__namespace__") is None:
        _cls.__namespace__ = NAMESPACE

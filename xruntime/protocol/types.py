"""The protocol's data types, defined once as spyne models.

Every binding (SOAP, JSON, JSON-RPC) and the WSDL are derived from these classes, so
a field added here appears everywhere.  Services subclass ``RequestBase``,
``ResponseBase`` and ``JobProgress`` for their own types.
"""

from typing import Any

from spyne import Boolean, ComplexModel, ComplexModelBase, Enum, Long, Unicode
from spyne.model import ModelBase

from .states import Status

NAMESPACE = "http://xruntime.org/xserver/types"


class XModel(ComplexModel):
    """Base of every protocol type: one namespace, fields in declaration order."""

    __namespace__ = NAMESPACE


def required(spyne_type: type[ModelBase], **attributes: Any) -> Any:
    """A field the caller must send (``MissingParameterFault`` otherwise).  (Calling a
    complex type would make an instance, not a customised type: hence ``customize``.)
    Typed Any, as spyne's types are: spyne's metaclass makes the declaration an instance
    attribute holding the field's value."""
    return spyne_type.customize(min_occurs=1, nillable=False, **attributes)


def repeated(spyne_type: type[ModelBase]) -> Any:
    """A list field: repeated elements in SOAP, an array in JSON (typed Any, as
    ``required``)."""
    return spyne_type.customize(max_occurs="unbounded")


JobStatus = Enum(*(status.value for status in Status), type_name="JobStatus")
JobStatus.__namespace__ = NAMESPACE

ResultLimitationReason = Enum(
    "REQUEST_STOPPED",
    "REQUEST_TIMED_OUT",
    type_name="IntermediateResponseReason",
)
ResultLimitationReason.__namespace__ = NAMESPACE


class JobProgress(XModel):
    """Abstract: services define subtypes; they travel with their type name."""


class BulkProgress(JobProgress):
    remaining = Long
    successful = Long
    failed = Long


class Job(XModel):
    id = required(Unicode)
    status = required(JobStatus)
    elapsedTime = required(Long)
    progress = JobProgress


class Timeouts(XModel):
    """A request's own timeouts in ms; they can only shorten the configured ones."""

    queueingTimeout = Long
    computationTimeout = Long


class Callback(XModel):
    """Where the server POSTs the job when it ends (docs/protocol.md §14), and, with
    ``progressPeriod`` (ms, at least 1000), its progress no more often than that.  (Their
    bounds are checked at the start, ``callbacks.targets.check_callback``: a restricted
    type here would be an anonymous one spyne cannot write in the protocol's schema.)"""

    url = required(Unicode)
    progressPeriod = Long


class RequestBase(XModel):
    """Base of every long operation's request."""

    timeouts = Timeouts
    callback = Callback


class ResultLimitation(XModel):
    """Something the caller should know about a result: it is partial, etc."""

    message = Unicode


class IntermediateResponseLimitation(ResultLimitation):
    reason = ResultLimitationReason


class ResponseBase(XModel):
    """Base of every long operation's response."""

    resultLimitations = repeated(ResultLimitation)


class JobRequest(XModel):
    id = required(Unicode)


class WatchRequest(XModel):
    id = required(Unicode)
    progressUpdatePeriod = Long
    maximumPollingPeriod = Long


class RuntimeInformationRequest(XModel):
    """All optional: an empty request asks for everything."""

    withJobCounts = Boolean  # false: leave out the job counts (they cost a query)


class ServiceInformation(XModel):
    name = Unicode
    operations = repeated(Unicode)


class JobCount(XModel):
    status = JobStatus
    count = Long


class RuntimeInformation(XModel):
    version = Unicode
    uptime = Long
    node = Unicode
    services = repeated(ServiceInformation)
    jobs = repeated(JobCount)


class JobEvent(XModel):
    """One change in a job's life (docs/protocol.md §11)."""

    time = Unicode  # ISO 8601 UTC with milliseconds: 2026-11-23T06:41:38.123Z
    status = JobStatus  # the job's status after the change
    attempt = Long  # the job's runs so far
    node = Unicode  # where it ran (or runs)
    message = Unicode


class JobEvents(XModel):
    id = Unicode
    parentId = Unicode  # a child job's parent (docs/protocol.md §13)
    events = repeated(JobEvent)


class ListJobsRequest(XModel):
    """All optional (docs/protocol.md §12): every job the caller may see, newest first."""

    status = repeated(JobStatus)
    service = Unicode
    user = Unicode
    limit = Long  # 100 unless given; at most 1000
    cursor = Unicode  # a previous answer's nextCursor: the page after it
    parentId = Unicode  # only the children of this job (docs/protocol.md §13)


class JobSummary(XModel):
    id = Unicode
    service = Unicode
    operation = Unicode
    status = JobStatus
    user = Unicode
    queuedAt = Unicode  # ISO 8601 UTC with milliseconds, as JobEvent.time
    startedAt = Unicode
    finishedAt = Unicode
    fetched = Boolean
    attempts = Long
    progress = JobProgress
    parentId = Unicode  # a child job's parent (docs/protocol.md §13)


class JobList(XModel):
    jobs = repeated(JobSummary)
    nextCursor = Unicode  # absent on the last page


class WatchJobsRequest(XModel):
    """watchJobs (docs/protocol.md §14): watchJob's periods over many ids.  ``ids`` is
    not ``required``: SOAP cannot tell an empty list from none, so both are one
    ``InvalidValueFault { parameter: "ids" }`` in every binding."""

    ids = repeated(Unicode)
    progressUpdatePeriod = Long
    maximumPollingPeriod = Long


class WatchedJobs(XModel):
    """watchJobs' answer: the jobs that changed, each as watchJob answers it.  Not
    PROTOCOL §14's ``JobList``: that name is listJobs' list of ``JobSummary`` here."""

    jobs = repeated(Job)


__all__ = [
    "NAMESPACE",
    "XModel",
    "required",
    "repeated",
    "JobStatus",
    "ResultLimitationReason",
    "JobProgress",
    "BulkProgress",
    "Job",
    "Timeouts",
    "RequestBase",
    "ResultLimitation",
    "IntermediateResponseLimitation",
    "ResponseBase",
    "JobRequest",
    "WatchRequest",
    "RuntimeInformationRequest",
    "ServiceInformation",
    "JobCount",
    "RuntimeInformation",
    "JobEvent",
    "JobEvents",
    "ListJobsRequest",
    "JobSummary",
    "JobList",
    "WatchJobsRequest",
    "WatchedJobs",
    "link_base",
    "Callback",
]


def link_base(cls: type[ComplexModelBase]) -> None:
    """spyne records a base class only when it has fields; a subtype of a field-less
    base (``BulkProgress`` of ``JobProgress``) would not be declared as its extension
    in the WSDL, and ``xsi:type`` could not name it.  Record the base explicitly."""
    if getattr(cls, "__orig__", None) is not None or cls.__dict__.get("__extends__") is not None:
        return
    base = cls.__bases__[0]
    if base not in (XModel, ComplexModel) and issubclass(base, XModel):
        cls.__extends__ = base


def _pin_namespaces() -> None:
    """spyne gives a class without its own ``__namespace__`` the namespace of whichever
    application first sees it; pin every protocol type to ours, once."""
    pending = [XModel]
    while pending:
        cls = pending.pop()
        if cls.__dict__.get("__namespace__") is None:
            cls.__namespace__ = NAMESPACE
        link_base(cls)
        pending.extend(cls.__subclasses__())


_pin_namespaces()

"""The service author's API: everything a service module needs, from one place.

::

    from xruntime.author import (
        BulkProgress, JobContext, Long, ProcessingFault, RequestBase, ResponseBase,
        Service, Unicode, XModel, repeated, required,
    )

Types (``XModel``, ``RequestBase``, ``ResponseBase``, the progress types), field types
and their bounds (``Unicode(max_len=…)``, ``Long(ge=…, le=…)``, ``Enum``, ``repeated``,
``required``), the faults, and the ``Service`` with its long operations, child jobs,
retries, tables and settings.  A service imports nothing else of xruntime, and not
spyne, whose models these are: what a service writes stays the same if the framework
changes what stands behind it.  The registry that finds the services is
``xruntime.author.registry``.
"""

from spyne import Boolean, Double, Enum, Integer, Long, Unicode

from ..protocol.faults import (
    InvalidRequestFault,
    InvalidValueFault,
    MissingParameterFault,
    ProcessingFault,
    TransientFault,
    XServerFault,
)
from ..protocol.types import (
    BulkProgress,
    IntermediateResponseLimitation,
    JobProgress,
    RequestBase,
    ResponseBase,
    ResultLimitation,
    XModel,
    repeated,
    required,
)
from .children import Child, ChildOutcome, Joined
from .service import JobContext, LongOperation, Operation, RetryLater, Service, Setting
from .tables import Table

__all__ = [
    # the service and what its functions see
    "Service",
    "JobContext",
    "RetryLater",
    "Setting",
    "LongOperation",
    "Operation",
    # child jobs, and results stored without decoding them
    "Child",
    "ChildOutcome",
    "Joined",
    "Table",
    # types
    "XModel",
    "RequestBase",
    "ResponseBase",
    "JobProgress",
    "BulkProgress",
    "ResultLimitation",
    "IntermediateResponseLimitation",
    # field types and their forms
    "Unicode",
    "Integer",
    "Long",
    "Double",
    "Boolean",
    "Enum",
    "repeated",
    "required",
    # faults
    "XServerFault",
    "ProcessingFault",
    "TransientFault",
    "InvalidRequestFault",
    "InvalidValueFault",
    "MissingParameterFault",
]

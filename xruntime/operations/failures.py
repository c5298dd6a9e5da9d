"""Any exception raised while serving a call, as the fault the client gets: the one
place that decides what an unexpected error looks like on the wire, for every binding
and the HTTP layer.  It sits above the store (a store outage is a fault of its own)."""

import logging

from ..protocol.faults import InternalErrorFault, TemporarilyUnavailableFault, XServerFault
from ..store.unavailable import StoreUnavailable
from ..support.logs import OncePerPeriod

log = logging.getLogger(__name__)
_store_outage_log = OncePerPeriod(log, 5.0)


def as_fault(exc: BaseException, where: str) -> XServerFault:
    """A fault for the client: ours as it is; anything else is a bug, logged here with its
    traceback and answered as a plain InternalErrorFault (no traceback leaves the server)."""
    if isinstance(exc, XServerFault):
        return exc
    if isinstance(exc, StoreUnavailable):
        _store_outage_log.warning("answering %s with TemporarilyUnavailableFault: %s", where, exc)
        return TemporarilyUnavailableFault("the job store is unreachable for the moment")
    log.error("internal error while serving %s", where, exc_info=exc)
    return InternalErrorFault(f"internal error while serving {where}; see the server log")

"""XDemo's request and response (PROTOCOL §9)."""
from spyne import Boolean, Long, Unicode

from xruntime.protocol.types import RequestBase, ResponseBase

NAMESPACE = "http://xruntime.org/xserver/xdemo"


class SimulateRequest(RequestBase):
    __namespace__ = NAMESPACE
    durationMs = Long(ge=0)
    steps = Long(ge=1)
    failAtStep = Long(ge=1)
    resultSize = Long(ge=0, le=100 * 1024 * 1024)
    busy = Boolean


class SimulateResponse(ResponseBase):
    __namespace__ = NAMESPACE
    stepsDone = Long
    payload = Unicode

"""A worker process: runs one job at a time, talking to its slot over a pipe.

Messages from the slot: ``("run", job_id, service, operation, request_json)`` and
``("exit",)``.  Messages to the slot: ``("progress", job_id, progress_json)`` and
``("done", job_id, "result" | "fault", json_text)``.  A stop arrives through a shared
event (set from the server process), so the function sees it at once, also while it
sleeps in ``job.wait``.  Requests, results and faults cross the pipe in the codec's
JSON form: the encoding work is done here, off the server's threads.
"""
import json
import logging
import signal

from ..protocol import codec
from ..protocol.faults import InternalErrorFault, RequestStoppedFault, RequestTimedOutFault, XServerFault
from ..protocol.types import IntermediateResponseLimitation

log = logging.getLogger("xruntime.worker")

# Values of the shared stop reason.
NOT_STOPPED, STOPPED, TIMED_OUT, ABORTED = 0, 1, 2, 3


class WorkerJobContext:
    """The ``job`` argument of a long operation's function (see xruntime.service)."""

    def __init__(self, conn, job_id, stop_event, stop_reason):
        self._conn = conn
        self._job_id = job_id
        self._stop_event = stop_event
        self._stop_reason = stop_reason

    @property
    def id(self) -> str:
        return self._job_id

    def report_progress(self, progress) -> None:
        self._conn.send(("progress", self._job_id, codec.dumps(codec.encode(progress))))

    @property
    def stop_requested(self) -> bool:
        return self._stop_event.is_set()

    def wait(self, seconds: float) -> bool:
        if seconds <= 0:
            return self._stop_event.is_set()
        return self._stop_event.wait(seconds)

    @property
    def timed_out(self) -> bool:
        return self._stop_reason.value == TIMED_OUT

    def stop_fault(self) -> XServerFault:
        if self.timed_out:
            return RequestTimedOutFault("the computation timeout ended the job before it had any result")
        return RequestStoppedFault("the job was stopped before it had any result")

    def intermediate_limitation(self) -> IntermediateResponseLimitation:
        if self.timed_out:
            return IntermediateResponseLimitation(
                message="the computation timeout stopped the job; this is an intermediate result",
                reason="REQUEST_TIMED_OUT")
        return IntermediateResponseLimitation(
            message="the job was stopped; this is an intermediate result", reason="REQUEST_STOPPED")


def mark_intermediate(response, job: WorkerJobContext):
    """Add the IntermediateResponseLimitation to a result returned after a stop,
    unless the function added one itself."""
    limits = list(getattr(response, "resultLimitations", None) or [])
    if not any(isinstance(x, IntermediateResponseLimitation) for x in limits):
        limits.append(job.intermediate_limitation())
        response.resultLimitations = limits
    return response


def run_one(conn, stop_event, stop_reason, job_id, service, operation, request_json):
    """Run one job and send its outcome: ("done", id, "result"|"fault", json)."""
    from ..registry import long_operation
    job = WorkerJobContext(conn, job_id, stop_event, stop_reason)
    try:
        op = long_operation(service, operation)
        request = codec.decode(json.loads(request_json), op.request)
        response = op.function(request, job)
        if not isinstance(response, op.response):
            raise TypeError(f"{service}.{operation} returned {type(response).__name__}, "
                            f"not {op.response.__name__}")
        if job.stop_requested:
            response = mark_intermediate(response, job)
        outcome = ("result", codec.dumps(codec.encode(response, op.response)))
    except XServerFault as fault:
        outcome = ("fault", codec.dumps(codec.encode_fault(fault)))
    except BaseException as exc:  # a bug in the service: log it here, tell the client plainly
        log.exception("job %s: %s.%s raised", job_id, service, operation)
        fault = InternalErrorFault(f"the operation {service}.{operation} failed with an internal "
                                   f"error ({type(exc).__name__}); see the server log")
        outcome = ("fault", codec.dumps(codec.encode_fault(fault)))
    conn.send(("done", job_id) + outcome)


def worker_main(conn, stop_event, stop_reason):
    """Entry point of a worker process (started with ``spawn``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the server decides when workers end
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    from ..registry import discover
    discover()                                     # import services before the first job
    conn.send(("ready",))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "exit":
            return
        _, job_id, service, operation, request_json = message
        run_one(conn, stop_event, stop_reason, job_id, service, operation, request_json)

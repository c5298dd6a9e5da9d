"""A worker process: runs one job at a time, talking to its slot over a pipe.

The messages are the types of ``engine.messages``: ``RunJob`` and ``Exit`` from the
slot; ``Ready`` (or ``StartFailed``, when the services cannot be imported), then per
job ``Progress`` and one ``Done`` with the run's outcome (``Result``: the response
already in the store's form; ``Failure``; ``Transient``: a TransientFault, which the
slot retries or fails; ``RetryAsked``: RetryLater; ``ChildrenAsked``:
``run_children``).  Progress is coalesced here, at the source: at most one message per
``PROGRESS_PERIOD`` (the latest value wins), so a function that reports without pause
cannot flood the pipe or the server.  A stop arrives through a shared event (set from
the server process) and a shared ``StopReason``, so the function sees it at once, also
while it sleeps in ``job.wait``.  Requests, results and faults cross the pipe in the
codec's JSON form: the encoding work is done here, off the server's threads.

A worker dies with its node's main process (``support.parent_death``: SIGKILL from the
kernel, so that no job's body runs on after its node is gone).  Should a message still
find the pipe to the node broken (where that signal cannot be had), the worker exits at
once with one line, ``the node is gone``, instead of letting the error out into the
service's function, which logged it as the service's own (``node_gone``).
"""

import ctypes
import gc
import importlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any, cast

from ..author.children import Child, ChildOutcome, Joined, Stages, WaitForChildren
from ..author.registry import discover, find_long_operation, long_operation
from ..author.service import LongOperation, RetryLater
from ..author.tables import Table, encoded, table
from ..payload.arrays import stored_table
from ..payload.form import IN_MEMORY, Composite, Output, Ref, Written, pack
from ..payload.list_join import join_lists
from ..protocol import codec
from ..protocol.faults import (
    InternalErrorFault,
    RequestStoppedFault,
    RequestTimedOutFault,
    TransientFault,
    XServerFault,
)
from ..protocol.types import IntermediateResponseLimitation, JobProgress, XModel
from ..settings.model import Settings
from ..store import FinishedChild
from ..store.result_files import Located, Span, fits
from ..support.logs import one_line, set_level, setup_logging
from ..support.parent_death import die_with_parent
from . import spill
from .messages import (
    ChildrenAsked,
    ComposedResult,
    Done,
    Exit,
    Failure,
    Outcome,
    Progress,
    Ready,
    Result,
    RetryAsked,
    RunJob,
    SpilledResult,
    StartFailed,
    StopReason,
    Transient,
)
from .worker_memory import KeptMemory

log = logging.getLogger(__name__)

PROGRESS_PERIOD = 0.2  # s between two progress messages of one job


def send(conn: Connection, message: object) -> None:
    """Send ``message`` to the slot; a pipe that is broken means the node is gone."""
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        node_gone()


def node_gone() -> None:
    """The node's main process is gone (the pipe to it broke): end this process now,
    with the job it runs, from whichever thread found out (the function's, the progress
    timer's).  Nothing the function would still do can reach anyone, and the node that
    takes the job over runs it again from the start."""
    log.warning("worker: the node is gone (the pipe to its main process is broken); exiting")
    os._exit(0)


class WorkerJobContext:
    """The ``job`` argument of a long operation's function (see xruntime.author.service)."""

    def __init__(
        self,
        conn: Connection,
        job_id: str,
        stop_event: Event,
        stop_reason: ctypes.c_int,
        attempt: int = 1,
        retries: int = 0,
        children: Sequence[FinishedChild] = (),
        settings: Settings | None = None,
        service: str = "",
        cores: int = 0,
    ) -> None:
        self._conn = conn
        self._cores = cores  # 0: all of the node's
        self._node_settings = settings or Settings()  # in force when the run started
        self._service = service
        self._job_id = job_id
        self._stages = Stages(
            children, find_long_operation, self._node_settings
        )  # the children earlier runs started (docs/protocol.md §13)
        self.attempt = attempt  # this run's number (1: the first)
        self.retries = retries  # retries before this run
        self._stop_event = stop_event
        self._stop_reason = stop_reason
        self._lock = threading.Lock()  # the function's thread and the timer both send
        self._pending: str | None = None  # the latest progress not sent yet (JSON)
        self._next_send = 0.0  # time.monotonic() before which progress waits
        self._timer: threading.Timer | None = None  # sends the pending progress when its turn comes
        self._closed = False  # the outcome is sent: nothing more goes out

    @property
    def cores(self) -> int:
        return self._cores or os.cpu_count() or 1

    @property
    def id(self) -> str:
        return self._job_id

    @property
    def settings(self) -> Mapping[str, object]:
        """The service's own settings in force when this run started."""
        found = discover().get(self._service)
        return found.settings_in_force(self._node_settings) if found is not None else {}

    def report_progress(self, progress: JobProgress) -> None:
        """Send the progress now if the last message is ``PROGRESS_PERIOD`` old (on the
        monotonic clock; the first report goes at once), else keep it (replacing any
        kept one) for a timer that sends it when its turn comes: two messages are never
        less than ``PROGRESS_PERIOD`` apart, however often the function reports and
        however late its threads run (only the flush before the outcome may come
        sooner), and the latest value still arrives even if the function then runs
        long in silence."""
        text = codec.dumps(codec.encode(progress))  # encoded now: the caller may reuse the object
        with self._lock:
            if self._closed:  # reported by a thread the function left behind
                return
            self._pending = text
            self._send_or_keep()

    def _send_or_keep(self):
        """Send the kept progress if its turn has come, else make sure that a timer
        will look again when it comes (the caller holds the lock).  The time is checked
        here every time, by the timer too: a timer is not the turn itself.  Under load
        it runs late, after the function's thread has already sent at the turn it was
        set for, and sending then without looking (as it once did) put two messages
        a few ms apart."""
        wait = self._next_send - time.monotonic()
        if wait <= 0:
            self._send_pending()
        elif self._timer is None and self._pending is not None:
            self._timer = threading.Timer(wait, self._on_timer)
            self._timer.daemon = True
            self._timer.start()

    def _on_timer(self):
        with self._lock:
            self._timer = None
            if not self._closed:  # a timer cancelled too late finds the outcome sent
                self._send_or_keep()

    def _send_pending(self):
        """Send the kept progress, if any (the caller holds the lock)."""
        if self._pending is not None:
            send(self._conn, Progress(self._job_id, self._pending))
            self._pending = None
            self._next_send = time.monotonic() + PROGRESS_PERIOD

    def send_outcome(self, outcome: Outcome) -> None:
        """Send the kept progress, then the outcome, and send nothing after it."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._send_pending()
            self._closed = True
            send(self._conn, Done(self._job_id, outcome))

    @property
    def stop_requested(self) -> bool:
        return self._stop_event.is_set()

    def wait(self, seconds: float) -> bool:
        if seconds <= 0:
            return self._stop_event.is_set()
        return self._stop_event.wait(seconds)

    @property
    def timed_out(self) -> bool:
        return self._stop_reason.value == StopReason.TIMED_OUT

    def stop_fault(self) -> XServerFault:
        if self.timed_out:
            return RequestTimedOutFault(
                "the computation timeout ended the job before it had any result"
            )
        return RequestStoppedFault("the job was stopped before it had any result")

    def run_children(
        self, children: Iterable[Child], failures: str = "raise"
    ) -> list[ChildOutcome]:
        """Start ``children`` (``Child``s) and answer their outcomes, in order: see
        xruntime.author.children.  ``failures="raise"``: a failed child's fault ends this job
        too (its running siblings are stopped); ``"return"``: every outcome is answered,
        the service decides.  After a stop every outcome is answered."""
        return self._stages.run(children, failures, self.stop_requested, self.stop_fault)

    @staticmethod
    def join(response: XModel, field: str, outcomes: Iterable[ChildOutcome]) -> Joined:
        """Return this from the function: ``response`` with its list ``field`` made of
        the successful ``outcomes``' own ``field`` lists, in order, joined in the
        store's form without decoding them (a large result assembled at no cost)."""
        return Joined(response, field, [o for o in outcomes if o.succeeded])

    @staticmethod
    def table(response: XModel, field: str, **columns: Any) -> Table:
        """Return this from the function: ``response`` with its list ``field`` made of
        the rows of ``columns`` (2-D integer NumPy arrays), stored from the arrays'
        bytes (xruntime.author.tables)."""
        return table(response, field, **columns)

    @staticmethod
    def encoded(response: XModel, field: str, **columns: Any) -> Table:
        """Return this from the function: ``response`` with the string members of its
        object ``field`` holding ``columns`` (integer arrays within int32) as base64 of
        little-endian int32, stored as the int32 bytes (xruntime.author.tables)."""
        return encoded(response, field, **columns)

    def intermediate_limitation(self) -> IntermediateResponseLimitation:
        if self.timed_out:
            return IntermediateResponseLimitation(
                message="the computation timeout stopped the job; this is an intermediate result",
                reason="REQUEST_TIMED_OUT",
            )
        return IntermediateResponseLimitation(
            message="the job was stopped; this is an intermediate result", reason="REQUEST_STOPPED"
        )


def mark_intermediate(response: XModel, job: WorkerJobContext) -> XModel:
    """Add the IntermediateResponseLimitation to a result returned after a stop,
    unless the function added one itself."""
    limits = list(getattr(response, "resultLimitations", None) or [])
    if not any(isinstance(x, IntermediateResponseLimitation) for x in limits):
        limits.append(job.intermediate_limitation())
        response.resultLimitations = limits
    return response


def stored_result(
    response: XModel | Joined | Table, op: LongOperation, into: Output = IN_MEMORY
) -> bytes | bytearray | Written | Composite:
    """The response in the store's form, made here, in the worker (a ``Joined`` one
    from its parts, which are never decoded, and whose pieces kept in result files are
    referred to there, not copied: a ``Composite``; a ``Table`` from its arrays,
    written into a buffer from ``into``)."""
    if isinstance(response, Table):
        return stored_table(response, op.response, into)
    if isinstance(response, Joined):
        outer = response.response
        setattr(outer, response.field, [])
        return join_lists(
            codec.dumps(codec.encode(outer, op.response)),
            response.field,
            # the successful children's: each has its result
            cast(list[bytes], [part.stored for part in response.parts]),
            [part.location for part in response.parts],
        )
    return pack(codec.dumps(codec.encode(response, op.response)))


def _composed_message(
    stored: Composite, run: RunJob, job_id: str
) -> ComposedResult | Result | SpilledResult:
    """A result that refers to its children's result files (``Composite``): its own
    bytes (the head and tail of its form, a few KB) go into a file of the spill folder,
    and the main process is told where the rest is (``ComposedResult``); the store
    takes the file in and refers to them all.  Written whole, as any result, when
    there is no file to write or its spans are too many to refer to."""
    spans: list[Span] = []
    at = 0
    for segment in stored.segments:
        if isinstance(segment, Ref):
            spans += cast(Located, segment.origin).spans_of(segment.offset, segment.length)
        else:
            spans.append(Span(None, at, len(segment)))
            at += len(segment)
    if run.spill_folder is not None and fits(spans):
        path = spill.spill(run.spill_folder, job_id, stored.own(), run.spill_is_final)
        if path is not None:
            return ComposedResult(path, tuple(spans))
    whole = b"".join(
        cast(Located, s.origin).read(s.offset, s.length) if isinstance(s, Ref) else s
        for s in stored.segments
    )
    return _result_message(whole, None, run, job_id)


def _result_message(
    stored: bytes | bytearray | Written | Composite,
    spilling: spill.Spill | None,
    run: RunJob,
    job_id: str,
) -> Result | SpilledResult | ComposedResult:
    """How a stored form goes to the main process: as the file it was written into, as
    a file it is written into now, or through the pipe (``engine.spill`` gives the
    reason for each route); one that refers to others, as its own bytes' file and
    where the others are (``_composed_message``)."""
    if isinstance(stored, Composite):
        return _composed_message(stored, run, job_id)
    if spilling is not None and spilling.holds(stored):
        return SpilledResult(spilling.hand_over())
    assert isinstance(stored, (bytes, bytearray))  # (only a spill makes a file: its own)
    if run.spill_folder is not None and len(stored) > spill.SPILL_ABOVE:
        path = spill.spill(run.spill_folder, job_id, stored, run.spill_is_final)
        if path is not None:
            return SpilledResult(path)
    return Result(bytes(stored) if isinstance(stored, bytearray) else stored)


def run_one(
    conn: Connection,
    stop_event: Event,
    stop_reason: ctypes.c_int,
    run: RunJob,
    settings: Settings | None = None,
) -> None:
    """Run one job and send its outcome (``Done``); ``settings``: the services' own
    settings in force (``run.settings``, or the last ones the process was given)."""
    job_id, service, operation = run.job_id, run.service, run.operation
    job = WorkerJobContext(
        conn,
        job_id,
        stop_event,
        stop_reason,
        run.attempt,
        run.retries,
        run.children,
        settings if run.settings is None else run.settings,
        service,
        run.cores,
    )
    outcome: Outcome
    # where a large stored form is written as it is made (None: through the pipe)
    spilling = (
        spill.Spill(run.spill_folder, job_id, run.spill_is_final)
        if run.spill_folder is not None
        else None
    )
    try:
        op = long_operation(service, operation)
        request = codec.decode(codec.loads(run.request), op.request)
        response = op.function(request, job)
        given = response.response if isinstance(response, (Joined, Table)) else response
        if not isinstance(given, op.response):
            raise TypeError(
                f"{service}.{operation} returned {type(given).__name__}, not {op.response.__name__}"
            )
        if job.stop_requested:
            mark_intermediate(given, job)
        stored = stored_result(response, op, spilling or IN_MEMORY)
        # The response (a table's arrays) goes before the stored form is copied again:
        # into bytes (a bytearray pickles through a copy of itself as bytes), then into
        # the message sent.  A worker holds two of the three at a time, never all three.
        del response, given
        outcome = _result_message(stored, spilling, run, job_id)
        del stored
    except WaitForChildren as fan_out:
        outcome = ChildrenAsked(fan_out.stage, fan_out.fail_fast, fan_out.children)
    except RetryLater as asked:
        outcome = RetryAsked(int(asked.after * 1000), asked.reason)
    except spill.NoRoom as no_room:  # the store could not keep it either: the job fails
        log.warning("job %s: no room for its result on the job store's disk: %s", job_id, no_room)
        no_room_fault = spill.no_room_fault(no_room.size, str(no_room))
        outcome = Failure(codec.dumps(codec.encode_fault(no_room_fault)))
    except XServerFault as fault:
        text = codec.dumps(codec.encode_fault(fault))
        outcome = Transient(text) if isinstance(fault, TransientFault) else Failure(text)
    except BaseException as exc:  # a bug in the service: log it here, tell the client plainly
        log.exception("job %s: %s.%s raised", job_id, service, operation)
        internal = InternalErrorFault(
            f"the operation {service}.{operation} failed with an internal "
            f"error ({type(exc).__name__}); see the server log"
        )
        outcome = Failure(codec.dumps(codec.encode_fault(internal)))
    finally:
        if spilling is not None:
            spilling.discard()  # (unless handed over)
    job.send_outcome(outcome)


def worker_main(conn: Connection, stop_event: Event, stop_reason: ctypes.c_int) -> None:
    """Entry point of a worker process (started with ``spawn``)."""
    die_with_parent()  # first: deaf to Ctrl-C, ends with the node (the server decides)
    setup_logging(inherit=True)  # [log] format and level: as the main process left them
    try:
        for service in discover().values():  # import services before the first job
            for module in service.worker_imports:
                importlib.import_module(module)
    except Exception as exc:  # the slot says why, and does not start workers for ever
        send(conn, StartFailed(one_line(exc)))
        raise
    # What exists now (the modules, the services' types and what their worker_imports
    # loaded: NumPy) lives as long as the process: a full collection, which a job's own
    # objects set off (a matrix's 3 000 decoded locations), need not walk it again (it
    # took 11-17 ms, in the middle of a child job's run).
    gc.freeze()
    send(conn, Ready())
    settings: Settings | None = None  # the services' own, as last sent (RunJob.settings)
    memory = KeptMemory()  # what the process keeps of what its jobs free
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        match message:
            case RunJob():
                if message.settings is not None:  # changed: [log] level, kept memory as in force
                    settings = message.settings
                    set_level(settings.log_level, "worker process")
                    memory.keep(settings.kept_memory_bytes)
                run_one(conn, stop_event, stop_reason, message, settings)
                memory.after_job()
            case Exit():
                return
            case _:
                raise TypeError(f"a worker process got {message!r} from its slot")

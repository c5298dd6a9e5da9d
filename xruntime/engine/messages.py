"""What a worker slot (server side) and its worker process say to each other.

Both sides import these types, so a field added, renamed or misread fails in one place
instead of as a wrong index into a positional tuple.  They cross a
``multiprocessing`` pipe: every message is a small frozen dataclass, pickled, defined
at module level (the worker process is started with ``spawn`` and imports this
module to unpickle them).  Requests, results and faults travel as the codec's JSON
text, encoded in the worker, off the server's threads.

Slot → worker: ``RunJob``, ``Exit``.  Worker → slot: ``Ready`` once, then for each
job any number of ``Progress`` and one ``Done`` carrying the run's ``Outcome``.

A stop does not go through the pipe (the function may be busy and never read it): it
is a shared event plus a shared integer, the ``StopReason``, which the slot sets and
the function's ``job`` reads.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from ..settings.model import Settings
from ..store import FinishedChild
from ..store.result_files import ComposedFile, ResultFile, Span


class _Pickled:
    """A message pickles as its class and its fields' values in order: a slotted
    dataclass's own pickling runs Python code per field on each side (its
    ``__getstate__`` and ``__setstate__``), for the few messages of every job."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        names: tuple[str, ...] = self.__slots__  # (the dataclass's: its fields, in order)
        return type(self), tuple([getattr(self, name) for name in names])


class StopReason(IntEnum):
    """Why the slot asked the function to stop (the value of a shared ``"i"`` integer)."""

    NOT_STOPPED = 0
    STOPPED = 1  # stopJob: the function winds down and hands back an intermediate result
    TIMED_OUT = 2  # the computation timeout: the same, marked REQUEST_TIMED_OUT
    ABORTED = 3  # deleted (or the run was lost): whatever it returns is thrown away


# ------------------------------------------------------------------ slot → worker


@dataclass(frozen=True, slots=True)
class RunJob(_Pickled):
    """Run one job: the request as the codec's JSON text; ``children``: how the
    children earlier runs of the job started have ended (docs/protocol.md §13)."""

    job_id: str
    service: str
    operation: str
    request: str
    attempt: int = 1  # this run's number (1: the first)
    retries: int = 0  # retries before this run
    children: Sequence[FinishedChild] = ()
    #: the services' own settings in force when the run starts (``Settings.services_own``:
    #: ``job.settings`` and the ``validate`` of the children it starts read them); None:
    #: the same as the worker process's last run was given (the defaults before any).
    #: Sent only when they changed (a reload, a new process): their pickle cost more
    #: than all the rest of the message, and they change rarely.
    settings: Settings | None = None
    #: where a result larger than ``spill.SPILL_ABOVE`` is written (``SpilledResult``);
    #: None: every result goes through the pipe
    spill_folder: str | None = None
    #: the spill folder is on the disk where the store keeps results (a SQLite node's):
    #: a result with no room there fails its job (``spill.NoRoom``)
    spill_is_final: bool = False
    #: the cores the job may use (``job.cores``): 0, all of the node's; a child job, its
    #: worker's share (``child_jobs.cores_of``)
    cores: int = 0


@dataclass(frozen=True, slots=True)
class Exit(_Pickled):
    """The worker process is idle and the node shuts down: end the process."""


# ------------------------------------------------------------------ worker → slot


@dataclass(frozen=True, slots=True)
class Ready(_Pickled):
    """The worker process has imported the services and waits for its first job."""


@dataclass(frozen=True, slots=True)
class StartFailed(_Pickled):
    """Instead of ``Ready``: the worker process could not import the services (it exits
    next); ``error`` is the exception in one line, ``ValueError: …``."""

    error: str


@dataclass(frozen=True, slots=True)
class Progress(_Pickled):
    """The job's latest progress, as the codec's JSON text (coalesced in the worker)."""

    job_id: str
    progress: str


@dataclass(frozen=True, slots=True)
class Result(_Pickled):
    """The function returned: its response, already in the store's form."""

    # (a SpilledResult's file: mapped, or as it is for a store that takes it in; a
    # ComposedResult's spans)
    stored: bytes | memoryview | ResultFile | ComposedFile


@dataclass(frozen=True, slots=True)
class SpilledResult(_Pickled):
    """The function returned a large response: its store's form is in the file at
    ``path`` (engine.spill), which the main process removes once it is written."""

    path: str


@dataclass(frozen=True, slots=True)
class ComposedResult(_Pickled):
    """The function returned a parent's result joined from its children's result files
    without copying them: the result is ``spans`` end to end, those of no name in the
    spilled file at ``path`` (its own bytes), the others in the children's files
    (store.result_files.ComposedFile); the store takes the file in."""

    path: str
    spans: tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class Failure(_Pickled):
    """The function raised a fault (or a bug, as InternalErrorFault): the job fails."""

    fault: str  # the fault as the codec's JSON text


@dataclass(frozen=True, slots=True)
class Transient(_Pickled):
    """The function raised a TransientFault: the job is retried, or fails with it."""

    fault: str  # the fault as the codec's JSON text


@dataclass(frozen=True, slots=True)
class RetryAsked(_Pickled):
    """The function raised RetryLater: run the job again after ``after_ms``."""

    after_ms: int
    reason: str | None


@dataclass(frozen=True, slots=True)
class ChildrenAsked(_Pickled):
    """The function called ``run_children``: store these children (dicts of service,
    operation, fetch_type, request, queueing_timeout, computation_timeout) and let the
    job wait for them."""

    stage: int
    fail_fast: bool
    children: list


Outcome = Result | SpilledResult | ComposedResult | Failure | Transient | RetryAsked | ChildrenAsked


@dataclass(frozen=True, slots=True)
class Done(_Pickled):
    """The run is over; nothing more comes for this job."""

    job_id: str
    outcome: Outcome


ToWorker = RunJob | Exit
FromWorker = Ready | StartFailed | Progress | Done

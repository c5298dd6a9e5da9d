"""The node's Prometheus metrics, served at ``/metrics`` (docs/operations.md lists them).

Two kinds, so that a scrape is right whichever of the node's processes answers it:

- **Recorded** where things happen, in several processes: requests, their latency and
  faults per binding (HTTP processes), held watches (HTTP processes), job run time
  and queue wait (the supervisor, in the main process).  They use prometheus_client's
  multiprocess mode: ``serve`` gives the node a directory (``use_directory``) before
  any metric exists, its processes write there, and a scrape adds them all up.
- **Read from the store** at scrape time (``metrics_page.StoreCollector``): jobs per
  service and status, queue length, this node's busy and idle workers.  The store is
  the one truth for those; no process has to keep a copy.

prometheus_client is imported on first use, not with this module: its multiprocess
mode is decided at its import, which must come after ``use_directory``.  Operation
and fault labels only ever take names the server defines (an operation a client
made up is ``(unknown)``), so no client can grow the number of series.

Recording stays off the cost of a request as far as it can (benchmarks/longpoll.py:
10 000 watchers of one job are answered in one burst, each recording its request):
each write of a multiprocess value is a locked write into a shared file, so a
request's series are looked up once per label set (``_labelled``), not through
``labels()`` each time, and the held-watches gauge is written once per turn of the
event loop with the process's count, not once as each watch begins and ends.
"""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import glob
import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
UNKNOWN_OPERATION = "(unknown)"

#: s: a request's answer time, from a cached answer to a long synchronous run.
REQUEST_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
#: s: jobs run from milliseconds (XDemo) to hours (a large tour plan).
JOB_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600)


# ---------------------------------------------------------------------- the node's folder


def use_directory() -> str:
    """Give this node's processes a folder to write their metrics to: the
    administrator's ``PROMETHEUS_MULTIPROC_DIR`` (emptied of an earlier run's files),
    or a fresh temporary one (``release_directory`` removes it).  Called by ``serve``
    before the HTTP processes start: they inherit the environment."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        os.makedirs(path, exist_ok=True)
        for stale in glob.glob(os.path.join(path, "*.db")):
            os.remove(stale)
    else:
        path = os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="xruntime-metrics-")
        _own_directory.append(path)
    return path


_own_directory: list[str] = []


def release_directory() -> None:
    """The node stops: remove the temporary folder ``use_directory`` made."""
    while _own_directory:
        shutil.rmtree(_own_directory.pop(), ignore_errors=True)


def process_died(pid: int) -> None:
    """An HTTP process died: its live gauges (held watches) no longer count."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


# ---------------------------------------------------------------------- recorded metrics

_made: dict[str, Any] = {}  # prometheus_client metrics (untyped), by short name
_making = threading.Lock()


def recorded() -> dict:
    """The recorded metrics by short name, made on first use (once, whichever of the
    process's threads comes first: a metric registers itself under its name)."""
    if not _made:
        with _making:
            if not _made:
                _made.update(_make())
    return _made


#: This process's id, as prometheus_client's multiprocess values ask for it at each
#: write (``_pid``): kept here and renewed in a forked child, not a system call each time.
_process_id = [os.getpid()]


def _renew_process_id() -> None:
    _process_id[0] = os.getpid()


os.register_at_fork(after_in_child=_renew_process_id)


def _pid() -> int:
    return _process_id[0]


def _make() -> dict:
    from prometheus_client import Counter, Gauge, Histogram, values

    if os.environ.get(MULTIPROC_ENV) and getattr(values.ValueClass, "_multiprocess", False):
        # the same values, in the same files (named by the same id), but each write asks
        # ``_pid`` whether the process forked, where os.getpid was a system call per write
        values.ValueClass = values.MultiProcessValue(_pid)
    return {
        "requests": Counter(
            "xruntime_requests",
            "Requests answered, per binding and operation.",
            ["binding", "operation"],
        ),
        "latency": Histogram(
            "xruntime_request_duration_seconds",
            "Time to answer a request (a held watchJob: as long as it is held).",
            ["binding", "operation"],
            buckets=REQUEST_BUCKETS,
        ),
        "faults": Counter(
            "xruntime_faults", "Faults answered, per binding and fault type.", ["binding", "fault"]
        ),
        "held": Gauge(
            "xruntime_held_watches",
            "watchJob and watchJobs calls held open now (a watchJobs counts once).",
            multiprocess_mode="livesum",
        ),
        "run": Histogram(
            "xruntime_job_run_seconds",
            "Run time of finished jobs (from their start), per service and outcome.",
            ["service", "status"],
            buckets=JOB_BUCKETS,
        ),
        "wait": Histogram(
            "xruntime_job_queue_wait_seconds",
            "Time jobs waited in the queue before a worker took them, per service.",
            ["service"],
            buckets=JOB_BUCKETS,
        ),
    }


class RequestRecord:
    """What one HTTP request did, filled in by the shared points every binding passes
    (the dispatcher, the fault renderers) and recorded when it is answered.

    Kept small: a held watchJob keeps its record for as long as it is held (10 000 held,
    benchmarks/longpoll.py).  Tuples, empty until a name is added (the empty tuple is
    shared), and no context token: each request runs in its own task, so its own
    context, and the record it set goes with the task (200 bytes a request less than
    two lists, a token and a tuple)."""

    __slots__ = ("binding", "started", "operations", "faults")

    def __init__(self, binding: str):
        self.binding = binding
        self.started = time.perf_counter()
        self.operations: tuple[str, ...] = ()
        self.faults: tuple[str, ...] = ()


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "xruntime_request", default=None
)


def request_began(binding: str) -> RequestRecord:
    """A request for ``binding`` (``json``, ``soap``, ``jsonrpc``) arrived, in its own task
    (each request's context is its own): answers the record ``request_answered`` takes."""
    record = RequestRecord(binding)
    _current.set(record)
    return record


def request_answered(record: RequestRecord) -> None:
    seconds = time.perf_counter() - record.started
    for operation in record.operations or (UNKNOWN_OPERATION,):
        _answers.add(record.binding, operation, seconds)
    for fault in record.faults:
        _labelled("faults", None, record.binding, fault)[0].inc()


class _Answers:
    """The requests answered in one turn of the event loop, counted together and written
    at its end: each series once for all of them, not a request count, a latency sum
    and a bucket (three locked writes into the shared files) each.  The watchers woken
    by one job's end answer in one turn: 5 000 of them in a process wrote 15 000 times
    (7 % of its time then, benchmarks/longpoll.py).  Off an event loop: at once.

    The running loop is asked for once per turn, not once per request: on Python 3.11
    ``asyncio.get_running_loop`` makes a system call (getpid, to notice a fork) each
    time, the one system call the node made per answer that a bare uvicorn app does not
    (strace of the burst).  Later in the turn, the loop the counts wait on is the one
    running when it still runs in the thread that asked (a thread runs one loop at a
    time)."""

    def __init__(self) -> None:
        # (binding, operation) → [requests, their seconds, {latency bucket: requests}]
        self._counts: dict[tuple[str, str], list[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0  # the thread ``_loop`` runs in

    def add(self, binding: str, operation: str, seconds: float) -> None:
        loop = self._loop
        if (
            loop is None
            or self._thread != threading.get_ident()
            or not loop.is_running()
            or not self._counts
        ):
            loop = _running_loop()
        if self._counts and loop is not self._loop:
            self.write()  # another loop's (a closed one's), or none's
        if not self._counts and loop is not None:
            self._loop, self._thread = loop, threading.get_ident()
            loop.call_soon(self.write)
        found = self._counts.get((binding, operation))
        if found is None:
            found = self._counts[(binding, operation)] = [0, 0.0, {}]
        # its first bound >= seconds (past the last: +Inf's, the histogram's last bucket)
        bucket = bisect.bisect_left(REQUEST_BUCKETS, seconds)
        found[0] += 1
        found[1] += seconds
        found[2][bucket] = found[2].get(bucket, 0) + 1
        if loop is None:
            self.write()

    def write(self) -> None:
        counts, self._counts, self._loop = self._counts, {}, None
        for (binding, operation), (count, seconds, buckets) in counts.items():
            requests, latency = _labelled("requests", "latency", binding, operation)
            requests._value.inc(count)  # (Counter.inc's write, its checks left out: count > 0)
            # Histogram.observe's writes, for many observations at once
            latency._sum.inc(seconds)
            for bucket, n in buckets.items():
                latency._buckets[bucket].inc(n)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """This thread's running event loop; None off one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_answers = _Answers()


_children: dict[tuple, tuple] = {}


def _labelled(name: str, other: str | None, *labels: str) -> tuple:
    """The series of the metric ``name`` (and of ``other``, if any) for ``labels``,
    looked up once (label values are names the server defines: a bounded set)."""
    key = (name, other, *labels)
    found = _children.get(key)
    if found is None:
        metrics = recorded()
        found = _children[key] = (
            metrics[name].labels(*labels),
            metrics[other].labels(*labels) if other else None,
        )
    return found


def operation_named(name: str) -> None:
    """The request names this operation of ours (counted once per request)."""
    record = _current.get()
    if record is not None and name not in record.operations:
        record.operations += (name,)


def fault_answered(fault: Exception) -> None:
    """A fault (a ``protocol.faults.XServerFault``, a layer above this one: only its
    class's name is kept) is being sent to the client of the current request."""
    record = _current.get()
    if record is not None:
        record.faults += (type(fault).__name__,)


class HeldWatches:
    """``with held_watches:`` around a watchJob (or a watchJobs) while it is held.  The
    count is this process's; the gauge gets it once per turn of the event loop (the watches woken by
    one change end in one turn: one write for all of them)."""

    def __init__(self):
        self.count = 0
        self._written = 0
        self._due = False

    def __enter__(self) -> None:
        self.count += 1
        self._write_soon()

    def __exit__(self, *exc: object) -> None:
        self.count -= 1
        self._write_soon()

    def _write_soon(self) -> None:
        if self._due:
            return
        loop = _running_loop()
        if loop is None:  # not on an event loop: at once
            self._write()
            return
        self._due = True
        loop.call_soon(self._write)

    def _write(self) -> None:
        self._due = False
        if self.count != self._written:
            self._written = self.count
            recorded()["held"].set(self.count)


held_watches = HeldWatches()


def job_started(service: str, queued_s: float) -> None:
    _labelled("wait", None, service)[0].observe(max(0.0, queued_s))


def job_finished(service: str, status: str, run_s: float) -> None:
    _labelled("run", None, service, status)[0].observe(max(0.0, run_s))

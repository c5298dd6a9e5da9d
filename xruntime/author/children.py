"""Child jobs as a service author sees them (docs/protocol.md §13).

::

    @sweep.long_operation(request=SweepRequest, response=SweepResponse)
    def sweep(request, job):
        outcomes = job.run_children([Child("XDemo", "simulate", SimulateRequest(durationMs=100))
                                     for _ in range(request.scenarios)])
        return SweepResponse(stepsDone=sum(o.result.stepsDone for o in outcomes))

``run_children`` holds no worker while the children run: the first time it is reached
it hands the children to the framework and ends the function's run (it raises
``WaitForChildren``, which the function must let through: it is a BaseException, so
``except Exception`` does).  The children are queued as jobs of the parent's owner and
run on any worker of any node; the parent waits, holding nothing; once every child has
finished its function runs again from the start, and the same call then answers the
children's outcomes at once (the parent's earlier calls answer theirs too, so a
function may fan out several times, one stage after another).  Hence the rule: ask for
the same children in the same order on every run (derive them from the request), and
keep the work before ``run_children`` cheap: it is done again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..payload.form import unpack
from ..payload.list_join import encoded_members, without_list
from ..protocol import codec
from ..protocol.faults import XServerFault
from ..protocol.states import Status
from ..protocol.types import XModel
from ..settings.model import Settings
from ..store.result_files import Located

if TYPE_CHECKING:
    from ..store.records import FinishedChild

RAISE, RETURN = "raise", "return"


class ChildOperation(Protocol):
    """What this module reads of a child's long operation: a ``service.LongOperation``,
    named by what it offers because ``service`` imports this module (``Child``,
    ``ChildOutcome``, ``Joined``) and sits above it."""

    @property
    def service(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def request(self) -> type[XModel]: ...
    @property
    def response(self) -> type[XModel]: ...
    @property
    def fetch_type(self) -> str: ...
    def check(self, request: XModel, settings: Settings) -> None: ...


#: (service name, operation name) → its long operation, or None: the registry's
#: ``find_long_operation``, handed in by the worker (this module sits below the registry).
FindOperation = Callable[[str, str], "ChildOperation | None"]


@dataclass
class Child:
    """A child job to start: a long operation of any service, by its name (the
    function's, e.g. ``"simulate"``), and its request."""

    service: str
    operation: str
    request: XModel


class WaitForChildren(BaseException):
    """Raised by ``run_children`` to end the run while the children run (not an error)."""

    def __init__(self, stage: int, children: list[dict[str, Any]], fail_fast: bool) -> None:
        super().__init__(f"waiting for {len(children)} child jobs")
        self.stage = stage
        self.children = children  # [{service, operation, fetch_type, request, timeouts}]
        self.fail_fast = fail_fast


class ChildOutcome:
    """How one child ended: ``succeeded`` with its ``result`` (decoded when first read),
    or not, with its ``fault``."""

    def __init__(self, finished: FinishedChild, response_type: type[XModel]) -> None:
        self.id = finished.id
        self.status = finished.status
        self.finished_at = finished.finished_at
        #: where its result files hold its result (a large one of a SQLite store), or None
        self.location = finished.result if isinstance(finished.result, Located) else None
        self._stored: bytes | memoryview | None = (
            None if isinstance(finished.result, Located) else finished.result
        )
        self._fault_json = finished.fault
        self._response_type = response_type
        self._result: XModel | None = None

    @property
    def stored(self) -> bytes | memoryview | None:
        """The result in the store's form: bytes, or its file mapped (``location``)."""
        if self._stored is None and self.location is not None:
            self._stored = self.location.mapped()
        return self._stored

    @property
    def succeeded(self) -> bool:
        return self.status == Status.SUCCEEDED

    @property
    def fault(self) -> XServerFault | None:
        """The child's fault (an XServerFault), or None when it succeeded."""
        if self._fault_json is None:
            return None
        return codec.decode_fault(json.loads(self._fault_json), self._response_type.get_namespace())

    @property
    def result(self) -> Any:
        """The child's response object, or None when it failed.  Typed Any: it is of the
        child operation's own response type, which the service asking knows."""
        if self._result is None and self.stored is not None:
            self._result = codec.decode(codec.loads(unpack(self.stored)), self._response_type)
        return self._result

    def encoded(self, field: str) -> dict[str, bytes]:
        """The arrays of the child's encoded object ``field`` (``job.encoded``) as their
        little-endian int32 bytes, by member name; {} when the child failed."""
        if self.stored is None:
            return {}
        return encoded_members(self.stored, field)

    def result_without(self, field: str) -> Any:
        """The child's response with its list ``field`` left empty, read without that
        list: the cheap way to the small parts of a large result (e.g. a summary).  Any,
        as ``result``; None when the child failed."""
        if self.stored is None:
            return None
        return codec.decode(codec.loads(without_list(self.stored, field)), self._response_type)


@dataclass
class Joined:
    """A response whose list ``field`` is the children's own lists of that field, joined
    in order: returned by ``job.join``, stored without decoding the children's results."""

    response: XModel
    field: str
    parts: list[ChildOutcome]


def _operation(find: FindOperation, service: str, name: str) -> ChildOperation:
    """The long operation ``name`` of ``service``; ValueError when there is none."""
    op = find(service, name)
    if op is None:
        raise ValueError(f"run_children: there is no long operation {service}.{name}")
    return op


def describe(
    child: Child, find: FindOperation, settings: Settings, lists: dict | None = None
) -> dict[str, Any]:
    """A child as the framework stores it; refuses an unknown operation, a request of
    the wrong type or one its operation's ``validate`` refuses under ``settings`` (the
    node's in force when the parent's run started): the parent fails.  ``lists``: as
    ``codec.encode`` takes it, for the children of one call, which often share lists."""
    op = _operation(find, child.service, child.operation)
    if not isinstance(child.request, op.request):
        raise TypeError(
            f"run_children: {child.service}.{child.operation} takes a {op.request.__name__}, "
            f"not a {type(child.request).__name__}"
        )
    op.check(child.request, settings)
    timeouts = getattr(child.request, "timeouts", None)
    return {
        "service": op.service,
        "operation": op.name,
        "fetch_type": op.fetch_type,
        "request": codec.dumps(codec.encode(child.request, op.request, lists)),
        "queueing_timeout": getattr(timeouts, "queueingTimeout", None) if timeouts else None,
        "computation_timeout": getattr(timeouts, "computationTimeout", None) if timeouts else None,
    }


class Stages:
    """The children a job's earlier runs started, stage by stage (one stage per
    ``run_children`` call), replayed to the calls of this run."""

    def __init__(
        self,
        finished: Iterable[FinishedChild],
        find: FindOperation,
        settings: Settings | None = None,
    ) -> None:
        self._find = find
        self._settings = settings or Settings()  # the node's, for the children's validate
        self._by_stage: dict[int, list[FinishedChild]] = {}
        for child in finished:
            self._by_stage.setdefault(child.stage, []).append(child)
        self._next = 0

    def run(
        self,
        children: Iterable[Child],
        failures: str,
        stopped: bool,
        stop_fault: Callable[[], XServerFault],
    ) -> list[ChildOutcome]:
        """The outcomes of this call's children if an earlier run started them, else
        raise WaitForChildren (or, when the job is stopped already, its stop fault)."""
        if failures not in (RAISE, RETURN):
            raise ValueError('run_children: failures is "raise" or "return"')
        children = list(children)
        stage, self._next = self._next, self._next + 1
        done = self._by_stage.get(stage)
        if done is None:
            if stopped:
                raise stop_fault()
            if not children:
                return []
            lists: dict = {}  # (while ``children`` holds every list it names)
            raise WaitForChildren(
                stage,
                [describe(c, self._find, self._settings, lists) for c in children],
                failures == RAISE,
            )
        if [(c.service, c.operation) for c in done] != [(c.service, c.operation) for c in children]:
            raise RuntimeError(
                "run_children asked for other children than on the job's earlier run; "
                "a long operation must ask for the same children on every run"
            )
        outcomes = [
            ChildOutcome(c, _operation(self._find, c.service, c.operation).response) for c in done
        ]
        failed = [o for o in outcomes if not o.succeeded]
        if failed and failures == RAISE and not stopped:
            fault = min(failed, key=lambda o: o.finished_at or 0).fault
            assert fault is not None  # a FAILED job keeps its fault
            raise fault
        return outcomes

"""The service author's API: typed request and response classes and one function.

::

    xdemo = Service("XDemo")

    @xdemo.long_operation(request=SimulateRequest, response=SimulateResponse)
    def simulate(request, job):
        job.report_progress(BulkProgress(...))
        if job.stop_requested: ...
        if backend_down: raise TransientFault(...)   # or: raise RetryLater(60, "backend busy")
        outcomes = job.run_children([Child("XDemo", "simulate", ...), ...])   # child jobs
        return SimulateResponse(...)

A service may declare settings of its own, which the administrator writes in its
``[services.NAME]`` table (checked when the file is read, applied live)::

    max_items = xdemo.setting("max_items", int, 1000, "items one request may hold", minimum=1)

    def check(request, settings):          # validate=check: the values in force
        if len(request.items) > settings["max_items"]: raise InvalidValueFault(...)

From that one declaration the framework derives ``startSimulate``,
``fetchSimulateResponse`` (named after the response type) and the synchronous
``simulate``, in every binding and in the WSDL.  The function runs in a worker process
and knows nothing of HTTP, SQL or processes; ``job`` is a ``JobContext``.
"""

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from ..protocol.faults import XServerFault
from ..protocol.typeinfo import is_protocol_type
from ..protocol.types import Job, JobProgress, JobRequest, XModel, link_base
from ..settings.schema import Key, keys_of
from ..settings.values import BOOLEAN, STRING, Kind, integer
from .children import Child, ChildOutcome, Joined
from .tables import Table

if TYPE_CHECKING:
    from ..settings.model import Settings

__all__ = [
    "Service",
    "JobContext",
    "RetryLater",
    "Child",
    "ChildOutcome",
    "LongOperation",
    "Operation",
    "Setting",
]


class RetryLater(Exception):
    """Raise it from a long operation's function to be run again, from the start, no
    earlier than ``after`` seconds from now (docs/protocol.md §11): the job waits ``QUEUING``
    meanwhile, holding no worker.  Counts against ``max_retries`` like a
    ``TransientFault``; past it the job fails with a ``TransientFault`` naming ``reason``."""

    def __init__(self, after: float, reason: str = ""):
        if not after >= 0:
            raise ValueError("RetryLater needs a delay of 0 s or more")
        super().__init__(f"retry later (in {after:g} s): {reason}")
        self.after = after
        self.reason = reason


class JobContext(Protocol):
    """What a long operation's function sees of its job."""

    @property
    def attempt(self) -> int:
        """This run's number: 1 for the first, counting retries and runs again after
        a node died."""

    @property
    def retries(self) -> int:
        """How many times the job was retried before this run (TransientFault, RetryLater)."""

    @property
    def settings(self) -> Mapping[str, object]:
        """The service's own settings (``Service.setting``) in force when this run
        started: name → value (the file's, else the declared default)."""

    @property
    def cores(self) -> int:
        """The cores this run may keep busy (e.g. threads computing at once): all of
        the node's, or for a child job its worker's share of them (its siblings run
        on the node's other workers at the same time)."""

    def report_progress(self, progress: JobProgress) -> None:
        """Publish progress; watchers are woken by it."""

    @property
    def stop_requested(self) -> bool:
        """True once the job was stopped, timed out or deleted: wind down now."""

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking at once on a stop; True if stopped."""

    def stop_fault(self) -> XServerFault:
        """The fault to raise when stopped with nothing to return yet
        (``RequestStoppedFault`` or ``RequestTimedOutFault``)."""

    def run_children(
        self, children: Iterable[Child], failures: str = "raise"
    ) -> list[ChildOutcome]:
        """Start child jobs (``Child(service, operation, request)``) and answer their
        ``ChildOutcome``s in order; the job holds no worker while they run, and its
        function runs again from the start once they are done (xruntime.author.children).
        ``failures="raise"``: a child's fault ends this job; ``"return"``: you decide."""

    def join(self, response: XModel, field: str, outcomes: Iterable[ChildOutcome]) -> Joined:
        """Return this instead of ``response``: its list ``field`` made of the
        successful children's own ``field`` lists, joined without decoding them."""

    def table(self, response: XModel, field: str, **columns: Any) -> Table:
        """Return this instead of ``response``: its list ``field`` made of the rows of
        ``columns`` (2-D integer NumPy arrays, one per list member of the item type),
        stored from the arrays' bytes, never as Python objects (xruntime.author.tables)."""

    def encoded(self, response: XModel, field: str, **columns: Any) -> Table:
        """Return this instead of ``response``: the string members of its object
        ``field`` named by ``columns`` (integer NumPy arrays within int32) hold them as
        base64 of little-endian int32, row-major; stored as the int32 bytes."""


#: The bytes a job's result is taken to need at most, for a long operation that does not
#: bound its results itself (``long_operation(result_bound=...)``; docs/writing-a-service.md).
DEFAULT_RESULT_BOUND = 1024 * 1024

#: The table a service's own settings are written in.
SERVICE_TABLE = "services.NAME"
_SETTING_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


@dataclass(frozen=True)
class Setting:
    """One setting a service declares for its ``[services.NAME]`` table: an ``int``
    (with optional bounds), a ``bool`` or a ``str``, its default and one line of doc."""

    name: str
    type: type
    default: int | bool | str
    doc: str
    minimum: int | None = None
    maximum: int | None = None

    def __post_init__(self) -> None:
        if not _SETTING_NAME.match(self.name):
            raise ValueError(f"setting {self.name!r}: lower-case letters, digits and _ only")
        if self.name in keys_of(SERVICE_TABLE):
            raise ValueError(f"setting {self.name!r}: already a key of every [services.NAME]")
        self.kind().check(self.default)  # a default out of its own bounds is the author's bug

    def kind(self) -> Kind:
        """What the file may write for it."""
        if self.type is bool:
            return BOOLEAN
        if self.type is str:
            return STRING
        if self.type is int:
            if self.maximum is not None and self.minimum is None:
                raise ValueError(f"setting {self.name!r}: a maximum needs a minimum")
            return integer(self.minimum if self.minimum is not None else -(2**63), self.maximum)
        raise ValueError(f"setting {self.name!r}: the type must be int, bool or str")

    def key(self) -> Key:
        """Its declaration as the settings' parser reads it."""
        return Key(self.name, self.kind(), self.default, (SERVICE_TABLE,), doc=self.doc)


@cache
def _takes_settings(validate: Callable[..., object]) -> bool:
    """Whether ``validate`` is ``(request, settings)`` rather than ``(request)`` (asked
    once per function: every start asks)."""
    positional = [
        p
        for p in inspect.signature(validate).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)


def _cap(name: str) -> str:
    return name[:1].upper() + name[1:]


@dataclass(frozen=True)
class LongOperation:
    """A long operation as its author declared it."""

    service: str
    name: str
    request: type[XModel]
    response: type[XModel]
    function: Callable[..., XModel | Joined | Table]  # (request, job) -> response
    faults: tuple[type[XServerFault], ...] = ()
    validate: Callable[..., object] | None = None  # (request[, settings]); raises to refuse
    #: the service's settings in force under the node's settings (``Service.settings_in_force``)
    settings: "Callable[[Settings], Mapping[str, object]] | None" = None
    #: ``(request) -> bytes``: the most its result may take as stored (``result_bound``)
    bound: Callable[[Any], int] | None = None

    def result_bound(self, request: XModel) -> int:
        """The most the result of ``request`` may take as stored, in bytes: what it
        counts towards its user's ``max_stored_bytes`` while the job is unfinished (the
        service's own bound, else ``DEFAULT_RESULT_BOUND``)."""
        if self.bound is None:
            return DEFAULT_RESULT_BOUND
        return max(0, int(self.bound(request)))

    def check(self, request: XModel, settings: "Settings") -> None:
        """Run ``validate`` on a request about to be started, with the service's own
        settings in force when it takes them."""
        if self.validate is None:
            return
        if _takes_settings(self.validate) and self.settings is not None:
            self.validate(request, self.settings(settings))
        else:
            self.validate(request)

    @property
    def start_name(self) -> str:
        return "start" + _cap(self.name)

    @property
    def fetch_name(self) -> str:
        return "fetch" + self.response.get_type_name()

    @property
    def fetch_type(self) -> str:
        return self.response.get_type_name()


# The kinds of operation a binding serves.
START, FETCH, RUN, CALL = "start", "fetch", "run", "call"


@dataclass(frozen=True)
class Operation:
    """One operation as the bindings see it: a name, typed in and out, and its faults.

    ``target`` is the LongOperation (for start, fetch, run) or, for CALL, a function
    ``(jobs, request, caller) -> response`` run in the pool for blocking work; a coroutine
    function (watchJob) is awaited on the event loop instead, holding no thread.
    """

    service: str
    name: str
    kind: str
    request: type[XModel]
    response: type[XModel]
    target: LongOperation | Callable[..., Any]
    faults: tuple[type[XServerFault], ...] = ()

    @property
    def waits(self) -> bool:
        """Whether it waits for a job (watchJob, the synchronous form): such calls are
        held as coroutines, not in a thread."""
        return self.kind == RUN or inspect.iscoroutinefunction(self.target)


SERVICE_NAMESPACE = "http://xruntime.org/xserver/{name}"


def pin_namespace(cls: type, namespace: str) -> None:
    """Give a service's own types (and the types of their fields, nested or not) the
    service's namespace unless they declare one, so that two services may each name a
    type ``Item`` and the WSDL is the same whatever loads first.

    A field declared ``repeated(Item)`` or ``required(Item)`` holds a copy of ``Item``
    that spyne made when the class statement ran, taking the namespace ``Item`` had
    then (inherited from ``XModel``: the framework's); the copy is given its original's."""
    from spyne import ComplexModelBase
    from spyne.model.enum import EnumBase

    seen: set[type] = set()
    copies: list[Any] = []
    pending: list[Any] = [cls]  # and the types of fields, as spyne keeps them
    while pending:
        c = pending.pop()
        if getattr(c, "__orig__", None) is not None:
            copies.append(c)
            c = c.__orig__
        if c in seen or not isinstance(c, type):
            continue
        seen.add(c)
        if issubclass(c, EnumBase) and c.__dict__.get("__namespace__") is None:
            enum: type[EnumBase] = c  # an Enum(...) a service declares
            enum.__namespace__ = namespace
        if not issubclass(c, ComplexModelBase) or is_protocol_type(c):
            continue  # the protocol's own types are pinned already
        model: type[ComplexModelBase] = c  # a spyne model class: spyne's attributes
        if model.__dict__.get("__namespace__") is None:
            model.__namespace__ = namespace
        link_base(model)
        pending.extend(model.get_flat_type_info(model).values())
    for copy in copies:
        copy.__namespace__ = copy.__orig__.get_namespace()


#: A short operation as ``Service.call`` keeps it: (request type, response type, the
#: function, its faults).
Call = tuple[type[XModel], type[XModel], Callable[..., Any], tuple[type[XServerFault], ...]]

#: A function that ``Service.long_operation`` or ``Service.call`` declares (and answers).
Function = TypeVar("Function", bound=Callable[..., Any])
#: Types that ``Service.declare`` declares (and answers).
Declared = TypeVar("Declared", bound=type)


@dataclass(eq=False)
class Service:
    name: str
    description: str = ""
    namespace: str = ""
    long_operations: dict[str, LongOperation] = field(default_factory=dict)
    calls: dict[str, Call] = field(default_factory=dict)
    #: Further types to declare in the WSDL (subtypes of JobProgress, ResultLimitation
    #: or ProcessingFault that no operation names directly).
    extra_types: list[type] = field(default_factory=list)
    #: True for a service whose answers carry any service's job progress (XRuntime):
    #: its WSDL declares every service's progress types.
    shows_all_progress: bool = False
    #: The settings it declares for its [services.NAME] table, by name (``setting``).
    settings: dict[str, Setting] = field(default_factory=dict)
    #: Modules a worker process imports when it starts, before its first job: the heavy
    #: ones its functions import where they run (NumPy), so that HTTP processes never
    #: load them and no job waits for them (NumPy took 0.18 s of a node's first matrix).
    worker_imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.namespace = self.namespace or SERVICE_NAMESPACE.format(name=self.name.lower())

    @overload
    def declare(self, declared: Declared, /) -> Declared: ...

    @overload
    def declare(
        self, first: Declared, second: Declared, /, *others: Declared
    ) -> tuple[Declared, ...]: ...

    def declare(self, *types: Declared) -> Declared | tuple[Declared, ...]:
        """Declare subtypes the WSDL must know (e.g. a JobProgress subtype); answers
        the type (or the types, given several)."""
        for t in types:
            pin_namespace(t, self.namespace)
            self.extra_types.append(t)
        return types[0] if len(types) == 1 else types

    def setting(
        self,
        name: str,
        type: type,
        default: int | bool | str,
        doc: str,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> Setting:
        """Declare a setting of this service: the administrator may write ``name =
        value`` in ``[services.<service>]``; the file is refused (naming its line) when
        the value is not of ``type`` or out of its bounds, and an edit applies live.
        A ``validate(request, settings)`` reads the value in force as
        ``settings[name]``."""
        declared = Setting(name, type, default, doc, minimum, maximum)
        if name in self.settings:
            raise ValueError(f"{self.name}: setting {name!r} declared twice")
        self.settings[name] = declared
        return declared

    def settings_in_force(self, settings: "Settings") -> dict[str, object]:
        """name → value of this service's settings under the node's ``settings``: the
        file's value, else the declared default."""
        written = settings.service(self.name).declared
        return {name: written.get(name, s.default) for name, s in self.settings.items()}

    def setting_keys(self) -> tuple[Key, ...]:
        """Its settings as the settings' parser reads them."""
        return tuple(s.key() for s in self.settings.values())

    def long_operation(
        self,
        request: type[XModel],
        response: type[XModel],
        faults: Iterable[type[XServerFault]] = (),
        validate: Callable[..., object] | None = None,
        result_bound: Callable[[Any], int] | None = None,
    ) -> Callable[[Function], Function]:
        """Declare ``function(request, job) -> response`` as a long operation.

        ``validate(request)``, if given, runs when the job is started and may raise
        ``InvalidValueFault`` so that a bad request is refused at once, not as a
        FAILED job; ``validate(request, settings)`` gets the service's own settings
        in force (name → value) besides.

        ``result_bound(request)``, if given, answers the most bytes the result of a
        (valid) request may take as stored; until the job ends it counts towards its
        user's ``max_stored_bytes``, so that a start is refused that could pass it
        (``DEFAULT_RESULT_BOUND``, 1 MiB, without it).  A result past its user's bound
        at the end fails its job with ``QuotaExceededFault``.
        """

        def register(function: Function) -> Function:
            for t in (request, response) + tuple(faults):
                pin_namespace(t, self.namespace)
            op = LongOperation(
                self.name,
                function.__name__,
                request,
                response,
                function,
                tuple(faults),
                validate,
                self.settings_in_force,
                result_bound,
            )
            self.long_operations[op.name] = op
            return function

        return register

    def call(
        self,
        request: type[XModel],
        response: type[XModel],
        faults: Iterable[type[XServerFault]] = (),
    ) -> Callable[[Function], Function]:
        """Declare a short operation (XRuntime's): a function, or a coroutine function
        when it waits."""

        def register(function: Function) -> Function:
            self.calls[function.__name__] = (request, response, function, tuple(faults))
            return function

        return register

    def operations(self) -> dict[str, Operation]:
        """Every operation this service offers, by name."""
        ops = {}
        for name, (request, response, function, faults) in self.calls.items():
            ops[name] = Operation(self.name, name, CALL, request, response, function, faults)
        for op in self.long_operations.values():
            ops[op.start_name] = Operation(
                self.name, op.start_name, START, op.request, Job, op, op.faults
            )
            ops[op.name] = Operation(
                self.name, op.name, RUN, op.request, op.response, op, op.faults
            )
            ops.setdefault(
                op.fetch_name,
                Operation(self.name, op.fetch_name, FETCH, JobRequest, op.response, op, op.faults),
            )
        return ops

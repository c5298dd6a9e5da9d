"""From (service, operation, request data) to the answer: shared by all bindings.

A binding finds the operation here, hands over the request as plain data (the
codec's form) and writes the ``Answer`` it gets back (or the fault raised).  Nothing
about jobs is decided in a binding.  Operations that wait for a job (watchJob, the
synchronous form) are awaited on the event loop; every other one runs in the pool
for blocking work.
"""

import collections
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson

from ..author.service import CALL, FETCH, RUN, START, LongOperation, Operation, Service
from ..payload.form import unpack
from ..payload.stream import Source
from ..protocol import codec
from ..protocol.faults import InvalidRequestFault, ServiceNotConfiguredFault
from ..protocol.types import XModel
from ..support import metrics
from ..support.blocking import INLINE_BYTES, blocking, sized
from .soon import soon

if TYPE_CHECKING:
    from .accounts import Caller
    from .jobs import JobManager

Rendered = TypeVar("Rendered")

#: How many shared answers are remembered (one per job changed at about one time).
SHARED_ANSWERS = 256
#: A stored result past this many bytes is written in pieces (``Answer.large``).
STREAM_ABOVE = 256 * 1024


class Answer:
    """An operation's response as JSON text (the codec's form), or a large fetched
    result in the store's form (``stored``: read by ranges as a binding writes it, see
    ``payload.stream``).  Watchers woken by one change share one Answer, and each
    binding renders it once (``rendered``)."""

    __slots__ = ("_text", "stored", "_rendered")

    def __init__(self, text: str | None = None, stored: Source | None = None) -> None:
        assert (text is None) != (stored is None)
        self._text, self.stored = text, stored
        # binding → what its render() gave (each binding renders its own kind of answer)
        self._rendered: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        """The JSON text (of a stored result: read whole, blocking; bindings write a
        large one in pieces instead)."""
        if self._text is None:
            stored = cast(Source, self.stored)
            self._text = unpack(stored.read(0, stored.length))
        return self._text

    def large(self) -> bool:
        """Whether the answer is a stored result to be written in pieces."""
        return self.stored is not None

    def rendered(self, binding: str, render: Callable[[], Rendered]) -> Rendered:
        """``render()`` once per binding; later calls answer the same bytes."""
        if self._rendered is None:
            self._rendered = {}
        found: Rendered | None = self._rendered.get(binding)
        if found is None:
            found = self._rendered[binding] = render()
        return found


class Dispatcher:
    def __init__(self, jobs: "JobManager", services: dict[str, Service]) -> None:
        self.jobs = jobs
        self.services = services
        self._operations: dict[str, dict[str, Operation]] = {
            name: svc.operations() for name, svc in services.items()
        }
        # id(response) → (response, Answer)
        self._shared: collections.OrderedDict[int, tuple[XModel, Answer]] = (
            collections.OrderedDict()
        )

    def operation(self, service: str, name: str) -> Operation | None:
        """The Operation, or None when the service or operation does not exist."""
        op = self._operations.get(service, {}).get(name)
        if op is not None:
            metrics.operation_named(op.name)
        return op

    def operations_of(self, service: str) -> dict[str, Operation]:
        return self._operations[service]

    def has_service(self, service: str) -> bool:
        return service in self._operations

    def check_enabled(self, service: str) -> None:
        if not self.jobs.settings().service_enabled(service):
            raise ServiceNotConfiguredFault(
                f"the service {service} is not configured on this server", service=service
            )

    def find(self, service: str, name: str) -> Operation:
        """The Operation, or InvalidRequestFault naming what does not exist."""
        op = self.operation(service, name)
        if op is None:
            what = (
                f"the service {service} has no operation {name}"
                if self.has_service(service)
                else f"there is no service {service}"
            )
            raise InvalidRequestFault(what, hint="Check the operation's name and its service.")
        return op

    async def call(
        self,
        op: Operation,
        data: Any,
        caller: "Caller",
        sent: dict[str, str] | None = None,
        max_answer_bytes: int | None = None,
        size: int | None = None,
    ) -> Answer:
        """Plain request data of any binding, from ``caller`` (``accounts.Caller``) →
        the Answer.  Validation is the codec's, so every binding refuses the same input
        the same way (``sent``: see ``codec.decode``; ``max_answer_bytes``: see
        ``call_json``; ``size``: the request body's bytes, where the binding knows them).

        The job cycle's calls run on the event loop where the store answers them at
        once (``soon.soon``): a fetch, and a start or a synchronous call of a
        small request (``size`` at most INLINE_BYTES); the rest in the pool."""
        metrics.operation_named(op.name)
        if op.kind == FETCH and max_answer_bytes is None:
            return await soon(self.jobs.store, self._fetched, op, data, caller, sent)
        small = size is not None and size <= INLINE_BYTES
        if op.kind == START and small:
            self.check_enabled(op.service)
            request = codec.decode(data, op.request, sent=sent)
            job = await self.jobs.start_soon(_long_operation(op), request, caller, size)
            return Answer(_dumps(codec.encode(job, op.response)))
        if not op.waits:
            return Answer(await blocking(self.call_json, op, data, caller, sent, max_answer_bytes))
        self.check_enabled(op.service)
        if op.kind == RUN:
            request = await sized(size, codec.decode, data, op.request, sent=sent)
            return Answer(await self.jobs.run(_long_operation(op), request, caller, size))
        waiting = cast(Callable[..., Awaitable[XModel]], op.target)  # watchJob
        request = codec.decode(data, op.request, sent=sent)
        del data  # a held watch keeps its request, not the data it was decoded from
        response = await waiting(self.jobs, request, caller)
        return self._answer_once(response, op)

    def _answer_once(self, response: XModel, op: Operation) -> Answer:
        """The Answer of a response object, encoded once however many watchers share it."""
        key = id(response)
        found = self._shared.get(key)
        if found is not None and found[0] is response:
            return found[1]
        answer = Answer(_dumps(codec.encode(response, op.response)))
        self._shared[key] = (response, answer)
        if len(self._shared) > SHARED_ANSWERS:
            self._shared.popitem(last=False)
        return answer

    def _fetched(
        self, op: Operation, data: Any, caller: "Caller", sent: dict[str, str] | None
    ) -> Answer:
        """The blocking part of a fetch: request data → the result's text, or, past
        STREAM_ABOVE stored bytes, its reader (written in pieces, never read whole)."""
        self.check_enabled(op.service)
        request = codec.decode(data, op.request, sent=sent)
        reader = self.jobs.fetch_stored(_long_operation(op), request.id, caller)
        if reader.length > STREAM_ABOVE:
            return Answer(stored=reader)
        return Answer(unpack(reader.read(0, reader.length)))

    def call_json(
        self,
        op: Operation,
        data: Any,
        caller: "Caller",
        sent: dict[str, str] | None = None,
        max_answer_bytes: int | None = None,
    ) -> str:
        """The blocking part: request data → the response as JSON text.  A fetch
        answers the text the worker stored as it is: a large result is never built as
        spyne objects on the server's threads (nor read whole when it is longer than
        ``max_answer_bytes``: RejectedRequestFault)."""
        self.check_enabled(op.service)
        request = codec.decode(data, op.request, sent=sent)
        if op.kind == FETCH:
            return self.jobs.fetch_json(_long_operation(op), request.id, caller, max_answer_bytes)
        answer: XModel
        if op.kind == START:
            answer = self.jobs.start(_long_operation(op), request, caller)
        elif op.kind == CALL:
            answer = cast(Callable[..., XModel], op.target)(self.jobs, request, caller)
        else:
            raise AssertionError(op.kind)
        return codec.dumps(codec.encode(answer, op.response))


def _dumps(data: dict[str, Any]) -> str:
    """``codec.dumps(data)``; of an object of strings and integers alone (a Job without
    progress, as every start and most watches answer) written by orjson at once:
    ``codec.dumps`` takes json.dumps's slower way for any text with a digit before an
    ``e``, which most job ids (hexadecimal) have, though only a number could differ."""
    if all(type(value) is str or type(value) is int for value in data.values()):
        try:
            return orjson.dumps(data).decode("utf-8")
        except TypeError:  # (a lone surrogate; an int past 64 bits): codec.dumps says
            pass
    return codec.dumps(data)


def _long_operation(op: Operation) -> LongOperation:
    """The LongOperation behind a start, fetch or run operation (its ``target``; a
    CALL's target is a function instead)."""
    return cast(LongOperation, op.target)

"""The JSON-RPC 2.0 binding: ``POST /services/rpc/<Service>`` (docs/protocol.md §7).

``params`` is the operation's request object (by name); ``result`` is the response in
the same JSON form as ``/services/rs``.  Errors carry the specification's codes and
``data`` = the ``faultInfo`` object.  Batches answer in an array (in any order, matched
by id); notifications run and get no answer; a batch of notifications only answers
HTTP 204.
"""

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, cast

from werkzeug.wrappers import Response

from ..author.service import FETCH
from ..operations.failures import as_fault
from ..payload.stream import Source, json_chunks
from ..protocol import codec
from ..protocol.faults import (
    InvalidRequestFault,
    ProcessingFault,
    RejectedRequestFault,
    XServerFault,
)
from ..support import metrics
from ..support.blocking import sized
from ..support.logs import OncePerPeriod
from . import parsing
from .json_binding import JSON_TYPE, dumps, read_json_body
from .request import BodyRequest

if TYPE_CHECKING:
    from ..operations.accounts import Caller
    from ..operations.dispatch import Dispatcher
    from ..settings.model import Settings

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
REJECTED, PROCESSING, INTERNAL = -32001, -32002, -32000


class _OverBudget(enum.Enum):
    """What ``_one`` answers for a result larger than the batch's budget left (an enum
    member rather than a bare object(), so that the type checker tells it from text)."""

    MARK = "over budget"


_MISSING = object()
_OVER_BUDGET = _OverBudget.MARK
_NO_WAIT = contextlib.nullcontext()
#: How many requests of one batch run at once: a caller's batch weighs on the node
#: like a few callers, not like one caller per item.
BATCH_PARALLEL = 4
batch_log = OncePerPeriod(logging.getLogger(__name__), 10.0)


def error_code(fault: XServerFault) -> int:
    if isinstance(fault, InvalidRequestFault):
        return INVALID_PARAMS
    if isinstance(fault, RejectedRequestFault):
        return REJECTED
    if isinstance(fault, ProcessingFault):
        return PROCESSING
    return INTERNAL


def error(request_id: object, code: int, fault: XServerFault) -> dict[str, Any]:
    metrics.fault_answered(fault)
    encoded = codec.encode_fault(fault)
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": code, "message": encoded["message"], "data": encoded["faultInfo"]},
    }


class _Streamed:
    """A single request's answer around a large fetched result, written as the result
    is read from its stored form (``payload.stream``)."""

    __slots__ = ("request_id", "stored")

    def __init__(self, request_id: str, stored: Source) -> None:
        self.request_id, self.stored = request_id, stored

    def chunks(self) -> Iterator[bytes]:
        yield f'{{"jsonrpc":"2.0","id":{self.request_id},"result":'.encode()
        yield from json_chunks(self.stored)
        yield b"}"


class JsonRpcBinding:
    """The JSON-RPC 2.0 binding at ``/services/rpc``: ``handle(request)`` answers a Response."""

    name = "jsonrpc"  # in metrics

    def __init__(self, dispatcher: "Dispatcher", settings: "Callable[[], Settings]") -> None:
        self.dispatcher = dispatcher
        self.settings = settings

    @staticmethod
    def is_public(method: str, path: str, query: bytes) -> bool:
        return False  # every method needs the caller's credentials

    async def handle(self, request: BodyRequest, caller: "Caller") -> Response:
        service = request.path.strip("/")
        try:
            if not self.dispatcher.has_service(service):
                raise InvalidRequestFault(
                    f"there is no service {service!r}; JSON-RPC is at /services/rpc/<Service>"
                )
            if request.method != "POST":
                raise InvalidRequestFault(
                    f"{request.method} is not allowed; POST a JSON-RPC request"
                )
            limit = self.settings().max_request_bytes
            body = await parsing.parse(
                request.content_length, limit, read_json_body, request, limit
            )
        except XServerFault as fault:
            code = PARSE_ERROR if "not valid JSON" in fault.faultstring else INVALID_REQUEST
            return self._answer(error(None, code, fault))
        del request  # a held watch keeps nothing of the request
        if isinstance(body, list):
            return await self._batch(service, body, caller)
        answer = await self._one(service, body, caller)
        if answer is None:
            return Response(status=204)
        assert answer is not _OVER_BUDGET  # (given no budget, no answer is over it)
        if isinstance(answer, _Streamed):
            return Response(answer.chunks(), content_type=JSON_TYPE)
        return await sized(len(answer), self._text, answer)

    async def _batch(self, service: str, items: list[Any], caller: "Caller") -> Response:
        """A batch (docs/protocol.md §15): at most ``[server] max_batch`` items, run
        ``BATCH_PARALLEL`` at a time, as one caller's calls would be, so that a large
        batch holds no more of the node than a few callers do; an item whose answer
        would take the batch's answer past ``max_batch_answer_bytes`` answers an error
        instead (the rest still run)."""
        settings = self.settings()
        if not items:
            return self._answer(
                error(None, INVALID_REQUEST, InvalidRequestFault("an empty batch is not a request"))
            )
        if len(items) > settings.max_batch:
            batch_log.warning(
                "refused a JSON-RPC batch of %d requests (max_batch %d)",
                len(items),
                settings.max_batch,
            )
            return self._answer(
                error(
                    None,
                    INVALID_REQUEST,
                    InvalidRequestFault(
                        f"the batch has {len(items)} requests, more than the "
                        f"{settings.max_batch} this server takes in one",
                        hint="Send the requests in several smaller batches.",
                    ),
                )
            )
        budget = settings.max_batch_answer_bytes
        answers: list[str | None] = [None] * len(items)
        running, fetching = asyncio.Semaphore(BATCH_PARALLEL), asyncio.Semaphore(1)

        def over_budget(item: Any) -> str:
            request_id = (
                item.get("id") if isinstance(item, dict) and _is_id(item.get("id")) else None
            )
            return codec.dumps(
                error(
                    request_id,
                    REJECTED,
                    RejectedRequestFault(
                        "the batch's answer would hold more than "
                        f"{settings.max_batch_answer_bytes} bytes; "
                        "this request's answer was left out",
                        hint="Send this request on its own (a large result is streamed then).",
                    ),
                )
            )

        async def run(index: int, item: Any) -> None:
            nonlocal budget
            # fetches one at a time: each may read a large result before it is weighed
            async with fetching if self._fetches(service, item) else _NO_WAIT, running:
                answer = await self._one(service, item, caller, lambda: budget)
            assert not isinstance(answer, _Streamed)  # (a budget keeps a result whole)
            if answer is _OVER_BUDGET or (answer is not None and len(answer) > budget):
                answer = over_budget(item)
            if answer is not None:
                budget -= len(answer)
            answers[index] = answer

        await asyncio.gather(*(run(i, item) for i, item in enumerate(items)))
        written = [a for a in answers if a is not None]
        return self._text("[" + ",".join(written) + "]") if written else Response(status=204)

    def refusal(self, path: str, fault: XServerFault) -> Response:
        code = INVALID_REQUEST if isinstance(fault, InvalidRequestFault) else error_code(fault)
        return self._answer(error(None, code, fault))

    def _fetches(self, service: str, item: Any) -> bool:
        op = (
            self.dispatcher.operation(service, item["method"])
            if isinstance(item, dict) and isinstance(item.get("method"), str)
            else None
        )
        return op is not None and op.kind == FETCH

    async def _one(
        self,
        service: str,
        item: Any,
        caller: "Caller",
        budget: Callable[[], int] | None = None,
    ) -> str | _Streamed | Literal[_OverBudget.MARK] | None:
        """One request object → its answer as JSON text, or None for a notification
        (``_OVER_BUDGET`` when its result alone is larger than ``budget()``: it is not
        copied into an answer that would be dropped).  A result is spliced in as the
        text the dispatcher answers (for a fetch, the stored text; for watchers woken by
        one change, one text), not parsed and encoded again; outside a batch, a large
        fetched result is written around as it is read (``_Streamed``)."""
        if (
            not isinstance(item, dict)
            or item.get("jsonrpc") != "2.0"
            or not isinstance(item.get("method"), str)
            or not _is_id(item.get("id"))
        ):
            request_id = (
                item.get("id") if isinstance(item, dict) and _is_id(item.get("id")) else None
            )
            return codec.dumps(
                error(
                    request_id,
                    INVALID_REQUEST,
                    InvalidRequestFault(
                        'not a JSON-RPC 2.0 request: it needs "jsonrpc": "2.0", a "method" string '
                        'and an optional "id" (string or number)'
                    ),
                )
            )
        request_id = item.get("id", _MISSING)
        notification = request_id is _MISSING
        op = self.dispatcher.operation(service, item["method"])
        if op is None:
            answer = error(
                None if notification else request_id,
                METHOD_NOT_FOUND,
                InvalidRequestFault(f"the service {service} has no method {item['method']}"),
            )
            return None if notification else codec.dumps(answer)
        params = item.get("params", {})
        try:
            if not isinstance(params, dict):
                raise InvalidRequestFault(
                    "params must be the request object (by name)",
                    hint='Send "params": {...} with the request\'s fields.',
                )
            called = await self.dispatcher.call(
                op, params, caller, max_answer_bytes=None if budget is None else budget()
            )
            if called.large() and not notification:
                return _Streamed(codec.dumps(request_id), cast(Source, called.stored))
            result = called.text
        except Exception as exc:
            fault = as_fault(exc, f"JSON-RPC {service}.{item['method']}")
            return (
                None if notification else codec.dumps(error(request_id, error_code(fault), fault))
            )
        if notification:
            return None
        if budget is not None and len(result) > budget():
            return _OVER_BUDGET
        return f'{{"jsonrpc":"2.0","id":{codec.dumps(request_id)},"result":{result}}}'

    @staticmethod
    def _answer(data: object) -> Response:
        return Response(dumps(data), content_type=JSON_TYPE)

    @staticmethod
    def _text(text: str) -> Response:
        return Response(text.encode("utf-8"), content_type=JSON_TYPE)


def _is_id(value: object) -> bool:
    return value is None or (isinstance(value, (str, int, float)) and not isinstance(value, bool))

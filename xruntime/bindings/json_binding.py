"""The JSON binding: ``POST /services/rs/<Service>/<operation>`` (docs/protocol.md §7).

Body: the request object; answer: the response object, or on a fault an HTTP status
by fault type and ``{"message": ..., "faultInfo": {"$type": ..., ...}}``.

A fetch and the synchronous form write the JSON text the worker stored as it is
(``Dispatcher.call_json``): a large result (a distance matrix) costs its text only.
"""

import json
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, cast

from werkzeug.wrappers import Response

from ..operations.failures import as_fault
from ..payload.stream import Source, json_chunks
from ..protocol import codec
from ..protocol.faults import InvalidRequestFault, XServerFault
from ..support import metrics
from ..support.blocking import sized
from . import openapi, parsing
from .ready import Ready
from .request import BodyRequest

if TYPE_CHECKING:
    from ..operations.accounts import Caller
    from ..operations.dispatch import Dispatcher
    from ..settings.model import Settings

JSON_TYPE = "application/json; charset=utf-8"
#: A JSON body may hold one array or object per this many bytes (on average): a
#: location ``{"lon":8.1,"lat":50.1}`` is one per 23.
JSON_BYTES_PER_MARK = 16


def dumps(data: object) -> bytes:
    return codec.dumps(data).encode("utf-8")


def fault_response(fault: XServerFault) -> Response:
    metrics.fault_answered(fault)
    response = Response(
        dumps(codec.encode_fault(fault)), status=fault.http_status, content_type=JSON_TYPE
    )
    if fault.retry_after_s is not None:
        response.headers["Retry-After"] = str(fault.retry_after_s)
    return response


def read_json_body(request: BodyRequest, max_bytes: int, empty: dict | None = None) -> Any:
    """The body parsed as JSON, refused before it is read when it is too large.
    An empty body stands for ``empty`` when given (the JSON binding: an empty request)."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise InvalidRequestFault(
            f"the request body has {length} bytes, more than the {max_bytes} this server accepts",
            hint="Send a smaller request.",
        )
    ctype = request.mimetype or ""
    if ctype and "json" not in ctype:
        # text/plain, a form: what any web page may post to any address (docs/protocol.md §15)
        raise InvalidRequestFault(
            f"the content type {ctype} is not JSON",
            hint="Send the request as application/json "
            "(curl: -H 'Content-Type: application/json').",
        )
    raw = request.stream.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise InvalidRequestFault(
            f"the request body is larger than the {max_bytes} bytes this server accepts",
            hint="Send a smaller request.",
        )
    if not raw.strip() and empty is not None:
        return empty
    parsing.check_marks(
        raw, raw.count(b"[") + raw.count(b"{"), JSON_BYTES_PER_MARK, "JSON arrays and objects"
    )
    try:
        # decoded strictly, in the encoding JSON allows that the body is in: a surrogate
        # encoded as bytes (CESU-8, UTF-16 without its pair) is no text (json.loads would
        # let it through), so what is left is the escapes checked below
        text = raw.decode(json.detect_encoding(raw))
        if text.startswith("\ufeff"):  # (as json.loads refuses it)
            raise ValueError("a byte order mark before the JSON text")
        data = _DECODER.decode(text)
    except RecursionError as exc:
        raise InvalidRequestFault(
            "the request body nests too deeply",
            hint="Send one JSON object, the operation's request.",
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequestFault(
            f"the request body is not valid JSON: {exc}",
            hint="Send one JSON object, the operation's request.",
        ) from exc
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(data):
        raise InvalidRequestFault(
            "the request body is not valid JSON: it holds a lone surrogate "
            "(\\ud800–\\udfff without its pair), which is no character",
            hint="Send text as Unicode characters; pair every surrogate.",
        )
    return data


def _not_json(name: str) -> NoReturn:
    """NaN, Infinity and -Infinity, which Python's json reads but JSON does not have
    (echoed, as a JSON-RPC id is, they would make the answer no JSON either)."""
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


#: The decoder of every body (made once: json.loads with hooks makes one per call).
_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)


#: A JSON escape of a UTF-16 surrogate; only a body with one can hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(data: object) -> bool:
    """Whether a string anywhere in ``data`` (keys too) holds a surrogate that JSON
    decoding could not pair: such text cannot be stored, echoed or encoded as UTF-8."""
    pending = [data]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


class JsonBinding:
    """The JSON binding at ``/services/rs``: ``handle(request)`` answers a Response (an
    operation's answer: ``Ready``, the same answer in ASGI's form)."""

    name = "json"  # in metrics

    def __init__(self, dispatcher: "Dispatcher", settings: "Callable[[], Settings]") -> None:
        self.dispatcher = dispatcher
        self.settings = settings

    def refusal(self, path: str, fault: XServerFault) -> Response:
        return fault_response(fault)

    @staticmethod
    def is_public(method: str, path: str, query: bytes) -> bool:
        """The OpenAPI document may be public ([auth] public_wsdl), as the WSDLs are;
        every operation needs the caller's credentials."""
        return method in ("GET", "HEAD") and path.strip("/") == openapi.DOCUMENT_NAME

    async def handle(self, request: BodyRequest, caller: "Caller") -> Response | Ready:
        parts = [p for p in request.path.split("/") if p]
        where = "/".join(parts) or "/"
        try:
            if parts == [openapi.DOCUMENT_NAME] and request.method in ("GET", "HEAD"):
                return self._document()
            if len(parts) != 2:
                came = request.root_path + request.path  # the path as it came, prefix too
                doubled = request.path.startswith(request.root_path + "/")
                raise InvalidRequestFault(
                    f"no operation at {came}; use /services/rs/<Service>/<operation>",
                    **(
                        {
                            "hint": f"{request.root_path} is in the path twice: give a "
                            "client the node's address alone (http://host:port) as its "
                            "base URL."
                        }
                        if doubled
                        else {}
                    ),
                )
            op = self.dispatcher.find(*parts)
            del parts  # (nor its path)
            if request.method != "POST":
                raise InvalidRequestFault(
                    f"{request.method} is not allowed; POST the request", hint="POST a JSON object."
                )
            self.dispatcher.check_enabled(op.service)
            limit = self.settings().max_request_bytes
            data = await parsing.parse(
                request.content_length, limit, read_json_body, request, limit, empty={}
            )
            size = request.content_length
            del request  # a held watch keeps nothing of the request
            call = self.dispatcher.call(op, data, caller, size=size)
            del data  # (nor its body, parsed: the call has it)
            answer = await call
            if answer.large():  # a large result: written as it is read from its stored form
                return Response(
                    json_chunks(cast(Source, answer.stored)),
                    content_type=JSON_TYPE,
                )
            # one answer for all the watchers sharing it, in ASGI's form already
            return await sized(
                len(answer.text),
                answer.rendered,
                "json",
                lambda: Ready(answer.text.encode("utf-8"), JSON_TYPE),
            )
        except Exception as exc:
            return fault_response(as_fault(exc, where))

    def _document(self) -> Response:
        """The OpenAPI document of the services served now (``bindings.openapi``)."""
        settings = self.settings()
        served = [
            svc for name, svc in self.dispatcher.services.items() if settings.service_enabled(name)
        ]
        return Response(openapi.served(served, settings), content_type=JSON_TYPE)

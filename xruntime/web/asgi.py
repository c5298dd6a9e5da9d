"""The ASGI application of an HTTP process: bytes in, a binding, bytes out.

It routes ``/services/rs``, ``/services/ws``, ``/services/rpc`` and ``/ogcapi`` to the
JSON, SOAP, JSON-RPC and OGC API – Processes bindings, with the caller its credentials
name (``accounts``), and the
operator's pages (``Page``: the status page, the metrics) by their exact paths.  A
body larger than ``[server] max_request_bytes`` is refused before it is read (by its
Content-Length, or as soon as a chunked body passes the limit), with a fault in the
form of the binding its path names.  The bindings see werkzeug's sans-io Request
over the body read here (``bindings.request``; its headers built only when a binding
asks for them) and answer werkzeug's Response, or an answer in ASGI's form already
(``bindings.ready``: the JSON binding's operations); a
streamed Response (a large SOAP result) is produced in the pool for blocking
work, chunk by chunk.  Once a large request is answered, the memory its parse took
is given back to the system (``bindings.parsing``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from werkzeug.wrappers import Response

from ..bindings import parsing
from ..bindings.json_binding import fault_response
from ..bindings.ready import Ready
from ..bindings.request import BodyRequest, ScopeRequest
from ..operations.accounts import ANONYMOUS, Caller, NotAuthenticated, authenticate
from ..operations.failures import as_fault
from ..protocol.faults import AccessDeniedFault, InvalidRequestFault, XServerFault
from ..support import metrics
from ..support.blocking import blocking
from ..support.logs import OncePerPeriod
from . import browser_guard
from .asgi_types import Headers, Message, Receive, Scope, Send, header

if TYPE_CHECKING:
    from ..settings.config import Settings

log = logging.getLogger(__name__)
_cut_log = OncePerPeriod(log, 10.0)
#: Refused credentials: one line a second at most (a client retrying a wrong token
#: in a loop must not fill the disk); never the credentials themselves.
_refusal_log = OncePerPeriod(log, 1.0)
#: Requests refused for their Host or Origin: one line in ten seconds at most.
_browser_log = OncePerPeriod(log, 10.0)

CHALLENGE = 'Basic realm="xruntime"'
CREDENTIALS_HINT = (
    "Send your user name and token as HTTP Basic credentials, or the token as "
    "Authorization: Bearer; the administrator gives out tokens."
)

#: Chunks of a streamed answer are gathered up to this size per hop to the pool.
STREAM_CHUNK = 256 * 1024
#: The scope's key for the size of the request's body, once read.
BODY_BYTES = "xruntime.body_bytes"


class Refused(Exception):
    """The request is answered without reading (the rest of) its body."""

    def __init__(
        self, fault: XServerFault, status: int | None = None, headers: dict[str, str] | None = None
    ) -> None:
        self.fault = fault
        self.status = status  # instead of the binding's own for the fault
        self.headers = headers or {}


class Page:
    """Something of the operator's view served beside the bindings (``/status``,
    ``/metrics``): it answers HTTP itself, in its own form.  With accounts on, only an
    admin is let in when ``admin_only`` (others get 403); missing or wrong credentials
    get the same 401 challenge as the bindings, so a browser asks for them.  ``admitted()``
    asks again, under the settings in force now: a page that streams for hours ends
    when its credentials are revoked."""

    admin_only = True
    #: False: served without credentials even with accounts on (``/readyz``, for a load
    #: balancer): such a page tells nothing of anyone's jobs
    needs_login = True

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        raise NotImplementedError


class Binding(Protocol):
    """What the application asks of a binding (``JsonBinding``, ``SoapBinding``,
    ``JsonRpcBinding``, ``OgcApiBinding``)."""

    name: str  # in metrics

    def refusal(self, path: str, fault: XServerFault) -> Response: ...

    def is_public(self, method: str, path: str, query: bytes) -> bool: ...

    async def handle(self, request: BodyRequest, caller: Caller) -> Response | Ready: ...


#: The methods a page answers (others: 405).
PAGE_METHODS = ("GET", "HEAD")


async def answer(
    scope: Scope,
    send: Send,
    status: int,
    content_type: str,
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """A whole answer (the headers alone for HEAD)."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})


async def refuse_method(scope: Scope, send: Send) -> bool:
    """Answer 405 to anything but GET and HEAD; True when it did."""
    if scope["method"] in PAGE_METHODS:
        return False
    await answer(
        scope,
        send,
        405,
        "text/plain; charset=utf-8",
        f"{scope['method']} is not served here; use GET\n".encode(),
        [(b"allow", ", ".join(PAGE_METHODS).encode())],
    )
    return True


class FixedPage(Page):
    """A page whose answer never changes, stated by its class: to GET and HEAD
    ``status``, ``content_type``, ``body`` and ``headers`` (to any other method 405)."""

    status = 200
    content_type = "text/plain; charset=utf-8"
    body = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, admitted: Callable[[], bool]
    ) -> None:
        if not await refuse_method(scope, send):
            await answer(scope, send, self.status, self.content_type, self.body, self.headers)


class XRuntimeApp:
    """ASGI application over the three bindings (``bindings``: path prefix → binding)
    and the operator's pages (``pages``: exact path → Page)."""

    def __init__(
        self,
        bindings: dict[str, Binding],
        settings: Callable[[], Settings],
        pages: dict[str, Page] | None = None,
    ) -> None:
        self.bindings = bindings
        self.settings = settings  # a callable answering the settings in force
        self.pages = pages or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not served
            return
        path = scope["path"]
        try:
            other_origin = browser_guard.check(scope, self.settings())
        except browser_guard.Refusal as refusal:
            await self._refuse_early(scope, refusal.fault, send)
            return
        if other_origin is not None:  # a page the file allows: CORS headers
            if browser_guard.is_preflight(scope):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 204,
                        "headers": browser_guard.cors_headers(other_origin, preflight=True),
                    }
                )
                await send({"type": "http.response.body", "body": b""})
                return
            send = _adding_headers(send, browser_guard.cors_headers(other_origin, preflight=False))
        page = self.pages.get(path)
        if page is not None:
            await self._serve_page(page, scope, receive, send)
            return
        prefix, binding = self._route(path)
        began = metrics.request_began(binding.name if binding is not None else "(none)")
        response: Response | Ready
        try:
            if binding is None:
                await self._read_body(scope, receive)
                response = fault_response(
                    InvalidRequestFault(
                        f"nothing is served at {path}",
                        hint="Operations are at /services/rs/<Service>/<operation>.",
                    )
                )
            else:  # (no name keeps the request: a held watch holds none of it)
                caller = self._caller(scope, binding, path[len(prefix) :])
                body = await self._read_body(scope, receive)
                response = await binding.handle(_request(scope, prefix, body), caller)
        except Refused as refused:
            response = self._refusal(path, refused)
        except Exception as exc:  # a bug: logged, never shown
            response = fault_response(as_fault(exc, path))
        try:
            await _send(response, send, receive)
        finally:
            metrics.request_answered(began)
        del response
        if scope.get(BODY_BYTES, 0) > parsing.GIVE_BACK_BYTES:  # its parse is garbage now
            await blocking(parsing.give_back)

    async def _refuse_early(self, scope: Scope, fault: XServerFault, send: Send) -> None:
        """A request whose Host or Origin may not be served: the fault in the form of
        the binding its path names, the body unread."""
        path = scope["path"]
        _browser_log.warning(
            "refused %s %s from %s: %s",
            scope["method"],
            path,
            (scope.get("client") or ("an unknown address",))[0],
            fault.faultstring,
        )
        await _send(self._refusal(path, Refused(fault)), send)

    def _refusal(self, path: str, refused: Refused) -> Response:
        """The answer to a refused request: its fault in the form of the binding its
        path names (JSON for a page or no binding), the connection closed after it,
        since the body is left unread."""
        prefix, binding = self._route(path)
        response = (
            binding.refusal(path[len(prefix) :], refused.fault)
            if binding is not None
            else fault_response(refused.fault)
        )
        if refused.status is not None:
            response.status_code = refused.status
        response.headers.update(refused.headers)
        response.headers["Connection"] = "close"
        return response

    async def _serve_page(self, page: Page, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            caller = self._authenticated(scope) if page.needs_login else ANONYMOUS
            if not self._may_see(page, caller):
                raise Refused(
                    AccessDeniedFault(
                        f"only an admin may see {scope['path']}",
                        hint="Ask the administrator for an admin's token.",
                    )
                )
        except Refused as refused:
            await _send(self._refusal(scope["path"], refused), send)
            return
        try:
            await page.serve(scope, receive, send, partial(self._admits, scope, page))
        except Exception:  # a bug: logged, never shown
            log.exception("%s failed", scope["path"])
            # (if the page had begun its answer, the server closes the connection)
            await _send(
                Response(
                    "internal error; see the server log\n",
                    status=500,
                    content_type="text/plain; charset=utf-8",
                ),
                send,
            )

    @staticmethod
    def _may_see(page: Page, caller: Caller) -> bool:
        return caller.admin or not page.admin_only

    def _admits(self, scope: Scope, page: Page) -> bool:
        """Whether the request's credentials still let it see ``page`` (quietly: a
        stream asks this at each event)."""
        try:  # (with accounts off: ANONYMOUS, who sees every page)
            return self._may_see(
                page, authenticate(header(scope, b"authorization"), self.settings())
            )
        except NotAuthenticated:
            return False

    def _caller(self, scope: Scope, binding: Binding, path: str) -> Caller:
        """Who calls (docs/protocol.md §10); missing or wrong credentials are refused with 401
        and a Basic challenge (clients that send credentials only when challenged, as
        suds does, then send them), before the body is read."""
        settings = self.settings()
        if (
            settings.auth.required
            and settings.auth.public_wsdl
            and binding.is_public(scope["method"], path, scope.get("query_string", b""))
        ):
            return ANONYMOUS
        return self._authenticated(scope)

    def _authenticated(self, scope: Scope) -> Caller:
        """The caller its credentials name (ANONYMOUS with accounts off); Refused with
        401 and the challenge when they are missing or wrong."""
        settings = self.settings()
        if not settings.auth.required:
            return ANONYMOUS
        try:
            return authenticate(header(scope, b"authorization"), settings)
        except NotAuthenticated as exc:
            _refusal_log.warning(
                "refused %s %s from %s: %s",
                scope["method"],
                scope["path"],
                (scope.get("client") or ("an unknown address",))[0],
                exc,
            )
            raise Refused(
                AccessDeniedFault(str(exc), hint=CREDENTIALS_HINT),
                status=401,
                headers={"WWW-Authenticate": CHALLENGE},
            ) from exc

    def _route(self, path: str) -> tuple[str, Binding | None]:
        for prefix, binding in self.bindings.items():
            if path == prefix or path.startswith(prefix + "/"):
                return prefix, binding
        return "", None

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.settings().max_request_bytes
        length = header(scope, b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise Refused(
                    InvalidRequestFault(f"the Content-Length {length!r} is not a number")
                ) from None
            if declared > limit:
                raise Refused(
                    InvalidRequestFault(
                        f"the request body has {declared} bytes, "
                        f"more than the {limit} this server accepts",
                        hint="Send a smaller request.",
                    )
                )
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refused(
                    InvalidRequestFault(
                        f"the request body is larger than the {limit} bytes this server accepts",
                        hint="Send a smaller request.",
                    )
                )
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        scope[BODY_BYTES] = size
        return b"".join(chunks)


def _adding_headers(send: Send, headers: Headers) -> Send:
    """``send``, adding ``headers`` to the answer's start."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *headers]}
        await send(message)

    return sending


def _request(scope: Scope, prefix: str, body: bytes) -> BodyRequest:
    """The request a binding is handed: the scope as werkzeug's sans-io Request sees
    it, its path below the binding's ``prefix``, over ``body`` (the length stated is
    the body's; ``bindings.request.ScopeRequest``)."""
    return ScopeRequest(scope, prefix, body)


async def _send(response: Response | Ready, send: Send, receive: Receive | None = None) -> None:
    """Send a Response (or a Ready answer); a streamed one chunk by chunk, each made in
    the pool, until it ends or its client goes away (``receive`` tells: a large result's
    client that disconnects midway frees the process at once, not after the whole was
    written)."""
    if isinstance(response, Ready):
        await send(response.messages[0])
        await send(response.messages[1])
        return
    if not response.is_streamed:
        start, body = _messages(response)
        await send(start)
        await send(body)
        return
    headers = [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.to_wsgi_list()
    ]
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": [h for h in headers if h[0].lower() != b"content-length"],
        }
    )
    # a streamed answer of ours yields bytes (the bindings' large answers)
    chunks = cast(Iterator[bytes], iter(response.response))
    gone = asyncio.ensure_future(_disconnect(receive)) if receive is not None else None
    try:
        while True:
            try:
                part = await blocking(_gather, chunks)
            except Exception as exc:  # the answer began: it can only be cut short
                _cut_log.warning("a streamed answer was cut short: %s", exc)
                return
            if gone is not None and gone.done():
                log.info("a client went away during a streamed answer; it was not finished")
                return
            if not part:
                break
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        if gone is not None:
            gone.cancel()
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # its generator's reader is let go now


async def _disconnect(receive: Receive) -> None:
    """Returns when the client has gone away (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _messages(response: Response) -> tuple[Message, Message]:
    """The ASGI messages of a Response, built once: watchers woken by one change are
    all sent the same Response."""
    messages = getattr(response, "_asgi_messages", None)
    if messages is None:
        headers = [
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.to_wsgi_list()
        ]
        body = response.get_data()
        if "Content-Length" not in response.headers:
            headers.append((b"content-length", str(len(body)).encode()))
        messages = (
            {"type": "http.response.start", "status": response.status_code, "headers": headers},
            {"type": "http.response.body", "body": body},
        )
        # a cache of ours on werkzeug's Response, which declares no such attribute
        response._asgi_messages = messages  # type: ignore[attr-defined]
    return messages


def _gather(chunks: Iterator[bytes]) -> bytes:
    """The next chunks of a streamed answer, up to STREAM_CHUNK bytes (b"" at the end)."""
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= STREAM_CHUNK:
            break
    return b"".join(parts)

"""The shapes of ASGI, named once for the annotations of the web, admin and serving code,
and the one reading of a request's header (``header``).

uvicorn hands an application a *scope* (what the request is), *receive* (awaited for
the request's body messages) and *send* (awaited with each message of the answer);
every one of them is a plain dict with string keys (https://asgi.readthedocs.io, "HTTP
& WebSocket").  These names say what a parameter is; they promise no more than a dict.
"""

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

#: The request: its ``type``, ``method``, ``path``, ``headers``, ``client``, …
Scope = MutableMapping[str, Any]
#: One message: ``{"type": "http.response.body", "body": b"…", "more_body": True}``, …
Message = MutableMapping[str, Any]
#: Awaited for the next message of the request (its body, or ``http.disconnect``).
Receive = Callable[[], Awaitable[Message]]
#: Awaited with each message of the answer.
Send = Callable[[Message], Awaitable[None]]
#: Raw headers as ASGI carries them: (lower-case name, value) byte pairs.
Headers = list[tuple[bytes, bytes]]


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case) of the request, or None."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None

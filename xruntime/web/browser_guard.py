"""What a web page in someone's browser may make a node do (docs/protocol.md §15).

A browser lets any page send simple requests anywhere (a form post, ``fetch`` with a
``text/plain`` body), with the user's network position behind them: a page on the
internet could start jobs on a node that listens on 127.0.0.1 with accounts off.  Two
checks, before a request reaches a binding or a page:

* **Host.**  A page can reach a loopback node under its own name by *DNS rebinding*
  (its name resolves to 127.0.0.1 a moment later); the browser then sends that name as
  ``Host`` and counts the node as the page's own origin.  So a ``Host`` must be an IP
  address, ``localhost`` (or ``*.localhost``), this machine's name, ``public_url``'s host,
  or a name listed in ``[server] allowed_hosts``.  A rebinding page can name none of
  these.  With accounts on and no list, any name is served: the attacker's page has no
  credentials to send.
* **Origin.**  A browser names the page that sent a request in ``Origin``.  A request
  from another origin than the node's own (its ``Host``, or ``public_url``) is refused,
  unless ``[server] allowed_origins`` lists that origin: then it is served with the CORS
  headers that let the page read the answer, and a preflight (``OPTIONS``) is answered.

The third part, that a state-changing call needs a JSON or SOAP content type (which
a page cannot send across origins without a preflight), is each binding's own check
of its body (``json_binding.read_json_body``, ``soap``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Collection
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..protocol.faults import AccessDeniedFault, InvalidRequestFault, XServerFault
from .asgi_types import Headers, Scope, header

if TYPE_CHECKING:
    from ..settings.config import Settings

#: The headers a permitted page may send, and the answers' headers it may read.
ALLOW_HEADERS = b"authorization, content-type, soapaction"
EXPOSE_HEADERS = b"retry-after, www-authenticate"
PREFLIGHT_MAX_AGE = b"600"
DEFAULT_PORTS = {"http": 80, "https": 443}


class Refusal(Exception):
    """A request refused before any binding reads it: ``fault``, answered in the form
    (and with the HTTP status) of the binding its path names."""

    def __init__(self, fault: XServerFault) -> None:
        super().__init__(fault.faultstring)
        self.fault = fault


def check(scope: Scope, settings: Settings) -> bytes | None:
    """Refusal when the request's ``Host`` or ``Origin`` may not be served; else the
    origin to answer with CORS headers (a permitted other origin), or None."""
    host = header(scope, b"host")
    if host is not None and not host_allowed(host, settings):
        raise Refusal(
            InvalidRequestFault(
                f"this node does not serve the host name {_shown(host)!r}",
                hint="Use the node's address or localhost, or ask the administrator to add "
                "the name to [server] allowed_hosts.",
            )
        )
    origin = header(scope, b"origin")
    if origin is None or same_origin(origin, host, settings.public_url):
        return None
    if _listed(origin, settings.allowed_origins):
        return origin.encode("latin-1")
    raise Refusal(
        AccessDeniedFault(
            f"requests from pages of {_shown(origin)!r} are not served here",
            hint="Call the node from its own pages or from a program, or ask the administrator "
            "to add the origin to [server] allowed_origins.",
        )
    )


#: Host headers already judged, under the settings (frozen: a reload brings new ones)
#: they were judged by: a client sends the same Host with each request.
_verdicts: dict[str, bool] = {}
_verdicts_under: list[Settings | None] = [None]
#: Host headers remembered at most (any client may send any name: the memo is emptied).
VERDICTS_KEPT = 256


def host_allowed(host: str, settings: Settings) -> bool:
    """Whether a request with this ``Host`` header may be served (see the module's
    docstring), remembered per header and settings."""
    if _verdicts_under[0] is not settings:
        _verdicts.clear()
        _verdicts_under[0] = settings
    verdict = _verdicts.get(host)
    if verdict is None:
        if len(_verdicts) >= VERDICTS_KEPT:
            _verdicts.clear()
        verdict = _verdicts[host] = _judged(host, settings)
    return verdict


def _judged(host: str, settings: Settings) -> bool:
    name = _host_name(host)
    if name is None:
        return False
    allowed = settings.allowed_hosts
    if "*" in allowed or (settings.auth.required and not allowed):
        return True
    if _is_ip(name) or name == "localhost" or name.endswith(".localhost"):
        return True
    if name in _own_names() or name == _host_name(urlsplit(settings.public_url).netloc or "-"):
        return True
    return any(
        name == entry or (entry.startswith(".") and (name.endswith(entry) or name == entry[1:]))
        for entry in allowed
    )


def same_origin(origin: str, host: str | None, public_url: str) -> bool:
    """Whether ``origin`` is the node's own: the host and port the request was sent to
    (the scheme is not compared, a TLS proxy may stand in front), or ``public_url``'s."""
    theirs = _origin_address(origin)
    if theirs is None:
        return False  # "null" (a sandboxed frame, a file) or garbage
    if host is not None:
        name = _host_name(host)
        port = host.rpartition(":")[2] if not host.endswith("]") and ":" in host else None
        if name == theirs[1] and (port is None and theirs[3] or port == str(theirs[2])):
            return True
    return bool(public_url) and theirs[:3] == (_origin_address(public_url) or ())[:3]


def cors_headers(origin: bytes, preflight: bool) -> Headers:
    """The headers that let the page of a permitted ``origin`` read the answer (and,
    for a preflight, send its request).  No ``Allow-Credentials``: a page must send a
    token itself; the browser never adds a user's remembered credentials for it."""
    headers: Headers = [
        (b"access-control-allow-origin", origin),
        (b"vary", b"Origin"),
        (b"access-control-expose-headers", EXPOSE_HEADERS),
    ]
    if preflight:
        headers += [
            (b"access-control-allow-methods", b"GET, POST"),
            (b"access-control-allow-headers", ALLOW_HEADERS),
            (b"access-control-max-age", PREFLIGHT_MAX_AGE),
        ]
    return headers


def is_preflight(scope: Scope) -> bool:
    return (
        scope["method"] == "OPTIONS" and header(scope, b"access-control-request-method") is not None
    )


def _listed(origin: str, allowed: Collection[str]) -> bool:
    return "*" in allowed or origin.lower().rstrip("/") in allowed


def _origin_address(origin: str) -> tuple[str, str, int, bool] | None:
    """(scheme, host name, port, whether the port is the scheme's default) of an origin
    such as ``https://app.example:8443``; None for anything else."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    default = DEFAULT_PORTS[parts.scheme]
    return parts.scheme, parts.hostname.lower(), port or default, port in (None, default)


def _host_name(host: str) -> str | None:
    """The name of a ``Host`` header without its port, lower case; None if malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest[1:].isdigit()):
            return None
        return name
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


@lru_cache(maxsize=1024)
def _is_ip(name: str) -> bool:
    """(Remembered: a Host is the same few names again and again, and ``ipaddress``
    takes microseconds to parse one.)"""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@lru_cache(maxsize=1)
def _own_names() -> frozenset[str]:
    """This machine's names: no rebinding page can be served under them."""
    return frozenset({socket.gethostname().lower()})  # (no DNS look-up: it may hang)


def _shown(text: str) -> str:
    return text if len(text) <= 200 else text[:200] + "…"

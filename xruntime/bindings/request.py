"""What a binding is handed: an HTTP request whose body has been read.

The HTTP process reads a request's body itself (refusing one that is too large before
reading it, ``web.asgi``); the bindings then see it through werkzeug's sans-io
``Request`` (method, path, query arguments, headers, content type and length), made
from the ASGI scope without a WSGI environ, with the body beside it.
"""

import io
from functools import lru_cache
from typing import Any

from werkzeug.datastructures import Headers
from werkzeug.http import parse_options_header
from werkzeug.sansio.request import Request
from werkzeug.sansio.utils import get_content_length
from werkzeug.utils import cached_property

#: An ASGI scope (``web.asgi_types.Scope``; the bindings do not import the web layer)
Scope = Any


class BodyRequest(Request):
    """werkzeug's sans-io Request over a body already read."""

    def __init__(
        self,
        method: str,
        root_path: str,
        path: str,
        body: bytes,
        headers: Headers | None = None,
        query_string: bytes = b"",
        scheme: str = "http",
        server: tuple[str, int | None] | None = None,
        remote_addr: str | None = None,
    ) -> None:
        super().__init__(
            method=method,
            scheme=scheme,
            server=server,
            root_path=root_path,
            path=path,
            query_string=query_string,
            headers=headers if headers is not None else Headers(),
            remote_addr=remote_addr,
        )
        self.body = body

    @property
    def stream(self) -> io.BytesIO:
        """The body, to read as a file."""
        return io.BytesIO(self.body)


class ScopeRequest(BodyRequest):
    """A BodyRequest made from an ASGI ``scope`` (``web.asgi``): what werkzeug's Request
    takes as arguments is read from the scope, and its ``headers`` (werkzeug's Headers,
    the request's own but Content-Length, which is the body's) are built only when a
    binding first asks for them.  The JSON binding's operations read the content type
    and length alone, which are read from the scope's headers as werkzeug reads them
    from its Headers: building Headers for them cost more than the rest of the request."""

    def __init__(self, scope: Scope, root_path: str, body: bytes) -> None:
        # (werkzeug's Request.__init__, the headers left for later)
        self.method = scope["method"].upper()
        self.scheme = scope.get("scheme", "http")
        server = scope.get("server")
        self.server = (str(server[0]), server[1]) if server else None
        self.root_path = root_path.rstrip("/")
        self.path = "/" + scope["path"][len(root_path) :].lstrip("/")
        self.query_string = scope.get("query_string", b"")
        self.remote_addr = (scope.get("client") or (None,))[0]
        self.body = body
        self._raw_headers: list[tuple[bytes, bytes]] = scope["headers"]

    @cached_property
    def headers(self) -> Headers:  # (an attribute in werkzeug's)
        headers = Headers(
            [
                (key.decode("latin-1"), value.decode("latin-1"))
                for key, value in self._raw_headers
                if key != b"content-length"
            ]
        )
        headers["Content-Length"] = str(len(self.body))
        return headers

    @cached_property
    def content_length(self) -> int | None:
        """(werkzeug's, over the body's length: None for a chunked body, as there)"""
        return get_content_length(str(len(self.body)), self._raw(b"transfer-encoding"))

    def _parse_content_type(self) -> None:
        """(werkzeug's, over the scope's Content-Type)"""
        if not hasattr(self, "_parsed_content_type"):
            value, params = _options(self._raw(b"content-type") or "")
            self._parsed_content_type = (value, dict(params))  # (a dict of the request's own)

    def _raw(self, name: bytes) -> str | None:
        """The first value of the header ``name`` (lower case), as werkzeug's Headers
        would answer it (latin-1), or None."""
        for key, value in self._raw_headers:
            if key == name:
                return value.decode("latin-1")
        return None


@lru_cache(maxsize=64)
def _options(content_type: str) -> tuple[str, dict[str, str]]:
    """``parse_options_header``, remembered: a client sends the same few content types."""
    return parse_options_header(content_type)

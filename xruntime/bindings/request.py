"""What a binding is handed: an HTTP request whose body has been read.

The HTTP process reads a request's body itself (refusing one that is too large before
reading it, ``web.asgi``); the bindings then see it through werkzeug's sans-io
``Request`` (method, path, query arguments, headers, content type and length), made
from the ASGI scope without a WSGI environ, with the body beside it.
"""

import io

from werkzeug.datastructures import Headers
from werkzeug.sansio.request import Request


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

"""An answer already in ASGI's form: ``Ready``, the two messages of a whole answer.

A binding answers werkzeug's Response; for an answer it sends again and again (the JSON
binding's operations: 200, a JSON body) it may answer ``Ready`` instead, the messages
werkzeug's Response would have made (``web.asgi._messages``), made without building a
Response first.  Watchers woken by one change share one.
"""

from typing import Any

#: The ASGI messages of an answer: its start, and its whole body.
Message = dict[str, Any]


class Ready:
    """A whole answer of ``status`` with ``content_type`` and ``body``: the headers a
    werkzeug Response of the same would send (Content-Type, Content-Length)."""

    __slots__ = ("messages",)

    def __init__(self, body: bytes, content_type: str, status: int = 200) -> None:
        self.messages: tuple[Message, Message] = (
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"Content-Type", content_type.encode("latin-1")),
                    (b"Content-Length", str(len(body)).encode("latin-1")),
                ],
            },
            {"type": "http.response.body", "body": body},
        )

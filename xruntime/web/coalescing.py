"""One write to the socket per answer: ``Coalescing``, a connection's transport that
holds what is written until the end of the event loop's turn.

uvicorn writes an answer's status line and headers when the application sends the
answer's start, and its body when the body is sent: two writes, two TCP segments, the
cost of each (the system call, and on loopback the receiver's part of it too) paid
twice for every small answer.  Held until the turn ends, the two go in one write.  A
large write (a chunk of a streamed answer) goes at once, after what is held, never
copied to be joined.  Closing the connection writes what is held first; aborting it
drops it, as the transport would.
"""

import asyncio
from typing import Any

#: A write of at least this many bytes is not held (nor copied to be joined).
HELD_BELOW = 64 * 1024


class Coalescing:
    """``transport`` with its small writes of one turn of ``loop`` joined into one."""

    __slots__ = ("transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None  # written this turn, to write at its end

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= HELD_BELOW:
            self.flush()
            self.transport.write(data)
            return
        if self._held is None:
            self._held = []
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Write what is held now."""
        held, self._held = self._held, None
        if held and not self.transport.is_closing():
            self.transport.write(held[0] if len(held) == 1 else b"".join(held))

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self._held = None
        self.transport.abort()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self._held or ()))

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's own
        return getattr(self.transport, name)

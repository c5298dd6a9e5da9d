"""One write to the socket per answer: ``Coalescing``, a connection's transport that
holds what is written until the end of the event loop's turn.

uvicorn writes an answer's status line and headers when the application sends the
answer's start, and its body when the body is sent: two writes, two TCP segments, the
cost of each (the system call, and on loopback the receiver's part of it too) paid
twice for every small answer.  Held until the turn ends, the two go in one write.  A
large write (a chunk of a streamed answer) goes at once, after what is held, never
copied to be joined.  Closing the connection writes what is held first; aborting it
drops it, as the transport would.

The connections of one event loop share one ``Turn``: one callback at the turn's end
writes what each of them still holds, not a callback for each connection (an answer
with ``Connection: close`` is written when it closes, and its callback found nothing
left: 10 000 held watches answered at once scheduled 10 000 of them).  ``is_closing``,
asked several times an answer by uvicorn, is the transport's, asked directly.
"""

import asyncio
from typing import Any

#: A write of at least this many bytes is not held (nor copied to be joined).
HELD_BELOW = 64 * 1024


class Turn:
    """The connections of ``loop`` holding writes in its current turn, and the one
    callback that writes them at its end."""

    __slots__ = ("loop", "_due")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._due: list[Coalescing] | None = None

    def hold(self, connection: "Coalescing") -> None:
        """``connection`` holds writes until the turn ends."""
        if self._due is None:
            self._due = [connection]
            self.loop.call_soon(self._end)
        else:
            self._due.append(connection)

    def _end(self) -> None:
        due, self._due = self._due, None
        for connection in due or ():
            connection.flush()  # (nothing left when it was written on closing)


class Coalescing:
    """``transport`` with its small writes of one turn (``turn``: its loop's) joined
    into one."""

    __slots__ = ("transport", "_turn", "_held")

    def __init__(self, transport: asyncio.Transport, turn: Turn) -> None:
        self.transport = transport
        self._turn = turn
        self._held: list[bytes] | None = None  # written this turn, to write at its end

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) >= HELD_BELOW:
            self.flush()
            self.transport.write(data)
            return
        held = self._held
        if held is None:
            self._held = [bytes(data)]
            self._turn.hold(self)
        else:
            held.append(bytes(data))

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

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() + sum(map(len, self._held or ()))

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's own
        return getattr(self.transport, name)

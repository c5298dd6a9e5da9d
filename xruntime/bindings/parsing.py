"""What parsing a request body may cost an HTTP process: memory bounded by the body's
size, given back afterwards (docs/protocol.md §15; benchmarks/abuse.py, item 4).

A parsed body is many times larger than its text, and most of that is containers:
10 MB of ``[]`` are 3.3 million Python lists (+260 MB), 10 MB of ``<h/>`` 2.5 million
libxml2 nodes (+320 MB).  So, one definition for the three bindings:

- ``check_marks``: before a body is parsed, its containers are counted in its bytes
  (``bytes.count``: milliseconds for 10 MB) and a body with more than one per
  ``per_bytes`` bytes on average is refused with InvalidRequestFault.  Legitimate
  requests are far below the bound (a location is one container per 23 bytes in
  compact JSON, an XML coordinate ``<lon>8.1</lon>`` one element per 14 bytes); at
  the bound a parse takes at most about 25 times the body's bytes.
- ``parse``: bodies over ``INLINE_BYTES`` are parsed in the pool, at most
  ``[server] max_request_bytes`` of them at once per HTTP process (the others wait
  their turn, first come first served), so that parallel large requests cannot
  multiply the peak.  No key of its own: the bound is derived from the body limit.
- ``give_back``: after a large request is answered, the C heap's free pages are
  returned to the system (glibc's ``malloc_trim``), so that the process's RSS comes
  back near its idle size instead of keeping its peak.
"""

import asyncio
import collections
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ..protocol.faults import InvalidRequestFault
from ..support.blocking import INLINE_BYTES, blocking
from ..support.malloc import give_back as give_back  # (glibc's, in support.malloc)

#: A body with fewer marks than this is never refused by ``check_marks``.
FREE_MARKS = 4096
#: After a request body of more bytes than this is answered, memory is given back.
GIVE_BACK_BYTES = 1024 * 1024

Params = ParamSpec("Params")
Parsed = TypeVar("Parsed")


def check_marks(raw: bytes, count: int, per_bytes: int, what: str) -> None:
    """Refuse ``raw`` when it holds more than ``count`` marks (containers: JSON arrays
    and objects, XML elements and attributes, as its binding counts them) than one
    per ``per_bytes`` of its bytes (after the first ``FREE_MARKS``)."""
    allowed = FREE_MARKS + len(raw) // per_bytes
    if count > allowed:
        raise InvalidRequestFault(
            f"the request body holds {count} {what} in {len(raw)} bytes, more than the {allowed} "
            f"(one per {per_bytes} bytes) this server parses",
            hint="Send a request of the "
            "operation's shape; a large request holds values, not empty containers.",
        )


class _Admission:
    """At most ``budget()`` bytes of bodies parsed at once, in the order they came
    (a body larger than the whole budget waits until none is parsed)."""

    def __init__(self) -> None:
        self.parsing = 0
        self.waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def admit(self, size: int, budget: int) -> None:
        if not self.waiting and (self.parsing == 0 or self.parsing + size <= budget):
            self.parsing += size
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self.waiting.append(entry)
        try:
            await turn
        except BaseException:
            if entry in self.waiting:
                self.waiting.remove(entry)
            elif not turn.cancelled():  # admitted meanwhile: hand it back
                self.release(size, budget)
            raise

    def release(self, size: int, budget: int) -> None:
        self.parsing -= size
        while self.waiting:
            size, turn = self.waiting[0]
            if self.parsing and self.parsing + size > budget:
                break
            self.waiting.popleft()
            if not turn.done():
                self.parsing += size
                turn.set_result(None)


_admission = _Admission()


async def parse(
    size: int | None,
    budget: int,
    fn: Callable[Params, Parsed],
    *args: Params.args,
    **kwargs: Params.kwargs,
) -> Parsed:
    """``fn(*args, **kwargs)``: the parse of a body of ``size`` bytes; inline when it
    is small, else in the pool once ``budget`` bytes of bodies (the body limit) make
    room."""
    if size is not None and size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    size = min(size or budget, budget)
    await _admission.admit(size, budget)
    try:
        return await blocking(fn, *args, **kwargs)
    finally:
        _admission.release(size, budget)

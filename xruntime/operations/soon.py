"""A call's store work on the event loop itself, when the store answers it at once.

An HTTP process hands its store work to the pool for blocking work, so that a statement
that waits never stalls the event loop; for the job cycle's few small statements the hop
there and back costs more than the work (docs/architecture.md, "The hot path").  On
SQLite they run on the loop under ``store.at_once()``: what would wait for a lock raises
``WouldWait`` before anything is written.  Such a lock is held for a fraction of a
millisecond (another process's commit): the same work is tried again on the loop after
its next turns (``TURNS``), in which the loop answers other requests, and runs in the
pool only when the lock is still held then.  Under load many of the cycle's
writes met a lock at their first try, and each went to the pool: a thread woken, the
GIL handed over and back, the loop woken with the answer; and the pool's writes, holding
this process's turn to write, made the loop's next writes meet a lock too.
"""

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from ..store import WouldWait
from ..support.blocking import blocking

if TYPE_CHECKING:
    from ..store import JobStore

P = ParamSpec("P")
T = TypeVar("T")

#: Turns of the event loop a call that met a lock lets pass, one at a time, trying
#: again after each, before it goes to the pool.
TURNS = 2


async def soon(store: "JobStore", fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, store work of ``store``: on the event loop when the
    store answers it without waiting (SQLite, no lock to wait for), else in the pool.
    Only for small work: a few indexed reads and at most one short write."""
    if store.answers_at_once:
        turns = TURNS
        while True:
            try:
                with store.at_once():
                    return fn(*args, **kwargs)
            except WouldWait:
                pass  # nothing was written: tried again, or the pool's thread may wait
            if not turns:
                break
            turns -= 1
            try:
                await asyncio.sleep(0)  # the loop's other work first: the lock may be gone then
            except asyncio.CancelledError:  # its caller is gone: the work is still done,
                # as work handed to the pool at once would be, its outcome to nobody
                blocking(fn, *args, **kwargs).add_done_callback(_unheard)
                raise
    return await blocking(fn, *args, **kwargs)


def _unheard(done: "asyncio.Future[Any]") -> None:
    """The outcome of work whose caller is gone, taken so that it is not logged."""
    if not done.cancelled():
        done.exception()

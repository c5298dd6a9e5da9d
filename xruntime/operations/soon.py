"""A call's store work on the event loop itself, when the store answers it at once.

An HTTP process hands its store work to the pool for blocking work, so that a statement
that waits never stalls the event loop; for the job cycle's few small statements the hop
there and back costs more than the work (docs/architecture.md, "The hot path").  On
SQLite they run on the loop under ``store.at_once()``: what would wait for a lock raises
``WouldWait`` before anything is written, and the same work then runs in the pool.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from ..store import WouldWait
from ..support.blocking import blocking

if TYPE_CHECKING:
    from ..store import JobStore

P = ParamSpec("P")
T = TypeVar("T")


async def soon(store: "JobStore", fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, store work of ``store``: on the event loop when the
    store answers it without waiting (SQLite, no lock to wait for), else in the pool.
    Only for small work: a few indexed reads and at most one short write."""
    if store.answers_at_once:
        try:
            with store.at_once():
                return fn(*args, **kwargs)
        except WouldWait:
            pass  # nothing was written: the pool's thread may wait
    return await blocking(fn, *args, **kwargs)

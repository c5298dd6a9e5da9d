"""The bounded pool for blocking work of an HTTP process ([server] threads).

The event loop only waits and moves bytes; store calls and the codecs' work on large
payloads run here, so a slow query or a 10 MB request never stalls the other
connections.  A held watchJob takes no thread from this pool while it waits.
"""

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def install(loop: asyncio.AbstractEventLoop, threads: int) -> ThreadPoolExecutor:
    """Make a pool of at most ``threads`` threads the loop's executor."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="blocking")
    loop.set_default_executor(pool)
    return pool


def blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
    """Await ``fn(*args, **kwargs)`` run in the pool."""
    call = functools.partial(fn, *args, **kwargs) if (args or kwargs) else fn
    return asyncio.get_running_loop().run_in_executor(None, call)


#: Work on fewer bytes than this runs on the event loop: a hop to the pool costs more.
INLINE_BYTES = 64 * 1024


async def sized(size: int | None, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` for ``size`` bytes of input: inline when small, else in
    the pool."""
    if size is not None and size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    return await blocking(fn, *args, **kwargs)

"""The lighter stand-ins ``web.connection_guard`` gives uvicorn's connections: an
``Event`` whose queue of waiters is made when one waits, and a list for the queue of
pipelined requests; each behaves as what it replaces."""

import asyncio

from xruntime.web.connection_guard import _Event, _Pipeline


def test_the_event_wakes_its_waiters_and_answers_at_once_when_set():
    async def scenario():
        event = _Event()
        assert not event.is_set()
        waiters = [asyncio.ensure_future(event.wait()) for _ in range(3)]
        await asyncio.sleep(0)  # (each now waits)
        assert not any(w.done() for w in waiters)
        event.set()
        assert await asyncio.gather(*waiters) == [True, True, True]
        assert await event.wait() is True  # set: at once
        event.clear()
        late = asyncio.ensure_future(event.wait())
        await asyncio.sleep(0)
        assert not late.done()
        event.set()
        assert await late is True

    asyncio.run(scenario())


def test_a_waiter_cancelled_leaves_the_event_usable():
    async def scenario():
        event = _Event()
        waiter = asyncio.ensure_future(event.wait())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        event.set()
        assert await event.wait() is True

    asyncio.run(scenario())


def test_the_pipeline_gives_back_the_oldest_request_first():
    pipeline = _Pipeline()
    assert not pipeline
    for request in ("first", "second", "third"):
        pipeline.appendleft(request)
    assert [pipeline.pop() for _ in range(3)] == ["first", "second", "third"]
    assert not pipeline

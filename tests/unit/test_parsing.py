"""bindings/parsing.py: the count of containers, and how many bytes of bodies an HTTP
process parses at once."""

import asyncio

import pytest

from xruntime.bindings import parsing
from xruntime.protocol.faults import InvalidRequestFault


def test_marks_past_the_bound_are_refused():
    parsing.check_marks(b"x" * 16_000, parsing.FREE_MARKS + 1000, 16, "things")
    with pytest.raises(InvalidRequestFault, match="one per 16 bytes"):
        parsing.check_marks(b"x" * 16_000, parsing.FREE_MARKS + 1001, 16, "things")


def test_a_small_body_is_never_refused():
    parsing.check_marks(b"[]" * 2048, 2048, 16, "arrays")


async def settle():
    """Lets every task that can go on run until it waits (the loop's turns, not a time:
    the same on a loaded machine)."""
    for _ in range(100):
        await asyncio.sleep(0)


def test_bodies_are_admitted_within_the_budget_first_come_first_served():
    async def scenario():
        admission, order = parsing._Admission(), []

        async def parse(name, size, hold):
            await admission.admit(size, 10)
            order.append(name)
            await hold.wait()
            admission.release(size, 10)

        holds = {name: asyncio.Event() for name in "abcd"}
        tasks = [asyncio.create_task(parse("a", 6, holds["a"]))]
        await settle()
        tasks += [
            asyncio.create_task(parse("b", 6, holds["b"])),  # waits: 12 > 10
            asyncio.create_task(parse("c", 2, holds["c"])),  # waits behind b
            asyncio.create_task(parse("d", 50, holds["d"])),
        ]  # larger than the budget
        await settle()
        assert order == ["a"]
        holds["a"].set()
        await settle()
        assert order == ["a", "b", "c"]
        holds["b"].set()
        holds["c"].set()
        await settle()
        assert order == ["a", "b", "c", "d"]  # alone
        holds["d"].set()
        await asyncio.gather(*tasks)
        assert admission.parsing == 0 and not admission.waiting

    asyncio.run(scenario())


def test_a_cancelled_waiter_gives_its_turn_on():
    async def scenario():
        admission = parsing._Admission()
        await admission.admit(10, 10)
        waiter = asyncio.create_task(admission.admit(5, 10))
        await settle()
        assert admission.waiting, "the waiter waits for its turn"
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        admission.release(10, 10)
        assert admission.parsing == 0 and not admission.waiting

    asyncio.run(scenario())

"""``JobStore`` (xruntime/store/interface.py) is the store's interface as the rest of
xruntime uses it: ``SqlJobStore`` has every one of its methods, with the same
parameters, defaults and annotations, and no public method beyond them."""

import inspect

import pytest

from xruntime.store import JobStore, SqlJobStore


def public_methods(cls) -> set:
    return {
        name
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_the_store_has_no_public_method_the_interface_lacks_nor_the_reverse():
    assert public_methods(SqlJobStore) == public_methods(JobStore)


@pytest.mark.parametrize("name", sorted(public_methods(JobStore)))
def test_each_method_has_the_interface_s_signature(name):
    assert inspect.signature(getattr(SqlJobStore, name)) == inspect.signature(
        getattr(JobStore, name)
    )

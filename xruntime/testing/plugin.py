"""pytest fixtures for service authors' tests, loaded by pytest on its own once xruntime
is installed (the ``pytest11`` entry point).  Nothing is imported or started until a
test asks for a fixture.

* ``xruntime_node``: a real node (``xruntime.testing.Node``) for the test module, serving
  every installed service; override ``xruntime_config`` (TOML for the node's file) or
  ``xruntime_env`` (its environment) in your conftest.py to change it;
* ``json_client``, ``jsonrpc_client``, ``soap_client``: a client of that node per binding;
* ``xruntime_client``: the test runs once per binding, with that binding's client.
"""

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def xruntime_config() -> str:
    """TOML added to the node's configuration file (none by default)."""
    return ""


@pytest.fixture(scope="module")
def xruntime_env() -> dict[str, str]:
    """Variables added to the node's environment (none by default)."""
    return {}


@pytest.fixture(scope="module")
def xruntime_node(
    tmp_path_factory: pytest.TempPathFactory, xruntime_config: str, xruntime_env: dict[str, str]
) -> Iterator[Any]:
    from . import Node

    with Node(tmp_path_factory.mktemp("xruntime"), xruntime_config, xruntime_env) as node:
        yield node


@pytest.fixture
def json_client(xruntime_node: Any) -> Any:
    return xruntime_node.client("json")


@pytest.fixture
def jsonrpc_client(xruntime_node: Any) -> Any:
    return xruntime_node.client("jsonrpc")


@pytest.fixture
def soap_client(xruntime_node: Any) -> Any:
    return xruntime_node.client("soap")


@pytest.fixture(params=("json", "jsonrpc", "soap"))
def xruntime_client(request: pytest.FixtureRequest, xruntime_node: Any) -> Any:
    return xruntime_node.client(request.param)

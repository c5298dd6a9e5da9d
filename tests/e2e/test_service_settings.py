"""A service's own setting on a real node: XDima's ``[services.XDima] max_cells`` bounds
the matrices every binding accepts, and an edit of the file moves the bound without a
restart (docs/writing-a-service.md, "Settings of your own")."""

import os
import time

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client
from tests.harness import Server

IN_FORCE = 2.0  # s: a valid edit is in force this soon after the write (docs/protocol.md §5)


def xdima(max_cells: int) -> str:
    return f"\n[services.XDima]\nmax_cells = {max_cells}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("service-settings")), extra=xdima(100)).start()
    yield srv
    srv.stop()


def square(n: int) -> dict:
    """A request for an n × n matrix (the starts are the destinations too)."""
    return {"startLocations": [{"longitude": i / 100, "latitude": 0} for i in range(n)]}


def refused(client, n: int) -> RemoteFault:
    with pytest.raises(RemoteFault) as fault:
        client.call("XDima", "startCreateDistanceMatrix", square(n))
    return fault.value


@pytest.mark.parametrize("binding", BINDINGS)
def test_the_files_max_cells_bounds_each_binding(server, binding):
    client = make_client(binding, server.base)
    fault = refused(client, 11)
    assert fault.type == "InvalidValueFault"
    assert fault.fields["parameter"] == "startLocations" and fault.fields["value"] == "121"
    assert "more than the 100 allowed" in fault.message
    job = client.call("XDima", "startCreateDistanceMatrix", square(10))
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"


def edit(server, extra: str) -> None:
    """Rewrite the file with ``extra`` after the harness's tables; wait until reloaded."""
    with open(server.config, encoding="utf-8") as f:
        text = f.read()
    head = text.split("\n[services.XDima]")[0]
    seen = server.log().count(f"{server.config}: reloaded")
    aside = server.config + ".next"
    with open(aside, "w", encoding="utf-8") as f:
        f.write(head + extra)
    os.replace(aside, server.config)
    deadline = time.time() + IN_FORCE
    while server.log().count(f"{server.config}: reloaded") == seen:
        assert time.time() < deadline, f"the edit was not applied:\n{server.log()[-3000:]}"
        time.sleep(0.05)


def test_an_edit_of_max_cells_applies_without_a_restart(server):
    client = make_client("json", server.base)
    assert refused(client, 11).type == "InvalidValueFault"
    try:
        edit(server, xdima(121))
        job = client.call("XDima", "startCreateDistanceMatrix", square(11))
        assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
        assert refused(client, 12).fields["value"] == "144"
    finally:
        edit(server, xdima(100))
    assert refused(client, 11).type == "InvalidValueFault"

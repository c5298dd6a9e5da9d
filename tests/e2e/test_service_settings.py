"""A service's own setting on a real node: XDima's ``[services.XDima] max_cells`` bounds
the matrices every binding accepts, and an edit of the file moves the bound without a
restart; a job's function reads its service's settings as ``job.settings``
(docs/writing-a-service.md, "Settings of your own")."""

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


def edit(server, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the node's file (written aside, then renamed in
    place, as an editor does) and wait until the node has reloaded it."""
    with open(server.config, encoding="utf-8") as f:
        text = f.read()
    assert old in text
    seen = server.log().count(f"{server.config}: reloaded")
    with open(server.config + ".next", "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    os.replace(server.config + ".next", server.config)
    deadline = time.time() + IN_FORCE
    while server.log().count(f"{server.config}: reloaded") == seen:
        assert time.time() < deadline, f"the edit was not applied:\n{server.log()[-3000:]}"
        time.sleep(0.05)


def test_an_edit_of_max_cells_applies_without_a_restart(server):
    client = make_client("json", server.base)
    assert refused(client, 11).type == "InvalidValueFault"
    try:
        edit(server, "max_cells = 100", "max_cells = 121")
        job = client.call("XDima", "startCreateDistanceMatrix", square(11))
        assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
        assert refused(client, 12).fields["value"] == "144"
    finally:
        edit(server, "max_cells = 121", "max_cells = 100")
    assert refused(client, 11).type == "InvalidValueFault"


def test_a_running_job_reads_the_settings_in_force_when_it_started(tmp_path):
    """``job.settings`` in the worker: the file's value, then an edit's, no restart."""
    srv = Server(
        str(tmp_path),
        workers=1,
        extra='\n[services.XConfigured]\ngreeting = "bonjour"\n',
        env={"XRUNTIME_SERVICE_MODULES": "tests.fixtures.configured"},
    ).start()
    try:

        def greeting():
            job = srv.call("XConfigured", "startGreet", {})
            assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
            return srv.call("XConfigured", "fetchGreetResponse", {"id": job["id"]})["greeting"]

        assert greeting() == "bonjour"
        edit(srv, '"bonjour"', '"hej"')
        assert greeting() == "hej"
    finally:
        srv.stop()

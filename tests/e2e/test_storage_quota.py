"""What a user may keep stored (docs/protocol.md §15; benchmarks/abuse.py), through real
HTTP to a real node with accounts on: ``max_stored_bytes`` counts what a user's jobs
store and what their queued and running jobs may still store (each service's bound of a
request's result), so a start that could pass it is refused at once with a
QuotaExceededFault in every binding's own form, nothing stored, while another user still
starts; the result files on disk stay under the bound; a result larger than its
service's bound that would pass it fails its job instead of being stored."""

import os
import random
import re

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client, wait_done
from tests.e2e.test_accounts import TOKENS, accounts_toml, counts, creds
from tests.harness import Server

BOUND = 20_000_000  # carol's max_stored_bytes: below one 2000² matrix's bound (32 MB)
FIGURE = re.compile(r"your jobs take (\d+) bytes stored or to be stored, and this job's result")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    users = {"carol": {"max_stored_bytes": BOUND}, "bob": {}, "root": {"admin": True}}
    assert set(users) <= set(TOKENS)
    node = Server(
        str(tmp_path_factory.mktemp("quota")),
        extra=accounts_toml(users),
        auth=creds("root"),
        env={"XRUNTIME_SERVICE_MODULES": "tests.fixtures.oversized"},
    ).start()
    yield node
    node.stop()


def matrix(size):
    rnd = random.Random(size)
    return {
        "startLocations": [
            {"longitude": rnd.uniform(5, 15), "latitude": rnd.uniform(47, 55)} for _ in range(size)
        ]
    }


def refused(client, service, operation, request):
    with pytest.raises(RemoteFault) as caught:
        client.call(service, operation, request)
    assert caught.value.type == "QuotaExceededFault", caught.value
    return caught.value


def on_disk(srv):
    """The bytes of the node's result files (SQLite keeps large results beside the
    database, in data/xruntime.db.results/)."""
    folder = os.path.join(srv.folder, "data", "xruntime.db.results")
    return sum(
        os.path.getsize(os.path.join(top, name))
        for top, _, names in os.walk(folder)
        for name in names
    )


def test_a_start_that_could_pass_max_stored_bytes_is_refused_in_every_binding(srv):
    carol = {binding: make_client(binding, srv.base, auth=creds("carol")) for binding in BINDINGS}
    for binding, client in carol.items():
        fault = refused(client, "XDima", "startCreateDistanceMatrix", matrix(2000))
        assert f"past max_stored_bytes of {BOUND}" in fault.message
        if binding == "json":
            assert fault.status == 429
        elif binding == "soap":
            assert fault.code.split(":")[-1] == "Client"
            assert "delete" in fault.fields["hint"]
        else:
            assert -32099 <= fault.code <= -32000
    assert sum(counts(carol["json"]).values()) == 0  # nothing was stored


def test_queued_jobs_count_with_their_bounds_and_the_disk_stays_under_the_bound(srv):
    carol = make_client("json", srv.base, auth=creds("carol"))
    bob = make_client("json", srv.base, auth=creds("bob"))
    # two 1000² matrices may take 8.1 MB each: both accepted at once, a third could pass
    first = carol.call("XDima", "startCreateDistanceMatrix", matrix(1000))["id"]
    second = carol.call("XDima", "startCreateDistanceMatrix", matrix(1000))["id"]
    refused(carol, "XDima", "startCreateDistanceMatrix", matrix(1000))
    for job in (first, second):
        assert wait_done(carol, job, timeout=120)["status"] == "SUCCEEDED"
    assert 10_000_000 < on_disk(srv) <= BOUND  # what they stored, on disk

    fault = refused(carol, "XDima", "startCreateDistanceMatrix", matrix(1000))
    stored = int(FIGURE.search(fault.message).group(1))  # now what the two stored, no bound
    assert on_disk(srv) <= stored < BOUND
    small = carol.call("XDemo", "startSimulate", {"steps": 1})["id"]  # 4 KiB more: room
    assert wait_done(carol, small)["status"] == "SUCCEEDED"

    other = bob.call("XDima", "startCreateDistanceMatrix", matrix(1000))["id"]  # unaffected
    assert wait_done(bob, other, timeout=120)["status"] == "SUCCEEDED"

    assert carol.call("XRuntime", "deleteJob", {"id": first})["status"] == "DELETED"
    again = carol.call("XDima", "startCreateDistanceMatrix", matrix(1000))["id"]  # room again
    assert wait_done(carol, again, timeout=120)["status"] == "SUCCEEDED"
    for job in (second, small, other, again):
        make_client("json", srv.base, auth=creds("root")).call("XRuntime", "deleteJob", {"id": job})


def test_a_result_past_the_bound_at_its_end_fails_its_job_and_is_not_stored(srv):
    carol = {binding: make_client(binding, srv.base, auth=creds("carol")) for binding in BINDINGS}
    before = on_disk(srv)
    # XOversized says 1000 bytes and returns 30 MB (22 MB stored): accepted, then refused at the end
    job = carol["json"].call("XOversized", "startGrow", {"size": 30_000_000})["id"]
    assert wait_done(carol["json"], job, timeout=120)["status"] == "FAILED"
    for binding, client in carol.items():
        with pytest.raises(RemoteFault) as caught:
            client.call("XOversized", "fetchGrowResponse", {"id": job})
        assert caught.value.type == "QuotaExceededFault", (binding, caught.value)
        assert "it would pass max_stored_bytes of 20000000; it was not stored" in (
            caught.value.message
        )
    assert on_disk(srv) <= before  # (files of jobs deleted before are swept meanwhile)
    small = carol["json"].call("XOversized", "startGrow", {"size": 500})["id"]  # under: stored
    assert wait_done(carol["json"], small)["status"] == "SUCCEEDED"
    assert len(carol["json"].call("XOversized", "fetchGrowResponse", {"id": small})["text"]) == 500

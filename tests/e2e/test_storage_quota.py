"""What a user may keep stored (docs/protocol.md §15; benchmarks/abuse.py, item 6),
through real HTTP to a real node: one XDima 2000² job stores some 28 MB (27.8 MB when it
was first measured); with ``max_stored_bytes`` below that, the job's owner is refused the
next start with a QuotaExceededFault in every binding's own form, nothing stored, while
another user still starts; once the owner deletes the job, starts are accepted again."""

import random
import re
import time

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client, wait_done
from tests.e2e.test_accounts import TOKENS, accounts_toml, counts, creds
from tests.harness import Server
from xruntime.operations import storage_quota

BOUND = 20_000_000  # carol's max_stored_bytes: below one 2000² matrix
STORED = re.compile(r"your stored jobs take (\d+) bytes, at or past max_stored_bytes of (\d+)")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    users = {"carol": {"max_stored_bytes": BOUND}, "bob": {}, "root": {"admin": True}}
    assert set(users) <= set(TOKENS)
    node = Server(
        str(tmp_path_factory.mktemp("quota")), extra=accounts_toml(users), auth=creds("root")
    ).start()
    yield node
    node.stop()


def matrix_request(size):
    rnd = random.Random(22)
    return {
        "startLocations": [
            {"longitude": rnd.uniform(5, 15), "latitude": rnd.uniform(47, 55)} for _ in range(size)
        ]
    }


def refused(client, service, operation, request):
    with pytest.raises(RemoteFault) as caught:
        client.call(service, operation, request)
    return caught.value


def test_past_max_stored_bytes_a_start_is_quota_exceeded_in_every_binding(srv):
    carol = {binding: make_client(binding, srv.base, auth=creds("carol")) for binding in BINDINGS}
    bob = make_client("json", srv.base, auth=creds("bob"))
    job = carol["json"].call("XDima", "startCreateDistanceMatrix", matrix_request(2000))["id"]
    assert wait_done(carol["json"], job, timeout=300)["status"] == "SUCCEEDED"
    # carol's figure measured before the job (under half the bound) stands for REUSE_S
    # (operations/storage_quota.py): the job now ends within it, so the next start would
    # be measured against that figure
    time.sleep(storage_quota.REUSE_S)

    figures = []
    for binding, client in carol.items():
        for service, operation, request in (
            ("XDima", "startCreateDistanceMatrix", matrix_request(10)),
            ("XDemo", "startSimulate", {"steps": 1}),
        ):
            fault = refused(client, service, operation, request)
            assert fault.type == "QuotaExceededFault", (binding, fault)
            found = STORED.search(fault.message)
            assert found, fault.message
            figures.append(int(found.group(1)))
            assert int(found.group(2)) == BOUND
            if binding == "json":
                assert fault.status == 429
            elif binding == "soap":
                assert fault.code.split(":")[-1] == "Client"
                assert "delete" in fault.fields["hint"]
            else:
                assert -32099 <= fault.code <= -32000
    stored = figures[0]
    assert set(figures) == {stored}  # nothing was stored by a refusal
    assert 20_000_000 < stored < 40_000_000, stored  # the 27.8 MB first measured, give or take
    print(f"\none XDima 2000² job stores {stored} bytes ({stored / 1e6:.1f} MB)")
    assert sum(counts(carol["json"]).values()) == 1  # carol's one job, and no other

    other = bob.call("XDemo", "startSimulate", {"steps": 1})["id"]  # another user: unaffected
    assert wait_done(bob, other)["status"] == "SUCCEEDED"

    assert carol["soap"].call("XRuntime", "deleteJob", {"id": job})["status"] == "DELETED"
    again = carol["jsonrpc"].call("XDemo", "startSimulate", {"steps": 1})["id"]
    assert wait_done(carol["json"], again)["status"] == "SUCCEEDED"

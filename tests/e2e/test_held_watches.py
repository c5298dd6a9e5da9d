"""Held watches bounded per user (issue 32; docs/protocol.md §14), through real HTTP
with accounts on and two users: alice's held watchJob/watchJobs calls past her
``max_held_watches`` (and the ids past her ``max_held_watched_ids``) answer
``QuotaExceededFault`` at once in JSON and JSON-RPC, while bob's watches are served as
usual; once her calls have ended, she watches again."""

import threading
import time

import pytest

from tests.clients import RemoteFault, make_client
from tests.harness import Server
from xruntime.operations.accounts import new_token, token_sha256

TOKENS = {"alice": new_token(), "bob": new_token(), "root": new_token()}
ALICE_CALLS, ALICE_IDS = 3, 50


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    extra = "\n[auth]\nrequired = true\n"
    extra += (
        f'\n[users.alice]\ntoken_sha256 = "{token_sha256(TOKENS["alice"])}"\n'
        f"max_held_watches = {ALICE_CALLS}\nmax_held_watched_ids = {ALICE_IDS}\n"
    )
    extra += f'\n[users.bob]\ntoken_sha256 = "{token_sha256(TOKENS["bob"])}"\n'
    extra += f'\n[users.root]\ntoken_sha256 = "{token_sha256(TOKENS["root"])}"\nadmin = true\n'
    srv = Server(
        str(tmp_path_factory.mktemp("node")),
        extra=extra,
        server_keys={"processes": 1},  # the bounds count per HTTP process
        auth=("root", TOKENS["root"]),  # /metrics (wait_held) is an admin's
    ).start()
    yield srv
    srv.stop()


def client(node, user, binding="json"):
    return make_client(binding, node.base, auth=(user, TOKENS[user]))


def long_job(json_client):
    return json_client.call("XDemo", "startSimulate", {"durationMs": 600_000})["id"]


def held_for(node, user, job_id, maximum_ms):
    """A watchJob of ``user`` held in a thread: (the thread, a list receiving its answer)."""
    got = []

    def run():
        got.append(
            client(node, user).call(
                "XRuntime",
                "watchJob",
                {
                    "id": job_id,
                    "progressUpdatePeriod": maximum_ms,
                    "maximumPollingPeriod": maximum_ms,
                },
            )
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def refused(call):
    started = time.monotonic()
    with pytest.raises(RemoteFault) as caught:
        call()
    return caught.value, time.monotonic() - started


def test_alice_past_her_held_watches_is_refused_while_bob_is_served(node):
    alice, bob = client(node, "alice"), client(node, "bob")
    # bob's job runs before hers start, and then stays as it is (one step of 600 s, no
    # progress): his watch below has no change to answer before its maximum period.
    # Started after hers, his job could take the second worker by fair shares at any
    # moment, during that watch too, which then rightly answers at its update period.
    bobs = long_job(bob)
    node.wait_status(bobs, "RUNNING")
    mine = [long_job(alice) for _ in range(2)]
    held = [held_for(node, "alice", mine[i % 2], 4000) for i in range(ALICE_CALLS)]
    node.wait_held(ALICE_CALLS)
    for binding in ("json", "jsonrpc"):
        fault, took = refused(
            lambda b=binding: client(node, "alice", b).call(
                "XRuntime", "watchJob", {"id": mine[0], "maximumPollingPeriod": 50_000}
            )
        )
        assert fault.type == "QuotaExceededFault", (binding, fault)
        assert f"max_held_watches = {ALICE_CALLS}" in fault.message, fault
        assert fault.fields.get("hint"), fault.fields
        assert took < 5, "answered at once, not held"
    fault, _ = refused(lambda: alice.call("XRuntime", "watchJobs", {"ids": mine}))
    assert fault.type == "QuotaExceededFault"
    if fault.status is not None:
        assert fault.status == 429
    # bob's watches are served meanwhile, held to their period as usual
    started = time.monotonic()
    job = bob.call(
        "XRuntime",
        "watchJob",
        {"id": bobs, "progressUpdatePeriod": 250, "maximumPollingPeriod": 500},
    )
    assert job["status"] in ("QUEUING", "RUNNING") and time.monotonic() - started >= 0.5
    answer = bob.call("XRuntime", "watchJobs", {"ids": [bobs], "maximumPollingPeriod": 250})
    assert [j["id"] for j in answer["jobs"]] == [bobs]
    # her calls end at their maximumPollingPeriod; then she watches again
    for thread, got in held:
        thread.join(30)
        assert got and got[0]["status"] in ("QUEUING", "RUNNING")
    job = alice.call("XRuntime", "watchJob", {"id": mine[0], "maximumPollingPeriod": 250})
    assert job["id"] == mine[0]
    for job_id in mine:
        alice.call("XRuntime", "deleteJob", {"id": job_id})
    bob.call("XRuntime", "deleteJob", {"id": bobs})


def test_alice_past_her_held_ids_is_refused_while_bob_watches_as_many(node):
    alice, bob = client(node, "alice"), client(node, "bob")
    too_many = [f"no-such-job-{i}" for i in range(ALICE_IDS + 1)]
    fault, took = refused(lambda: alice.call("XRuntime", "watchJobs", {"ids": too_many}))
    assert fault.type == "QuotaExceededFault", fault
    assert f"max_held_watched_ids = {ALICE_IDS}" in fault.message and took < 5
    answer = bob.call("XRuntime", "watchJobs", {"ids": too_many})  # bob: [server]'s 100 000
    assert len(answer["jobs"]) == ALICE_IDS + 1
    assert {j["status"] for j in answer["jobs"]} == {"UNKNOWN"}
    answer = alice.call("XRuntime", "watchJobs", {"ids": too_many[:ALICE_IDS]})
    assert len(answer["jobs"]) == ALICE_IDS

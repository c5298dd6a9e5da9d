"""A full disk fails the job that needs the room, not the node (issue 32;
docs/operations.md, "A full disk"), through real HTTP with accounts on and two users,
on a node whose SQLite database (and its result files) sits on a small tmpfs:

* alice's job whose result finds no room fails at once with ``InternalErrorFault``
  naming the cause, logged once; its partial file is gone, and bob's jobs run on;
* while the room left is under ``[database] min_free_bytes`` every start is refused
  with ``TemporarilyUnavailableFault`` in each binding's own form, and ``/readyz``
  (no login) answers 503 saying why; once alice deletes her jobs, the node is ready
  and starts again.

Root only: it mounts the tmpfs (and unmounts it after)."""

import os
import shutil
import subprocess
import time

import pytest
import requests

from tests.clients import BINDINGS, RemoteFault, make_client, start, wait_done
from tests.e2e.test_accounts import accounts_toml, creds
from tests.harness import Server

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts a tmpfs: root only"
)

MIB = 1 << 20
DISK = 48 * MIB
FLOOR = 6 * MIB


@pytest.fixture(scope="module")
def disk(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("disk"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK},mode=0700", "tmpfs", path], check=True
    )
    yield path
    subprocess.run(["umount", "-l", path], check=False)


@pytest.fixture(scope="module")
def node(tmp_path_factory, disk):
    srv = Server(
        str(tmp_path_factory.mktemp("node")),
        database_url=f"sqlite:///{disk}/xruntime.db",
        database_keys={"min_free_bytes": FLOOR},
        extra=accounts_toml({"alice": {}, "bob": {}, "root": {"admin": True}}),
        auth=creds("root"),
        env={"XRUNTIME_SERVICE_MODULES": "tests.fixtures.oversized"},
    ).start()
    yield srv
    srv.stop()


def free(disk):
    found = os.statvfs(disk)
    return found.f_bavail * found.f_frsize


def user(node, name, binding="json"):
    return make_client(binding, node.base, auth=creds(name))


def grow(client, size):
    """Start a job whose result is ``size`` bytes of random text; its id."""
    return client.call("XOversized", "startGrow", {"size": size})["id"]


def grown(client, size):
    job_id = grow(client, size)
    assert wait_done(client, job_id)["status"] == "SUCCEEDED"
    return job_id


def readyz(node):
    answer = requests.get(node.base + "/readyz", timeout=10)  # no credentials
    return answer.status_code, answer.json()


def test_a_result_with_no_room_fails_its_job_and_bob_runs_on(node, disk):
    alice, bob = user(node, "alice"), user(node, "bob")
    while free(disk) > 16 * MIB:  # alice fills the disk with results she keeps
        grown(alice, 8 * MIB)
    room = free(disk)
    assert room >= FLOOR  # starts are still accepted
    assert readyz(node)[0] == 200, readyz(node)
    before = [start(bob, durationMs=0)["id"] for _ in range(3)]
    # random base64 stores at 3/4 of its size at best: twice the room cannot fit
    big = grow(alice, 2 * room)
    after = [start(bob, durationMs=0)["id"] for _ in range(3)]
    assert wait_done(alice, big)["status"] == "FAILED"
    with pytest.raises(RemoteFault) as caught:
        alice.call("XOversized", "fetchGrowResponse", {"id": big})
    assert caught.value.type == "InternalErrorFault", caught.value
    assert "no room for this job's result" in caught.value.message
    assert "No space left on device" in caught.value.message
    for job_id in before + after:
        assert wait_done(bob, job_id)["status"] == "SUCCEEDED"
    assert free(disk) >= room - MIB  # the partial result is gone with its job
    assert node.log().count(f"job {big}: no room for its result") == 1
    # alice's next results, and bob's, are stored as before
    grown(alice, MIB)
    assert wait_done(bob, start(bob, durationMs=0)["id"])["status"] == "SUCCEEDED"


def test_under_the_floor_starts_wait_and_readyz_says_why(node, disk):
    alice = user(node, "alice")
    while free(disk) >= FLOOR:  # each result leaves less room, down to under the floor
        job_id = grow(alice, max(0, free(disk) - FLOOR // 2))
        wait_done(alice, job_id)  # (it may find no room: it fails, and the loop goes on)
    status, body = readyz(node)
    assert status == 503 and body["ready"] is False, body
    (check,) = [check for check in body["checks"] if not check["ok"]]
    assert check["name"] == "disk"
    assert "min_free_bytes" in check["detail"]
    for binding in BINDINGS:
        with pytest.raises(RemoteFault) as caught:
            start(user(node, "bob", binding), durationMs=0)
        assert caught.value.type == "TemporarilyUnavailableFault", caught.value
        assert "min_free_bytes" in caught.value.message
    # alice deletes what she keeps: the node sweeps the files and is ready again
    listed = alice.call("XRuntime", "listJobs", {"limit": 1000})
    for job in listed.get("jobs", []):
        alice.call("XRuntime", "deleteJob", {"id": job["id"]})
    deadline = time.monotonic() + 60
    while readyz(node)[0] != 200:
        assert time.monotonic() < deadline, readyz(node)
        time.sleep(0.2)
    bob = user(node, "bob")
    assert wait_done(bob, start(bob, durationMs=0)["id"])["status"] == "SUCCEEDED"

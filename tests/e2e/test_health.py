"""``/healthz`` and ``/readyz`` for a load balancer (issue 33; docs/operations.md,
"Health checks"), through real HTTP on a node with accounts on: both answer without
credentials and tell nothing of anyone's jobs; ``/readyz`` is 200 once the workers are
up, each check named; other methods answer 405.  The store's check against a stopped
PostgreSQL is in test_store_outage.py, the disk's in test_full_disk.py."""

import time

import pytest
import requests

from tests.e2e.test_accounts import accounts_toml, creds
from tests.harness import Server


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("health")),
        extra=accounts_toml({"alice": {}, "root": {"admin": True}}),
        auth=creds("root"),
    ).start()
    yield srv
    srv.stop()


def ready(node, timeout=60):
    """Wait until /readyz answers 200; its body."""
    deadline = time.monotonic() + timeout
    while True:
        answer = requests.get(node.base + "/readyz", timeout=10)
        if answer.status_code == 200:
            return answer
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.1)


def test_healthz_answers_without_credentials(node):
    answer = requests.get(node.base + "/healthz", timeout=10)
    assert answer.status_code == 200 and answer.text == "ok\n"
    assert answer.headers["cache-control"] == "no-store"
    refused = requests.post(node.base + "/services/rs/XRuntime/listJobs", json={}, timeout=10)
    assert refused.status_code == 401  # (the node's calls still need them)


def test_readyz_names_each_check_and_passes_once_the_workers_are_up(node):
    answer = ready(node)
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["ready"] is True
    assert [check["name"] for check in body["checks"]] == ["store", "workers", "node", "disk"]
    assert all(check["ok"] for check in body["checks"]), body
    details = {check["name"]: check["detail"] for check in body["checks"]}
    assert details["workers"] == "2 of 2 worker processes up"
    assert details["store"] == "the database answers"
    assert "bytes free (floor: 268435456)" in details["disk"]
    assert "alice" not in answer.text and "root" not in answer.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_other_methods_answer_405(node, path):
    answer = requests.post(node.base + path, data=b"x", timeout=10)
    assert answer.status_code == 405 and answer.headers["allow"] == "GET, HEAD"

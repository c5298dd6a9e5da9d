"""Poison callback URLs refused at the start (issue 32; docs/protocol.md §14), through
real HTTP with accounts on: URLs http.client cannot send as written (non-ASCII, a space,
CR/LF), dot segments and encoded slashes under a URL prefix listed, and IPv6 literals
carrying a loopback address, are ``InvalidValueFault { parameter: "callback.url" }`` in
every binding, and nothing is stored: listJobs shows no job, the receiver gets nothing,
while a good URL under the same prefix is called."""

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client
from tests.harness import Server
from tests.receiver import Receiver
from xruntime.operations.accounts import new_token, token_sha256

SECRET = "whsec_" + "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleQ=="
TOKENS = {"alice": new_token(), "bob": new_token()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    receiver = Receiver()
    prefix = f"http://127.0.0.1:{receiver.port}/xr/"
    # the receiver's prefix, and the IPv6 networks that carry IPv4 addresses: none of
    # them holds 127.0.0.1 itself, so loopback is reachable through the prefix alone
    allowed = [prefix, "64:ff9b::/96", "2002::/16", "::ffff:0:0:0/96", "::ffff:0:0/96", "::/0"]
    extra = "\n[auth]\nrequired = true\n"
    for name, token in TOKENS.items():
        extra += (
            f'\n[users.{name}]\ntoken_sha256 = "{token_sha256(token)}"\n'
            f'callback_secret = "{SECRET}"\n'
        )
    extra += "\n[callbacks]\nallowed = [" + ", ".join(f'"{a}"' for a in allowed) + "]\n"
    srv = Server(
        str(tmp_path_factory.mktemp("node")), extra=extra, auth=("alice", TOKENS["alice"])
    ).start()
    yield srv, receiver
    srv.stop()
    receiver.stop()


def poison(port):
    base = f"http://127.0.0.1:{port}"
    return [
        f"{base}/xr/été",
        f"{base}/xr/a b",
        f"{base}/xr/a\r\nX-Injected: 1",
        f"{base}/xr/../admin/secret",
        f"{base}/xr/%2e%2e/admin",
        f"{base}/xr/%2E%2E/admin",
        f"{base}/xr/..%2fadmin",
        f"{base}/xr/./hook",
        f"{base}/xr/..;/admin",
        f"http://[64:ff9b::7f00:1]:{port}/xr/hook",
        f"http://[2002:7f00:1::]:{port}/xr/hook",
        f"http://[::ffff:0:7f00:1]:{port}/xr/hook",
        f"http://[::ffff:127.0.0.1]:{port}/xr/hook",
        f"http://[::127.0.0.1]:{port}/xr/hook",
    ]


def listed(srv):
    return srv.call("XRuntime", "listJobs", {}).get("jobs", [])


def test_poison_urls_are_refused_at_the_start_in_json_and_nothing_is_stored(setup):
    srv, receiver = setup
    before, received = listed(srv), len(receiver.received)
    for url in poison(receiver.port):
        r = srv.post("XDemo", "startSimulate", {"callback": {"url": url}})
        assert r.status_code == 400, (url, r.text)
        fault = r.json()
        assert fault["faultInfo"]["$type"] == "InvalidValueFault", fault
        assert fault["faultInfo"]["parameter"] == "callback.url", fault
        assert fault["message"].startswith("invalid value for callback.url: "), fault
        assert "\r" not in fault["message"] and "\n" not in fault["message"]
    assert listed(srv) == before
    assert len(receiver.received) == received
    log = srv.log()
    assert "Traceback" not in log and "X-Injected" not in log


@pytest.mark.parametrize("binding", BINDINGS)
def test_poison_urls_are_invalid_value_in_each_binding(setup, binding):
    srv, receiver = setup
    client = make_client(binding, srv.base, auth=("bob", TOKENS["bob"]))
    base = f"http://127.0.0.1:{receiver.port}"
    for url in (
        f"{base}/xr/été",
        f"{base}/xr/a b",
        f"{base}/xr/a\r\nX-Injected: 1",
        f"{base}/xr/../admin/secret",
        f"{base}/xr/..%2fadmin",
        f"http://[64:ff9b::7f00:1]:{receiver.port}/xr/hook",
    ):
        with pytest.raises(RemoteFault) as caught:
            client.call("XDemo", "startSimulate", {"callback": {"url": url}})
        assert caught.value.type == "InvalidValueFault", (binding, url, caught.value)
        assert caught.value.fields["parameter"] == "callback.url", (binding, url)
    bobs = make_client("json", srv.base, auth=("bob", TOKENS["bob"]))
    assert bobs.call("XRuntime", "listJobs", {}).get("jobs", []) == []


def test_a_good_url_under_the_prefix_is_still_called(setup):
    srv, receiver = setup
    path = "/xr/%C3%A9t%C3%A9/hook?next=%2F..%2Fx"
    job_id = srv.start_job(callback={"url": f"http://127.0.0.1:{receiver.port}{path}"})["id"]
    got = receiver.wait_for(lambda rs: any(r.data["id"] == job_id for r in rs))
    assert [r.path for r in got if r.data["id"] == job_id] == [path]  # sent as written
    assert job_id in [j["id"] for j in listed(srv)]

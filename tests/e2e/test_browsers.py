"""What a web page in someone's browser may make a node do (docs/protocol.md §15;
benchmarks/abuse.py, item 8), through real HTTP against real nodes, and in a real browser.

Measured before: on a node with accounts off (the default), a ``text/plain`` or form
body with ``Origin: https://evil.example`` started a job (200), and any ``Host`` was
served (DNS rebinding)."""

import hashlib
import http.server
import os
import threading
import time

import pytest
import requests

from tests.e2e.test_config_reload import rewrite
from tests.e2e.test_status_page import browser  # noqa: F401  (the fixture)
from tests.harness import Server, write_config

ALLOWED_ORIGIN = "https://app.example"
ALIAS = "xr.example.org"
EVIL = "https://evil.example"
START = {"durationMs": 0, "steps": 1}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """The default: accounts off, no origin or host name listed."""
    srv = Server(str(tmp_path_factory.mktemp("browsers"))).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    """A node whose file lists one other origin and one host name."""
    srv = Server(
        str(tmp_path_factory.mktemp("listing")),
        server_keys={
            "allowed_origins": [ALLOWED_ORIGIN],
            "allowed_hosts": [ALIAS, ".corp.example"],
        },
    ).start()
    yield srv
    srv.stop()


def stored(srv) -> int:
    """How many jobs the node holds."""
    return len(srv.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs") or [])


def post(srv, body, headers, service="XDemo", operation="startSimulate", binding="rs"):
    path = f"/services/{binding}/{service}" + (f"/{operation}" if binding == "rs" else "")
    return requests.post(srv.base + path, data=body, headers=headers, timeout=30)


def fault_type(r) -> str:
    return r.json()["faultInfo"]["$type"]


# ------------------------------------------------------------------ content types


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ],
)
def test_bodies_a_page_may_send_anywhere_start_nothing(node, content_type):
    before = stored(node)
    r = post(node, b'{"durationMs": 0, "steps": 1}', {"Content-Type": content_type})
    assert r.status_code == 400 and fault_type(r) == "InvalidRequestFault", r.text
    assert (
        "is not JSON" in r.json()["message"] and "application/json" in r.json()["faultInfo"]["hint"]
    )
    assert stored(node) == before


def test_jsonrpc_refuses_a_text_plain_body(node):
    before = stored(node)
    r = post(
        node,
        b'{"jsonrpc": "2.0", "id": 1, "method": "startSimulate", "params": {}}',
        {"Content-Type": "text/plain"},
        binding="rpc",
    )
    assert (
        r.json()["error"]["code"] == -32600
        and r.json()["error"]["data"]["$type"] == "InvalidRequestFault"
    )
    assert stored(node) == before


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "application/vnd.api+json", None],
)
def test_json_content_types_and_none_are_served(node, content_type):
    r = post(
        node,
        b'{"durationMs": 0, "steps": 1}',
        {"Content-Type": content_type} if content_type else {},
    )
    assert r.status_code == 200 and r.json()["status"] == "QUEUING", r.text


# ------------------------------------------------------------------ Origin


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/json"]
)
def test_the_measured_cross_origin_start_is_refused(node, content_type):
    """The probe's request: started a job before."""
    before = stored(node)
    r = post(node, b'{"durationMs": 0, "steps": 1}', {"Content-Type": content_type, "Origin": EVIL})
    assert r.status_code == 403 and fault_type(r) == "AccessDeniedFault", r.text
    assert EVIL in r.json()["message"] and "allowed_origins" in r.json()["faultInfo"]["hint"]
    assert "access-control-allow-origin" not in {k.lower() for k in r.headers}
    assert stored(node) == before


@pytest.mark.parametrize("binding", ["ws", "rpc"])
def test_other_bindings_refuse_another_origin_in_their_form(node, binding):
    before = stored(node)
    if binding == "ws":
        r = requests.post(
            f"{node.base}/services/ws/XRuntime",
            data=b"<x/>",
            timeout=30,
            headers={"Content-Type": "text/xml", "Origin": "null"},
        )
        assert (
            r.status_code == 500
            and b"AccessDeniedFault" in r.content
            and b"faultstring" in r.content
        )
    else:
        r = post(
            node,
            b'{"jsonrpc": "2.0", "id": 1, "method": "startSimulate", "params": {}}',
            {"Content-Type": "application/json", "Origin": EVIL},
            binding="rpc",
        )
        assert r.json()["error"]["data"]["$type"] == "AccessDeniedFault"
    assert stored(node) == before


@pytest.mark.parametrize("origin", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_the_nodes_own_origin_is_served(node, origin):
    """The node's own pages (a same-origin fetch): Origin equals the Host called."""
    host = origin.split("//")[1].format(port=node.port)
    r = requests.post(
        f"http://{host}/services/rs/XDemo/startSimulate",
        json=START,
        timeout=30,
        headers={"Origin": origin.format(port=node.port)},
    )
    assert r.status_code == 200, r.text


def test_another_port_is_another_origin(node):
    r = requests.post(
        node.url("XDemo", "startSimulate"),
        json=START,
        timeout=30,
        headers={"Origin": f"http://127.0.0.1:{node.port + 1}"},
    )
    assert r.status_code == 403


def test_a_listed_origin_gets_cors_headers_and_its_preflight(listing):
    pre = requests.options(
        listing.url("XDemo", "startSimulate"),
        timeout=30,
        headers={
            "Origin": ALLOWED_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert pre.status_code == 204
    assert pre.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert "content-type" in pre.headers["Access-Control-Allow-Headers"]
    assert "Access-Control-Allow-Credentials" not in pre.headers
    r = requests.post(
        listing.url("XDemo", "startSimulate"),
        json=START,
        timeout=30,
        headers={"Origin": ALLOWED_ORIGIN},
    )
    assert r.status_code == 200 and r.json()["status"] == "QUEUING"
    assert (
        r.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN and r.headers["Vary"] == "Origin"
    )
    other = requests.options(
        listing.url("XDemo", "startSimulate"),
        timeout=30,
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 403 and "Access-Control-Allow-Origin" not in other.headers


# ------------------------------------------------------------------ Host (DNS rebinding)


@pytest.mark.parametrize(
    "host", ["evil.example:{port}", "evil.example", "127.0.0.1.nip.example:{port}"]
)
def test_a_rebound_name_is_not_served(node, host):
    """A page's own name made to resolve to 127.0.0.1: same origin for the browser."""
    name = host.format(port=node.port)
    before = stored(node)
    r = requests.post(
        node.url("XDemo", "startSimulate"),
        json=START,
        timeout=30,
        headers={"Host": name, "Origin": f"http://{name}"},
    )
    assert r.status_code == 400 and fault_type(r) == "InvalidRequestFault", r.text
    assert "does not serve the host name" in r.json()["message"]
    assert "allowed_hosts" in r.json()["faultInfo"]["hint"]
    status = requests.get(f"{node.base}/status.json", headers={"Host": name}, timeout=30)
    assert status.status_code == 400
    assert stored(node) == before


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "127.0.0.1",
        "xr.localhost:{port}",
        "{hostname}:{port}",
    ],
)
def test_addresses_localhost_and_the_machines_name_are_served(node, host):
    name = host.format(port=node.port, hostname=os.uname().nodename)
    r = requests.post(
        node.url("XRuntime", "getRuntimeInformation"), json={}, timeout=30, headers={"Host": name}
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("host", [ALIAS, "a.corp.example", "corp.example"])
def test_listed_names_are_served(listing, host):
    r = requests.post(
        listing.url("XRuntime", "getRuntimeInformation"),
        json={},
        timeout=30,
        headers={"Host": f"{host}:{listing.port}"},
    )
    assert r.status_code == 200, r.text
    refused = requests.post(
        listing.url("XRuntime", "getRuntimeInformation"),
        json={},
        timeout=30,
        headers={"Host": f"{host}.evil.example:{listing.port}"},
    )
    assert refused.status_code == 400


def test_with_accounts_on_any_name_is_served_to_credentials(tmp_path):
    """A page has no token to send: with accounts on, the Host list is not needed."""
    token = "t0ken-of-alice"
    srv = Server(
        str(tmp_path / "accounts"),
        extra=f"""
        [auth]
        required = true
        [users.alice]
        token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"
        """,
        auth=("alice", token),
    ).start()
    try:
        url, host = (
            srv.url("XRuntime", "getRuntimeInformation"),
            {"Host": f"evil.example:{srv.port}"},
        )
        assert requests.post(url, json={}, headers=host, timeout=30).status_code == 401
        r = requests.post(url, json={}, headers=host, auth=("alice", token), timeout=30)
        assert r.status_code == 200, r.text
    finally:
        srv.stop()


def test_an_edit_of_the_lists_is_read_without_restart(tmp_path):
    srv = Server(str(tmp_path / "reload")).start()
    try:
        headers = {"Origin": ALLOWED_ORIGIN}
        url = srv.url("XRuntime", "getRuntimeInformation")
        assert requests.post(url, json={}, headers=headers, timeout=30).status_code == 403
        rewrite(
            srv,
            open(
                write_config(
                    os.path.join(srv.folder, "edit"),
                    srv.port,
                    server_keys={"allowed_origins": [ALLOWED_ORIGIN]},
                )
            ).read(),
        )
        deadline = time.monotonic() + 30  # every HTTP process reads the edit
        while any(
            requests.post(url, json={}, headers=headers, timeout=30).status_code != 200
            for _ in range(6)
        ):
            assert time.monotonic() < deadline, "the listed origin was still refused after 30 s"
            time.sleep(0.1)
    finally:
        srv.stop()


# ------------------------------------------------------------------ a real browser

PAGE = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" target="sink"
      action="{node}/services/rs/XDemo/startSimulate">
<input name='{{"durationMs": 0, "steps": 1, "x": "' value='"}}'></form>
<iframe name="sink"></iframe>
<script>
window.outcome = {{}};
document.getElementById("f").submit();
fetch("{node}/services/rs/XDemo/startSimulate", {{method: "POST", mode: "no-cors",
      body: '{{"durationMs": 0, "steps": 1}}'}}).then(() => window.outcome.noCors = "sent",
      e => window.outcome.noCors = "error");
fetch("{node}/services/rs/XDemo/startSimulate", {{method: "POST",
      headers: {{"Content-Type": "application/json"}}, body: '{{"durationMs": 0, "steps": 1}}'}})
  .then(r => r.json()).then(j => window.outcome.json = j.status || j.message,
                             e => window.outcome.json = "blocked");
</script></body></html>"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.server.page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve_page(node_base):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    server.page = PAGE.format(node=node_base)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_page_of_another_origin_starts_nothing_and_a_listed_one_reads_answers(browser, tmp_path):  # noqa: F811
    """A web page of another origin (another port of 127.0.0.1) posts a text/plain
    form, a no-cors fetch and a JSON fetch to the node: nothing is started. Listed in
    allowed_origins, the same page's JSON fetch passes its preflight and reads the job."""
    evil, evil_origin = serve_page("http://127.0.0.1:{port}")
    good, good_origin = serve_page("http://127.0.0.1:{port}")
    srv = Server(str(tmp_path / "page"), server_keys={"allowed_origins": [good_origin]})
    try:
        evil.page, good.page = (s.page.replace("{port}", str(srv.port)) for s in (evil, good))
        srv.start()
        browser.get(evil_origin + "/")
        deadline = time.monotonic() + 30
        while browser.execute_script("return window.outcome.noCors && window.outcome.json") is None:
            assert time.monotonic() < deadline, browser.execute_script("return window.outcome")
            time.sleep(0.1)
        assert browser.execute_script("return window.outcome.json") == "blocked"
        while "refused POST /services/rs/XDemo/startSimulate" not in srv.log():
            assert time.monotonic() < deadline, "the node saw no request of the page"
            time.sleep(0.1)
        assert stored(srv) == 0
        browser.get(good_origin + "/")
        while browser.execute_script("return window.outcome.json") is None:
            assert time.monotonic() < deadline, browser.execute_script("return window.outcome")
            time.sleep(0.1)
        assert browser.execute_script("return window.outcome.json") == "QUEUING"
    finally:
        srv.stop()
        evil.shutdown()
        good.shutdown()

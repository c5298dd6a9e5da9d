"""The OpenAPI document of the JSON binding as nodes serve it (issue 34,
docs/json-binding.md "The OpenAPI document"): with the shipped file's settings it is
``wsdl/openapi.json`` byte for byte (which tests/e2e/test_wsdl.py keeps equal to what
``xruntime wsdl --out`` writes); it validates; it is public exactly when the WSDLs are;
every operation of every served service has its path (a service of
``XRUNTIME_SERVICE_MODULES`` too; the entry points' in tests/e2e/test_outside_services.py),
a disabled service's have none; and a live edit of the settings it states is in it."""

import json
import os
import time

import pytest
import requests
from openapi_spec_validator import validate

from tests.harness import ROOT, Server, default_config, free_port, write_config
from xruntime.operations.accounts import new_token, token_sha256

DOCUMENT = "/services/rs/openapi.json"
KEPT = os.path.join(ROOT, "wsdl", "openapi.json")
TOKEN = new_token()
CHALLENGE = 'Basic realm="xruntime"'


def get(node, path=DOCUMENT, **kwargs):
    return requests.get(node.base + path, timeout=10, **kwargs)


def document(node, **kwargs):
    r = get(node, **kwargs)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Content-Type"] == "application/json; charset=utf-8"
    return r.json()


def accounts(public_wsdl=None):
    """[auth] on, and alice."""
    text = "\n[auth]\nrequired = true\n"
    if public_wsdl is not None:
        text += f"public_wsdl = {json.dumps(public_wsdl)}\n"
    return text + f'\n[users.alice]\ntoken_sha256 = "{token_sha256(TOKEN)}"\n'


def served_operations(node, auth=None):
    """{(service, operation)} as getRuntimeInformation lists them."""
    r = requests.post(
        f"{node.base}/services/rs/XRuntime/getRuntimeInformation",
        json={"withJobCounts": False},
        auth=auth,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    return {(s["name"], op) for s in r.json()["services"] for op in s["operations"]}


def paths_of(doc):
    """{(service, operation)} of the document's paths, each a POST."""
    found = set()
    for path, item in doc["paths"].items():
        assert list(item) == ["post"], path
        prefix, service, operation = path.rsplit("/", 2)
        assert prefix == "/services/rs"
        assert item["post"]["tags"] == [service]
        found.add((service, operation))
    return found


# --------------------------------------------------------------------------- the kept file


@pytest.fixture(scope="module")
def shipped_node(tmp_path_factory):
    """A node on a copy of config/xserver.toml (its port and database aside) serving
    the shipped services only."""
    folder = str(tmp_path_factory.mktemp("shipped"))
    srv = Server(
        folder, config=default_config(folder, free_port()), env={"XRUNTIME_SERVICE_MODULES": ""}
    ).start()
    yield srv
    srv.stop()


def test_served_with_the_shipped_settings_it_is_the_kept_file(shipped_node):
    r = get(shipped_node)
    assert r.status_code == 200
    with open(KEPT, "rb") as f:
        assert r.content == f.read(), (
            "wsdl/openapi.json is not what a node serves; regenerate it with "
            "`python -m xruntime wsdl --out wsdl`"
        )
    head = requests.head(shipped_node.base + DOCUMENT, timeout=10)
    assert head.status_code == 200 and head.content == b""


def test_it_validates(shipped_node, server):
    """The shipped services' document, and the one of a node with XCrashy
    (``XRUNTIME_SERVICE_MODULES``, conftest's node)."""
    for node in (shipped_node, server):
        validate(document(node))


def test_the_documents_statements(shipped_node):
    """What the document says, as the node does it: read back from the served one."""
    doc = document(shipped_node)
    assert doc["openapi"] == "3.0.3"
    schemas = doc["components"]["schemas"]
    ops = {item["post"]["operationId"]: item["post"] for item in doc["paths"].values()}
    assert len(ops) == len(doc["paths"])  # unique
    watch_jobs = ops["watchJobs"]
    # a body is required only where the request has a required field
    assert watch_jobs["requestBody"]["required"] is True
    assert ops["getRuntimeInformation"]["requestBody"]["required"] is False
    assert ops["startSimulate"]["requestBody"]["required"] is False
    # the bounds the WSDL cannot state, from the settings in force
    ids = schemas["WatchJobsRequest"]
    assert ids["required"] == ["ids"] and ids["properties"]["ids"]["maxItems"] == 1000
    assert schemas["Timeouts"]["properties"]["computationTimeout"]["maximum"] == 7 * 86_400_000
    # every fault status, each with the Fault schema; Retry-After with 503
    for op in ops.values():
        assert set(op["responses"]) == {
            "200", "400", "401", "403", "404", "409", "429", "500", "503", "504"
        }  # fmt: skip
        assert op["responses"]["503"]["headers"]["Retry-After"]["schema"] == {"type": "integer"}
    # $type: a discriminated oneOf where a type has subtypes, required in each subtype
    progress = schemas["Job"]["properties"]["progress"]
    assert progress["discriminator"]["propertyName"] == "$type"
    assert (
        progress["discriminator"]["mapping"]["BulkProgress"] == "#/components/schemas/BulkProgress"
    )
    assert "$type" in schemas["BulkProgress"]["required"]
    assert "$type" not in schemas["Job"]["properties"]  # (a body carries none)


# --------------------------------------------------------------------------- every operation


def test_every_served_operation_has_its_path(server):
    """Conftest's node serves XCrashy besides the shipped services: each operation
    getRuntimeInformation lists has its path, and no other path is there."""
    doc = document(server)
    operations = served_operations(server)
    assert ("XCrashy", "startCrash") in operations
    assert paths_of(doc) == operations
    assert "CrashRequest" in doc["components"]["schemas"]


# ------------------------------------------------------------ public when the WSDLs are


@pytest.fixture(scope="module")
def private_node(tmp_path_factory):
    """Accounts on, ``public_wsdl = false``."""
    srv = Server(
        str(tmp_path_factory.mktemp("private")),
        workers=1,
        extra=accounts(public_wsdl=False),
        env={"XRUNTIME_SERVICE_MODULES": ""},
        auth=("alice", TOKEN),
    ).start()
    yield srv
    srv.stop()


def test_private_when_the_wsdls_are(private_node):
    wsdl = get(private_node, "/services/ws/XDemo?wsdl")
    refused = get(private_node)
    assert wsdl.status_code == refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == CHALLENGE
    assert refused.json()["faultInfo"]["$type"] == "AccessDeniedFault"
    assert get(private_node, auth=("alice", "wrong")).status_code == 401
    for kwargs in ({"auth": ("alice", TOKEN)}, {"headers": {"Authorization": f"Bearer {TOKEN}"}}):
        assert get(private_node, "/services/ws/XDemo?wsdl", **kwargs).status_code == 200
        with open(KEPT, "rb") as f:
            assert get(private_node, **kwargs).content == f.read()


@pytest.fixture(scope="module")
def public_node(tmp_path_factory):
    """Accounts on, ``public_wsdl`` as shipped (true), XDemo switched off."""
    srv = Server(
        str(tmp_path_factory.mktemp("public")),
        workers=1,
        extra=accounts() + "\n[services.XDemo]\nenabled = false\n",
        env={"XRUNTIME_SERVICE_MODULES": ""},
        auth=("alice", TOKEN),
    ).start()
    yield srv
    srv.stop()


def test_public_when_the_wsdls_are_and_the_operations_are_not(public_node):
    assert get(public_node, "/services/ws/XRuntime?wsdl").status_code == 200
    validate(document(public_node))  # without credentials
    call = requests.post(
        f"{public_node.base}/services/rs/XRuntime/getRuntimeInformation", json={}, timeout=10
    )
    assert call.status_code == 401 and call.headers["WWW-Authenticate"] == CHALLENGE
    # another path under /services/rs is no document, and not public
    assert get(public_node, "/services/rs/openapi.yaml").status_code == 401


def test_a_disabled_service_has_no_paths(public_node):
    doc = document(public_node)
    operations = served_operations(public_node, auth=("alice", TOKEN))
    assert not {s for s, _ in operations} & {"XDemo"}
    assert paths_of(doc) == operations
    assert "SimulateRequest" not in doc["components"]["schemas"]  # nor its types
    assert "XRuntime" in {tag["name"] for tag in doc["tags"]}
    assert "XDemo" not in {tag["name"] for tag in doc["tags"]}


def test_a_live_edit_is_in_the_document(public_node):
    """XDemo switched on, ``max_watched_ids`` and ``max_request_timeout`` changed in the
    file: the served document follows (it is made once per set of what it states)."""
    path = write_config(
        os.path.join(public_node.folder, "edit"),
        public_node.port,
        workers=public_node.workers,
        server_keys={"max_watched_ids": 7},
        extra=accounts() + '\n[jobs]\nmax_request_timeout = "1h"\n',
    )
    os.replace(path, public_node.config)
    deadline = time.monotonic() + 30
    while True:
        doc = document(public_node)
        if "/services/rs/XDemo/startSimulate" in doc["paths"]:
            break
        assert time.monotonic() < deadline, "the edit is not in the document"
        time.sleep(0.1)
    schemas = doc["components"]["schemas"]
    assert schemas["WatchJobsRequest"]["properties"]["ids"]["maxItems"] == 7
    assert schemas["Timeouts"]["properties"]["queueingTimeout"]["maximum"] == 3_600_000
    assert paths_of(doc) == served_operations(public_node, auth=("alice", TOKEN))
    validate(doc)

"""The WSDL of each service (docs/protocol.md §7): a real SOAP client (zeep) accepts it, its
``soap:address`` names the address the client used (or the configured public URL), it
declares the polymorphic types and every fault on every operation, it imports one
schema document per namespace (the same ``schemas/types.xsd`` in every WSDL) with
global elements only for operations and faults, and the files kept in ``wsdl/`` are
what ``xruntime wsdl`` writes today."""

import os
import subprocess
import sys

import pytest
import requests
import zeep
from lxml import etree

from tests.clients import wsdl_documents
from tests.harness import ROOT, Server
from xruntime.operations.runtime_service import served_services

# every service of the repository (services/ and XRuntime), as `xruntime wsdl` sees them
SERVICES = tuple(served_services())
WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
SOAP_BIND_NS = "http://schemas.xmlsoap.org/wsdl/soap/"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
TYPES_NS = "http://xruntime.org/xserver/types"
NS = {"wsdl": WSDL_NS, "soap": SOAP_BIND_NS, "xs": XSD_NS}
SERVICE_NS = {name: service.namespace for name, service in served_services().items()}
PUBLIC_URL = "https://example.org/xr"
CHECKED_IN = os.path.join(ROOT, "wsdl")
DEFAULT_BASE = "http://localhost:50000"

FAULTS = {
    "XServerFault": (),
    "InvalidRequestFault": (),
    "InvalidValueFault": ("parameter", "value"),
    "MissingParameterFault": ("parameter",),
    "InvalidFetchTypeFault": ("jobId",),
    "UnknownJobFault": ("jobId",),
    "JobStateFault": ("jobId", "status"),
    "RejectedRequestFault": (),
    "AccessDeniedFault": (),
    "QueueOverflowFault": (),
    "RequestTimedOutFault": (),
    "RequestStoppedFault": (),
    "ServiceNotConfiguredFault": ("service",),
    "ProcessingFault": (),
    "InternalErrorFault": (),
    "QuotaExceededFault": (),
    "TransientFault": (),
}


@pytest.fixture(scope="module")
def public_node(tmp_path_factory):
    """A node whose administrator set a public URL (behind a reverse proxy, say)."""
    srv = Server(
        str(tmp_path_factory.mktemp("public")), workers=1, server_keys={"public_url": PUBLIC_URL}
    )
    srv.start()
    yield srv
    srv.stop()


def fetch_wsdl(base, service, query="wsdl", **kwargs):
    r = requests.get(f"{base}/services/ws/{service}?{query}", timeout=10, **kwargs)
    assert r.status_code == 200, (r.status_code, r.text[:300])
    assert r.headers["Content-Type"].startswith("text/xml")
    return r.content


def soap_address(document: bytes) -> str:
    root = etree.fromstring(document)
    addresses = root.findall("wsdl:service/wsdl:port/soap:address", NS)
    assert len(addresses) == 1, document[:300]
    return addresses[0].get("location")


# --------------------------------------------------------------------------- zeep


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("query", ["wsdl", "WSDL"])
def test_zeep_accepts_the_served_wsdl(server, service, query):
    client = zeep.Client(f"{server.base}/services/ws/{service}?{query}")
    operations = set(client.service._operations)
    assert operations == set(served_services()[service].operations())
    if service == "XDemo":
        assert operations == {"startSimulate", "fetchSimulateResponse", "simulate"}
    if service == "XRuntime":
        assert operations == {
            "watchJob",
            "watchJobs",
            "stopJob",
            "deleteJob",
            "getRuntimeInformation",
            "getJobEvents",
            "listJobs",
        }
    assert client.service._binding_options["address"] == f"{server.base}/services/ws/{service}"
    for name in ("BulkProgress", "IntermediateResponseLimitation"):
        assert client.get_type(f"{{{TYPES_NS}}}{name}") is not None
    for name in FAULTS:  # the typed faults a generated client raises
        assert client.get_element(f"{{{TYPES_NS}}}{name}") is not None


def test_zeep_calls_through_the_address_it_was_given(server):
    """Built from the WSDL fetched via localhost, the client reaches the server at the
    address that WSDL names."""
    port = server.port
    client = zeep.Client(f"http://localhost:{port}/services/ws/XRuntime?wsdl")
    assert (
        client.service._binding_options["address"]
        == f"http://localhost:{port}/services/ws/XRuntime"
    )
    info = client.service.getRuntimeInformation()
    assert info.version and "XDemo" in [s.name for s in info.services]


# --------------------------------------------------------------------------- soap:address


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_address_is_the_one_the_client_used(server, service, host):
    base = f"http://{host}:{server.port}"
    assert soap_address(fetch_wsdl(base, service)) == f"{base}/services/ws/{service}"


@pytest.fixture(scope="module")
def aliased_node(tmp_path_factory):
    """A node its clients reach under a DNS alias, listed in [server] allowed_hosts."""
    srv = Server(
        str(tmp_path_factory.mktemp("aliased")),
        workers=1,
        server_keys={"allowed_hosts": ["xr-alias.test"]},
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("service", SERVICES)
def test_address_follows_the_host_header(aliased_node, service):
    """A client that reached the server under another name (a DNS alias) gets that name."""
    port = aliased_node.port
    document = fetch_wsdl(aliased_node.base, service, headers={"Host": f"xr-alias.test:{port}"})
    assert soap_address(document) == f"http://xr-alias.test:{port}/services/ws/{service}"


@pytest.mark.parametrize("service", SERVICES)
def test_untrusted_proxy_headers_do_not_move_the_address(server, service):
    """No proxy is configured as trusted: X-Forwarded-* from a client changes nothing."""
    document = fetch_wsdl(
        server.base,
        service,
        headers={
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Proto": "https",
            "X-Forwarded-Port": "1",
            "Forwarded": "host=evil.example;proto=https",
        },
    )
    assert soap_address(document) == f"{server.base}/services/ws/{service}"


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_public_url_wins(public_node, service, host):
    base = f"http://{host}:{public_node.port}"
    assert soap_address(fetch_wsdl(base, service)) == f"{PUBLIC_URL}/services/ws/{service}"
    client = zeep.Client(f"{base}/services/ws/{service}?wsdl")
    assert client.service._binding_options["address"] == f"{PUBLIC_URL}/services/ws/{service}"


# --------------------------------------------------------------------------- content


def served(base, service):
    """The served WSDL of ``service`` (parsed) and every schema document it imports."""
    url = f"{base}/services/ws/{service}?wsdl"
    documents = wsdl_documents(url)
    return documents[url], list(documents.values())


def declarations(documents):
    """{(namespace, kind, name): element} of every schema's top-level declarations."""
    found = {}
    for schema in (s for root in documents for s in root.iter(f"{{{XSD_NS}}}schema")):
        for child in schema:
            if isinstance(child.tag, str) and child.get("name"):
                kind = etree.QName(child).localname
                found[(schema.get("targetNamespace"), kind, child.get("name"))] = child
    return found


def resolve(elem, qname_text):
    prefix, _, local = qname_text.rpartition(":")
    return elem.nsmap.get(prefix or None), local


def fields_of(decls, namespace, type_name):
    """Field names of a complexType, its bases' included."""
    ctype = decls[(namespace, "complexType", type_name)]
    names = [e.get("name") for e in ctype.iter(f"{{{XSD_NS}}}element")]
    extension = ctype.find(".//xs:extension", NS)
    if extension is not None:
        base_ns, base = resolve(extension, extension.get("base"))
        if base_ns != XSD_NS:
            names += fields_of(decls, base_ns, base)
    return names


@pytest.mark.parametrize("service", SERVICES)
def test_polymorphic_types_are_declared(server, service):
    _, documents = served(server.base, service)
    decls = declarations(documents)
    for name, base, fields in (
        ("BulkProgress", "JobProgress", {"remaining", "successful", "failed"}),
        ("IntermediateResponseLimitation", "ResultLimitation", {"reason", "message"}),
    ):
        ctype = decls.get((TYPES_NS, "complexType", name))
        assert ctype is not None, f"{name} is not declared"
        extension = ctype.find(".//xs:extension", NS)
        assert extension is not None and resolve(extension, extension.get("base")) == (
            TYPES_NS,
            base,
        )
        assert set(fields_of(decls, TYPES_NS, name)) >= fields
    reason = decls[(TYPES_NS, "simpleType", "IntermediateResponseReason")]
    assert {e.get("value") for e in reason.iter(f"{{{XSD_NS}}}enumeration")} == {
        "REQUEST_STOPPED",
        "REQUEST_TIMED_OUT",
    }


@pytest.mark.parametrize("service", SERVICES)
def test_every_operation_declares_every_fault(server, service):
    root, documents = served(server.base, service)
    tns = root.get("targetNamespace")
    decls = declarations(documents)
    messages = {m.get("name"): m for m in root.findall("wsdl:message", NS)}
    [port_type] = root.findall("wsdl:portType", NS)
    operations = port_type.findall("wsdl:operation", NS)
    assert operations
    for op in operations:
        faults = {f.get("name"): f for f in op.findall("wsdl:fault", NS)}
        missing = set(FAULTS) - set(faults)
        assert not missing, f"{service}.{op.get('name')} does not declare {sorted(missing)}"
        for name in FAULTS:
            message_ns, message_name = resolve(faults[name], faults[name].get("message"))
            assert message_ns == tns and message_name in messages, (op.get("name"), name)
            [part] = messages[message_name].findall("wsdl:part", NS)
            element_ns, element = resolve(part, part.get("element"))
            declared = decls.get((element_ns, "element", element))
            assert declared is not None, f"fault element {element} is not declared"
            type_ns, type_name = resolve(declared, declared.get("type"))
            assert {"hint", *FAULTS[name]} <= set(fields_of(decls, type_ns, type_name)), name
    [binding] = root.findall("wsdl:binding", NS)
    for op in binding.findall("wsdl:operation", NS):
        soap_faults = {f.get("name") for f in op.findall("wsdl:fault/soap:fault", NS)}
        assert set(FAULTS) <= soap_faults, (
            f"binding of {op.get('name')} lacks {set(FAULTS) - soap_faults}"
        )
        for f in op.findall("wsdl:fault/soap:fault", NS):
            assert f.get("use") == "literal"


# --------------------------------------------------------------------------- wsdl/ is current


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """``xruntime wsdl --out DIR`` as a developer runs it in the repository."""
    out = tmp_path_factory.mktemp("wsdl")
    env = {k: v for k, v in os.environ.items() if k != "XRUNTIME_SERVICE_MODULES"}
    env["PYTHONPATH"] = ROOT
    done = subprocess.run(
        [sys.executable, "-m", "xruntime", "wsdl", "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return out


def kept_schemas():
    return sorted(os.listdir(os.path.join(CHECKED_IN, "schemas")))


#: The documents ``xruntime wsdl --out`` writes beside the WSDLs, one per binding that has
#: one: the JSON binding's OpenAPI document (tests/e2e/test_openapi_document.py serves
#: it). The OGC API binding's document, ogcapi.json, joins this list when `wsdl --out`
#: writes it.
DOCUMENTS = ["ogcapi.json", "openapi.json"]


def test_the_files_are_one_per_service(generated):
    wsdls = sorted(["XServices.wsdl", *(f"{s}.wsdl" for s in SERVICES)])
    files = sorted([*wsdls, *DOCUMENTS])
    assert sorted(f for f in os.listdir(generated) if f != "schemas") == files
    assert sorted(f for f in os.listdir(CHECKED_IN) if f != "schemas") == files
    # one schema document per namespace: the protocol's types and each service's
    assert kept_schemas() == sorted(["types.xsd", *(f"{s}.xsd" for s in SERVICES)])
    assert sorted(os.listdir(generated / "schemas")) == kept_schemas()


@pytest.mark.parametrize("service", SERVICES)
def test_checked_in_wsdl_is_current(generated, service):
    with open(os.path.join(generated, f"{service}.wsdl"), "rb") as f:
        fresh = f.read()
    with open(os.path.join(CHECKED_IN, f"{service}.wsdl"), "rb") as f:
        kept = f.read()
    assert soap_address(kept) == f"{DEFAULT_BASE}/services/ws/{service}"
    assert fresh == kept, (
        f"wsdl/{service}.wsdl is out of date; regenerate it with "
        "`python -m xruntime wsdl --out wsdl`"
    )


def test_checked_in_wsdl_of_every_service_is_current(generated):
    kept = os.path.join(CHECKED_IN, "XServices.wsdl")
    with open(kept, "rb") as f:
        assert (generated / "XServices.wsdl").read_bytes() == f.read(), (
            "wsdl/XServices.wsdl is out of date; "
            "regenerate it with `python -m xruntime wsdl --out wsdl`"
        )


@pytest.mark.parametrize("name", DOCUMENTS)
def test_checked_in_documents_are_current(generated, name):
    with open(os.path.join(CHECKED_IN, name), "rb") as f:
        assert (generated / name).read_bytes() == f.read(), (
            f"wsdl/{name} is out of date; regenerate it with `python -m xruntime wsdl --out wsdl`"
        )


def test_the_wsdl_of_every_service(server):
    """/services/ws?wsdl imports each served service's WSDL at the address the client
    used and declares a port of each at its address; zeep calls through it."""
    root = etree.fromstring(fetch_wsdl(server.base, ""))
    base = f"{server.base}/services/ws"
    imports = {i.get("namespace"): i.get("location") for i in root.findall("wsdl:import", NS)}
    ports = {
        p.get("name"): p.find("soap:address", NS).get("location")
        for p in root.findall("wsdl:service/wsdl:port", NS)
    }
    for service in SERVICES:  # (and XCrashy, which this node serves too)
        assert imports[SERVICE_NS[service]] == f"{base}/{service}?wsdl"
        assert ports[service] == f"{base}/{service}"
    client = zeep.Client(f"{base}?wsdl")
    runtime = client.bind("XRuntimeService", "XRuntime")
    assert "XDemo" in [s.name for s in runtime.getRuntimeInformation().services]


def test_checked_in_schemas_are_current(generated):
    for name in kept_schemas():
        with open(os.path.join(CHECKED_IN, "schemas", name), "rb") as kept:
            assert (generated / "schemas" / name).read_bytes() == kept.read(), (
                f"wsdl/schemas/{name} is out of date; regenerate it with "
                "`python -m xruntime wsdl --out wsdl`"
            )


@pytest.mark.parametrize("service", SERVICES)
def test_served_wsdl_is_the_checked_in_one(server, service):
    """Apart from its address, what a node serves is the kept file — also on this node,
    which loads one more service (XCrashy) than the repository has."""
    served = fetch_wsdl(server.base, service)
    with open(os.path.join(CHECKED_IN, f"{service}.wsdl"), "rb") as f:
        kept = f.read()
    here = f"{server.base}/services/ws/{service}".encode()
    assert served.replace(here, b"@") == kept.replace(
        f"{DEFAULT_BASE}/services/ws/{service}".encode(), b"@"
    )


def test_served_schemas_are_the_checked_in_ones(server):
    """The schema documents have no address in them: served, they are the kept files,
    byte for byte, whatever other services a node loads."""
    for name in kept_schemas():
        with open(os.path.join(CHECKED_IN, "schemas", name), "rb") as kept:
            answer = requests.get(f"{server.base}/services/ws/schemas/{name}", timeout=10)
            assert answer.status_code == 200 and answer.headers["Content-Type"].startswith(
                "text/xml"
            )
            assert answer.content == kept.read(), name
    missing = requests.get(f"{server.base}/services/ws/schemas/nothing.xsd", timeout=10)
    assert missing.status_code == 404


# --------------------------------------------------------------------------- one definition


def test_one_definition_of_every_type(server):
    """Every WSDL holds no type of its own, only imports, and every namespace is one
    document at one address: a client generated from all the WSDLs in one run (JAX-WS
    wsimport, Mono's wsdl) reads each type once, and ``Job`` is one class."""
    address_of = {}  # {namespace: the one address its schema is at}
    for service in SERVICES:
        root, _ = served(server.base, service)
        [schema] = root.findall("wsdl:types/xs:schema", NS)
        assert [etree.QName(c).localname for c in schema] == ["import"] * len(schema), (
            f"{service}'s WSDL defines types inline"
        )
        imported = {i.get("namespace"): i.get("schemaLocation") for i in schema}
        assert imported[TYPES_NS] == "schemas/types.xsd"
        assert SERVICE_NS[service] in imported
        for address, document in wsdl_documents(
            f"{server.base}/services/ws/{service}?wsdl"
        ).items():
            if etree.QName(document).localname == "schema":
                namespace = document.get("targetNamespace")
                assert address_of.setdefault(namespace, address) == address, namespace
    assert address_of[TYPES_NS] == f"{server.base}/services/ws/schemas/types.xsd"
    assert set(address_of) >= set(SERVICE_NS.values())


def test_global_elements_are_only_operations_and_faults(server):
    """A global element per type made JAXB (wsimport) refuse every WSDL: its factory
    method for the element ``JobProgress`` collided with the one for the optional field
    ``Job/progress``.  Only the operations' elements and the faults' exist, and an
    optional field is not ``nillable`` (JAXB would wrap it in JAXBElement)."""
    operations = {
        (SERVICE_NS[name], element)
        for name, service in served_services().items()
        for op in service.operations()
        for element in (op, op + "Response")
    }
    documents = {}
    for service in SERVICES:
        documents.update(wsdl_documents(f"{server.base}/services/ws/{service}?wsdl"))
    schemas = [d for d in documents.values() if etree.QName(d).localname == "schema"]
    elements = {(ns, name) for (ns, kind, name) in declarations(schemas) if kind == "element"}
    faults = elements - operations
    assert {name for _, name in faults} >= set(FAULTS)
    assert all(name.endswith("Fault") for _, name in faults), sorted(faults)
    assert operations <= elements
    for schema in schemas:
        for field in schema.iter(f"{{{XSD_NS}}}element"):
            assert not (field.get("minOccurs") == "0" and field.get("nillable") == "true"), (
                schema.get("targetNamespace"),
                field.get("name"),
            )

"""Bad SOAP input gets a clear SOAP fault (docs/protocol.md §6, §7): HTTP 500, ``soap:Fault`` with
faultcode ``Client``, a faultstring, and the typed fault element the WSDL declares inside
``<detail>`` with its ``<hint>``; no traceback leaves the server, nothing stored changes,
and the server goes on answering.

Everything is sent raw with requests (or a socket), never through a SOAP library, so the
server gets exactly the bytes a hostile or careless client would send.  The module's node
accepts at most ``LIMIT`` bytes per request; every valid envelope here is far smaller.
"""

import http.client
import time
from types import SimpleNamespace

import pytest
import requests
from lxml import etree

from tests.clients import wsdl_documents
from tests.harness import Server

LIMIT = 2048
SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
XDEMO_NS = "http://xruntime.org/xserver/xdemo"
XRUNTIME_NS = "http://xruntime.org/xserver/xruntime"
XDIMA_NS = "http://xruntime.org/xserver/xdima"
TYPES_NS = "http://xruntime.org/xserver/types"
WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
XML = {"Content-Type": "text/xml; charset=utf-8"}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("node")), server_keys={"max_request_bytes": LIMIT})
    srv.start()
    yield srv
    srv.stop()


# --------------------------------------------------------------------------- messages


def envelope(payload: str, prolog: str = "", padding: str = "") -> str:
    return (
        f'{prolog}<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>{payload}{padding}'
        "</soap:Body></soap:Envelope>"
    )


def start_simulate(fields: str = "<durationMs>0</durationMs>") -> str:
    """A startSimulate element: valid as it is, it would create a job."""
    return f'<x:startSimulate xmlns:x="{XDEMO_NS}">{fields}</x:startSimulate>'


def watch_job(fields: str = "<id>no-such-job</id>") -> str:
    """A watchJob element (its fields unqualified, as the WSDL says)."""
    return f'<r:watchJob xmlns:r="{XRUNTIME_NS}">{fields}</r:watchJob>'


VALID = {"XDemo": start_simulate, "XRuntime": watch_job}
NAMESPACE = {"XDemo": XDEMO_NS, "XRuntime": XRUNTIME_NS}

XXE_DTD = '<!DOCTYPE e [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
LAUGHS_DTD = (
    '<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
        for i in range(1, 10)
    )
    + "]>"
)
# Where an expanded entity would come back to the caller: XDemo echoes a bad value in
# InvalidValueFault.value; watchJob echoes the id of an unknown job.
XXE_BODY = {
    "XDemo": envelope(start_simulate("<steps>&xxe;</steps>"), XXE_DTD),
    "XRuntime": envelope(watch_job("<id>&xxe;</id>"), XXE_DTD),
}
LAUGHS_BODY = {
    "XDemo": envelope(start_simulate("<steps>&lol9;</steps>"), LAUGHS_DTD),
    "XRuntime": envelope(watch_job("<id>&lol9;</id>"), LAUGHS_DTD),
}


def passwd_lines():
    try:
        with open("/etc/passwd") as f:
            return [line.strip() for line in f if line.strip()]
    except OSError:
        return []


# --------------------------------------------------------------------------- checks


class Fault:
    def __init__(self, code, string, elem):
        self.code = code
        self.string = string
        self.elem = elem
        self.type = etree.QName(elem).localname
        self.fields = {
            etree.QName(c).localname: (c.text or "") for c in elem if isinstance(c.tag, str)
        }


_declared = {}


def declared_elements(node, service):
    """The global elements of the service's served WSDL and the schemas it imports, as
    (namespace, name)."""
    if service not in _declared:
        documents = wsdl_documents(f"{node.base}/services/ws/{service}?wsdl").values()
        _declared[service] = {
            (schema.get("targetNamespace"), e.get("name"))
            for root in documents
            for schema in root.iter(f"{{{XSD_NS}}}schema")
            for e in schema.findall(f"{{{XSD_NS}}}element")
        }
    return _declared[service]


def soap_fault(response, node=None, service=None) -> Fault:
    """The answer is a SOAP 1.1 Client fault with a typed, hinted detail; answers it."""
    assert response.status_code == 500, (response.status_code, response.text[:500])
    assert response.headers.get("Content-Type", "").startswith("text/xml"), response.headers
    assert "Traceback" not in response.text
    root = etree.fromstring(response.content)
    assert root.tag == f"{{{SOAP_ENV}}}Envelope"
    fault = root.find(f"{{{SOAP_ENV}}}Body/{{{SOAP_ENV}}}Fault")
    assert fault is not None, response.text
    code_elem = fault.find("faultcode")
    assert code_elem is not None and code_elem.text
    prefix, _, local = code_elem.text.strip().rpartition(":")
    assert local == "Client", code_elem.text
    assert code_elem.nsmap.get(prefix or None) == SOAP_ENV, "faultcode is not a SOAP-ENV QName"
    string = fault.findtext("faultstring")
    assert string and string.strip(), "empty faultstring"
    detail = fault.find("detail")
    assert detail is not None, f"no <detail> in the fault: {response.text}"
    typed = [c for c in detail if isinstance(c.tag, str)]
    assert len(typed) == 1, response.text
    result = Fault(code_elem.text, string, typed[0])
    assert result.fields.get("hint", "").strip(), f"no <hint> in {result.type}"
    if service is not None:
        qname = etree.QName(typed[0])
        assert (qname.namespace, qname.localname) in declared_elements(node, service), (
            f"{qname} is not declared in the {service} WSDL"
        )
    return result


def jobs_stored(node):
    info = node.call("XRuntime", "getRuntimeInformation", {})
    return {c["status"]: c["count"] for c in info["jobs"]}


def still_answers(node):
    r = requests.post(
        f"{node.base}/services/ws/XRuntime", data=envelope(watch_job()), headers=XML, timeout=10
    )
    assert r.status_code == 200, r.text
    assert b"UNKNOWN" in r.content


@pytest.fixture
def unchanged(node):
    """Nothing stored changes, and the server still answers afterwards."""
    before = jobs_stored(node)
    yield node
    still_answers(node)
    assert jobs_stored(node) == before


def post(node, service, body, headers=XML, timeout=10):
    data = body.encode("utf-8") if isinstance(body, str) else body
    return requests.post(
        f"{node.base}/services/ws/{service}", data=data, headers=headers, timeout=timeout
    )


# --------------------------------------------------------------------------- the cases

SERVICES = ("XDemo", "XRuntime")


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize(
    "case, body",
    [
        ("malformed XML", lambda s: envelope(VALID[s]())[:-12]),
        ("unclosed tag", lambda s: f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>'),
        ("undeclared prefix", lambda s: "<soap:Envelope><soap:Body/></soap:Envelope>"),
        ("not XML at all", lambda s: "hello, server"),
        ("not an envelope", lambda s: VALID[s]()),
        (
            "SOAP 1.2 envelope",
            lambda s: envelope(VALID[s]()).replace(
                SOAP_ENV, "http://www.w3.org/2003/05/soap-envelope"
            ),
        ),
        ("envelope without body", lambda s: f'<soap:Envelope xmlns:soap="{SOAP_ENV}"/>'),
        ("empty body element", lambda s: envelope("")),
        ("two operations", lambda s: envelope(VALID[s]() + VALID[s]())),
        ("empty request", lambda s: ""),
        ("whitespace only", lambda s: "   \n  "),
        ("DOCTYPE alone", lambda s: "<!DOCTYPE soap:Envelope>"),
        (
            "DOCTYPE before a valid envelope",
            lambda s: envelope(VALID[s](), "<!DOCTYPE soap:Envelope>"),
        ),
        ("internal entity", lambda s: envelope(VALID[s](), '<!DOCTYPE e [<!ENTITY a "b">]>')),
        ("unknown operation", lambda s: envelope(f'<o:fly xmlns:o="{NAMESPACE[s]}"/>')),
        (
            "operation of another service",
            lambda s: envelope(watch_job() if s == "XDemo" else start_simulate()),
        ),
        (
            "operation in no namespace",
            lambda s: envelope("<startSimulate/>" if s == "XDemo" else "<watchJob/>"),
        ),
    ],
)
def test_bad_messages(unchanged, service, case, body):
    fault = soap_fault(post(unchanged, service, body(service)), unchanged, service)
    assert fault.type == "InvalidRequestFault", (case, fault.type, fault.string)


@pytest.mark.parametrize("service", SERVICES)
def test_xxe_external_entity(unchanged, service):
    r = post(unchanged, service, XXE_BODY[service])
    fault = soap_fault(r, unchanged, service)
    assert fault.type == "InvalidRequestFault", fault.string
    for line in passwd_lines():
        assert line not in r.text
    assert "root:" not in r.text


@pytest.mark.parametrize("service", SERVICES)
def test_xxe_in_utf16(unchanged, service):
    """The DTD is refused whatever the encoding the message is written in."""
    body = ('<?xml version="1.0" encoding="UTF-16"?>' + XXE_BODY[service]).encode("utf-16")
    r = post(unchanged, service, body, headers={"Content-Type": "text/xml; charset=utf-16"})
    fault = soap_fault(r, unchanged, service)
    for line in passwd_lines():
        assert line not in r.text
    assert fault.type == "InvalidRequestFault" and "DTD" in fault.string, (
        f"a DTD in a UTF-16 message was not refused: {fault.type}: {fault.string}"
    )


@pytest.mark.parametrize("service", SERVICES)
def test_billion_laughs(unchanged, service):
    t0 = time.monotonic()
    r = post(unchanged, service, LAUGHS_BODY[service])
    elapsed = time.monotonic() - t0
    fault = soap_fault(r, unchanged, service)
    assert fault.type == "InvalidRequestFault"
    assert "lollol" not in r.text
    assert elapsed < 0.5, f"an entity-expansion body took {elapsed:.2f} s to refuse"


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_wrong_content_type(unchanged, service, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    body = envelope(VALID[service]()).encode()
    r = requests.post(
        f"{unchanged.base}/services/ws/{service}", data=body, headers=headers, timeout=10
    )
    if content_type is None:
        assert "Content-Type" not in r.request.headers
    fault = soap_fault(r, unchanged, service)
    assert fault.type == "InvalidRequestFault"
    assert "content type" in fault.string


@pytest.mark.parametrize(
    "service, fields, parameter, value",
    [
        ("XDemo", "<steps>many</steps>", "steps", "many"),
        ("XDemo", "<durationMs>1.5</durationMs>", "durationMs", "1.5"),
        ("XDemo", "<busy>yes</busy>", "busy", "yes"),
        ("XDemo", "<steps>0</steps>", "steps", "0"),
        ("XDemo", "<durationMs>-5</durationMs>", "durationMs", "-5"),
        ("XDemo", "<steps> +0 </steps>", "steps", "+0"),  # the value as sent, not 0
        (
            "XDemo",
            "<timeouts><computationTimeout>soon</computationTimeout></timeouts>",
            "timeouts.computationTimeout",
            "soon",
        ),
        (
            "XRuntime",
            "<id>x</id><progressUpdatePeriod>soon</progressUpdatePeriod>",
            "progressUpdatePeriod",
            "soon",
        ),
    ],
)
def test_wrong_type(unchanged, service, fields, parameter, value):
    body = envelope(start_simulate(fields) if service == "XDemo" else watch_job(fields))
    fault = soap_fault(post(unchanged, service, body), unchanged, service)
    assert fault.type == "InvalidValueFault", fault.string
    assert fault.fields["parameter"] == parameter
    assert fault.fields.get("value") == value


@pytest.mark.parametrize("text", ["95", "95.50", "9.5e1", " 95 ", "+95"])
def test_out_of_range_value_is_named_as_sent(unchanged, text):
    """The fault's value is the element's text (trimmed), not the number it was read as."""
    body = envelope(
        f'<d:startCreateDistanceMatrix xmlns:d="{XDIMA_NS}"><startLocations>'
        f"<longitude>0</longitude><latitude>{text}</latitude></startLocations>"
        "</d:startCreateDistanceMatrix>"
    )
    fault = soap_fault(post(unchanged, "XDima", body), unchanged, "XDima")
    assert fault.type == "InvalidValueFault", fault.string
    assert (fault.fields["parameter"], fault.fields["value"]) == (
        "startLocations[0].latitude",
        text.strip(),
    )


@pytest.mark.parametrize(
    "service, fields, parameter",
    [
        ("XDemo", "<bogus>1</bogus>", "bogus"),
        (
            "XDemo",
            f'<t:steps xmlns:t="{TYPES_NS}">2</t:steps>',
            "steps",
        ),  # right name, wrong namespace
        ("XRuntime", "<id>x</id><bogus>1</bogus>", "bogus"),
        # the operation's namespace is not the field's (what npm soap wrote for the WSDLs
        # whose fields were qualified)
        ("XRuntime", f'<r:id xmlns:r="{XRUNTIME_NS}">x</r:id>', "id"),
    ],
)
def test_unexpected_element(unchanged, service, fields, parameter):
    body = envelope(start_simulate(fields) if service == "XDemo" else watch_job(fields))
    fault = soap_fault(post(unchanged, service, body), unchanged, service)
    assert fault.type == "InvalidValueFault", fault.string
    assert fault.fields["parameter"] == parameter


def test_missing_parameter(unchanged):
    fault = soap_fault(post(unchanged, "XRuntime", envelope(watch_job(""))), unchanged, "XRuntime")
    assert fault.type == "MissingParameterFault" and fault.fields["parameter"] == "id"


# --------------------------------------------------------------------------- size


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("size", [LIMIT + 1, LIMIT + 100, 4 * LIMIT, 200 * LIMIT])
def test_body_over_the_limit(unchanged, service, size):
    """A body over [server] max_request_bytes — a little or a lot — is a SOAP fault."""
    message = envelope(VALID[service]())
    body = envelope(VALID[service](), padding=" " * (size - len(message)))
    assert len(body) == size
    fault = soap_fault(post(unchanged, service, body), unchanged, service)
    assert fault.type == "InvalidRequestFault"


def test_body_just_under_the_limit_is_served(unchanged):
    message = envelope(watch_job())
    r = post(unchanged, "XRuntime", envelope(watch_job(), padding=" " * (LIMIT - len(message))))
    assert r.status_code == 200 and b"UNKNOWN" in r.content


@pytest.mark.parametrize("service", SERVICES)
def test_chunked_body_over_the_limit(unchanged, service):
    """No Content-Length: the server counts what it reads and stops past the limit."""

    def chunks():
        yield f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>{VALID[service]()}'.encode()
        for _ in range(20):
            yield b" " * 1000
        yield b"</soap:Body></soap:Envelope>"

    r = requests.post(
        f"{unchanged.base}/services/ws/{service}", data=chunks(), headers=XML, timeout=10
    )
    assert r.request.headers.get("Transfer-Encoding") == "chunked"
    assert soap_fault(r, unchanged, service).type == "InvalidRequestFault"


@pytest.mark.parametrize("service", SERVICES)
def test_size_is_checked_before_the_body_is_read(unchanged, service):
    """A client announcing 50 MB gets its fault at once, before it has sent the body."""
    conn = http.client.HTTPConnection("127.0.0.1", unchanged.port, timeout=5)
    try:
        conn.putrequest("POST", f"/services/ws/{service}")
        conn.putheader("Content-Type", "text/xml; charset=utf-8")
        conn.putheader("Content-Length", str(50 * 1024 * 1024))
        conn.endheaders(f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body>'.encode())
        t0 = time.monotonic()
        answer = conn.getresponse()  # times out if the server waits for the 50 MB
        content = answer.read()
        elapsed = time.monotonic() - t0
    finally:
        conn.close()
    assert elapsed < 2
    response = SimpleNamespace(
        status_code=answer.status,
        headers=answer.headers,  # case-insensitive, as HTTP header names are
        content=content,
        text=content.decode("utf-8", "replace"),
    )
    assert soap_fault(response, unchanged, service).type == "InvalidRequestFault"


# --------------------------------------------------------------------------- addresses


def test_unknown_service(unchanged):
    r = post(unchanged, "XNothing", envelope(watch_job()))
    fault = soap_fault(r)
    assert fault.type == "InvalidRequestFault" and "XNothing" in fault.string
    r = requests.get(f"{unchanged.base}/services/ws/XNothing?wsdl", timeout=10)
    assert r.status_code == 404
    assert "Traceback" not in r.text


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize(
    "method, query", [("GET", ""), ("GET", "?wdsl"), ("PUT", ""), ("DELETE", "")]
)
def test_other_methods_are_faults(unchanged, service, method, query):
    r = requests.request(
        method,
        f"{unchanged.base}/services/ws/{service}{query}",
        data=envelope(VALID[service]()) if method == "PUT" else None,
        headers=XML if method == "PUT" else {},
        timeout=10,
    )
    fault = soap_fault(r, unchanged, service)
    assert fault.type == "InvalidRequestFault" and method in fault.string


@pytest.mark.parametrize("service", SERVICES)
def test_the_wsdl_is_still_served(node, service):
    r = requests.get(f"{node.base}/services/ws/{service}?wsdl", timeout=10)
    assert r.status_code == 200 and r.content.startswith(b"<?xml")


# --------------------------------------------------------------------------- not bad at all


def test_comments_and_cdata_are_not_a_dtd(unchanged):
    """SOAP 1.1 forbids DTDs, not comments or CDATA: such a message is served."""
    for body in (
        envelope(watch_job("<id><![CDATA[no-such-job]]></id>")),
        envelope(watch_job(), prolog="<!-- a comment before the envelope -->\n"),
        envelope("<!-- a comment in the body -->" + watch_job()),
    ):
        r = post(unchanged, "XRuntime", body)
        assert r.status_code == 200, (body, r.text[:400])
        assert b"UNKNOWN" in r.content
    # CDATA whose text holds "<!" (benchmarks/abuse.py, item 9: it was refused as a DTD)
    r = post(unchanged, "XRuntime", envelope(watch_job("<id><![CDATA[x<!y]]></id>")))
    assert r.status_code == 200 and b"<id>x&lt;!y</id>" in r.content, r.text[:400]
    # and a DTD after a CDATA section is still refused
    r = post(
        unchanged, "XRuntime", envelope(watch_job("<id><![CDATA[x]]></id>"), prolog="<!DOCTYPE e>")
    )
    assert r.status_code == 500 and b"DTD" in r.content


def test_a_valid_message_creates_a_job(node):
    """The control: the same message the cases above spoil is served and counted."""
    before = sum(jobs_stored(node).values())
    r = post(node, "XDemo", envelope(start_simulate()))
    assert r.status_code == 200, r.text
    job_id = etree.fromstring(r.content).findtext(f".//{{{XDEMO_NS}}}startSimulateResponse/id")
    assert job_id
    assert sum(jobs_stored(node).values()) == before + 1
    node.wait_done(job_id)
    node.call("XRuntime", "deleteJob", {"id": job_id})


def test_fields_in_their_types_namespace_are_still_served(node):
    """The form of the WSDLs before (elementFormDefault="qualified"): each field in the
    namespace of the type that declares it.  Messages written for those still work."""
    fields = (
        f'<t:timeouts xmlns:t="{TYPES_NS}"><t:computationTimeout>9000</t:computationTimeout>'
        "</t:timeouts><x:durationMs>0</x:durationMs><x:steps>2</x:steps>"
    )
    r = post(node, "XDemo", envelope(start_simulate(fields)))
    assert r.status_code == 200, r.text
    job_id = etree.fromstring(r.content).findtext(f".//{{{XDEMO_NS}}}startSimulateResponse/id")
    assert node.wait_done(job_id)["progress"]["successful"] == 2
    r = post(node, "XRuntime", envelope(watch_job(f'<t:id xmlns:t="{TYPES_NS}">{job_id}</t:id>')))
    assert r.status_code == 200 and b"SUCCEEDED" in r.content, r.text
    node.call("XRuntime", "deleteJob", {"id": job_id})

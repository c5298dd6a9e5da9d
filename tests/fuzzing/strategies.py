"""What the fuzz sends: one hypothesis strategy of ``Case`` per binding.

Each case first draws how wrong it is, so that every degree of wrong is sent often:
almost right (the operation's own field names, read from its request type, with
values of another kind, out of range, huge, holding lone surrogates, or ``$type``
values of every kind), wrong in its structure (the envelope, the JSON-RPC members, the
request line, the headers, the framing), anything at all (any JSON value, DTDs), and
broken on the way (cut short, bytes that are no UTF-8, just bytes).  Valid input comes
out now and then too, and must then be served.

The synchronous operations (``simulate``) are left out: a valid request holds its
caller until the job is done, past any bound a fuzz can put on an answer.
"""

import json
import operator
import urllib.parse
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from hypothesis import strategies as st

from xruntime.author.service import RUN
from xruntime.bindings.xml_codec import XSI, plan
from xruntime.operations.runtime_service import xruntime
from xruntime.protocol.typeinfo import BOOL, ENUM, FLOAT, INT, OBJ, fields
from xruntime.protocol.types import NAMESPACE as TYPES_NS
from xruntime_services.xdemo import service as xdemo

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
SERVICES = (xdemo, xruntime)
#: (service, operation name, Operation) of every operation the fuzz calls
OPERATIONS = tuple(
    (svc, name, op) for svc in SERVICES for name, op in svc.operations().items() if op.kind != RUN
)
JUNK_NAMES = (
    "fly",
    "",
    "watchjob",
    "startSimulate ",
    "..",
    "%2e",
    "XRuntime",
    "getRuntimeInformation/x",
)
#: what ``$type`` may say: type names of every kind, and names of nothing
TYPE_NAMES = (
    "Job",
    "JobProgress",
    "BulkProgress",
    "Timeouts",
    "SimulateRequest",
    "WatchRequest",
    "JobRequest",
    "RequestBase",
    "ResultLimitation",
    "InternalErrorFault",
    "InvalidValueFault",
    "XServerFault",
    "",
    "$type",
    "object",
    "null",
)


@dataclass(frozen=True)
class Case:
    """One input: the whole HTTP request as it is sent, and what its answer must be."""

    binding: str  # json | jsonrpc | soap | http
    request: bytes
    method: str = "POST"  # HEAD is answered without a body
    ends_open: bool = False  # it may look unfinished to the server: the client half-closes after it
    payload: object = None  # JSON-RPC: what was sent, to count the answers (None: not JSON)
    refused: bool = False  # it must be refused: a SOAP message with a DTD

    def __repr__(self):
        shown = self.request if len(self.request) <= 600 else self.request[:600] + b"..."
        return f"Case({self.binding}, {len(self.request)} bytes: {shown!r})"


def post(path: str, body: bytes, content_type=None) -> bytes:
    """A well-formed HTTP/1.1 POST, however bad its body."""
    head = f"POST {urllib.parse.quote(path, safe='/?=&%')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if content_type is not None:
        head += f"Content-Type: {content_type}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


def mostly(usual, rare):
    """Drawn from ``usual`` three times in four, else from ``rare``."""
    return st.one_of(usual, usual, usual, rare)


def often(value, other):
    """``value`` three times in four, else something drawn from ``other``."""
    return mostly(st.just(value), other)


# --------------------------------------------------------------------------- JSON values


class Raw(str):
    """JSON text written into a body as it is: what an encoder never writes (a number
    of 5000 digits, NaN, nesting 3000 deep)."""


def to_json(value, ascii=True) -> str:
    """JSON text of ``value``; lone surrogates become ``\\udxxx`` escapes (``ascii``)
    or stay in the text, to become bytes that are no UTF-8."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{to_json(str(k), ascii)}:{to_json(v, ascii)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(to_json(v, ascii) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii)


#: text, now and then with lone surrogates
TEXT = st.one_of(st.text(max_size=12), st.text(st.characters(codec=None), max_size=12))
HUGE_TEXT = st.builds(
    operator.mul,
    st.sampled_from(["x", "é", "\U0001f600", "\\", '"', "\x00", "\ud800"]),
    st.integers(1000, 8000),
)
EDGE_INTS = st.sampled_from(
    [2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 10**30, -1, 0]
)
ODD_NUMBERS = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            "1e400",
            "-1e400",
            "1E+2",
            "-0",
            "0.0",
            "1.0",
            "2.5",
            "1e-400",
            "0e0",
            "9" * 400,
        ]
    ).map(Raw),
    st.integers(4290, 6000).map(lambda n: Raw("9" * n)),
)  # past Python's 4300 digits
DEEP = st.builds(
    lambda n, kind: Raw(("[" * n + "]" * n) if kind else ('{"a":' * n + "0" + "}" * n)),
    st.integers(1, 3000),
    st.booleans(),
)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=8,
)
#: any JSON value, and the odd ones no well-behaved client sends
ANY_JSON = st.one_of(
    JSON_VALUES,
    EDGE_INTS,
    ODD_NUMBERS,
    DEEP,
    HUGE_TEXT,
    st.sampled_from(["", "5", "true", "null", "QUEUING", "{}"]),
)


def ids_of(known):
    """Job ids: of jobs that exist (``known``), unknown ones, and no ids at all."""
    return st.one_of(st.sampled_from(list(known) or ["no-such-job"]), st.uuids().map(str), TEXT)


def own_kind(f, ids):
    """A value of the kind field ``f`` declares: in range, or just outside it."""
    if f.kind == OBJ:
        value = request_objects(f.type, ids)
    elif f.kind == INT:
        bounds = [getattr(f.attrs, name, None) for name in ("ge", "gt", "le", "lt")]
        value = st.one_of(
            st.integers(),
            EDGE_INTS,
            *(
                st.integers(int(b) - 2, int(b) + 2)
                for b in bounds
                if b is not None and abs(b) < 2**64
            ),
        )
    elif f.kind == BOOL:
        value = st.booleans()
    elif f.kind == FLOAT:
        value = st.floats()
    elif f.kind == ENUM:
        value = st.sampled_from(list(f.type.__values__))
    else:
        value = ids if f.name == "id" else TEXT
    return st.lists(value, max_size=3) if f.many else value


def request_objects(cls, ids):
    """Objects with some of ``cls``'s own field names, each with a value of its own
    kind or any other; now and then with a ``$type`` or a field it does not have."""
    known = st.fixed_dictionaries(
        {},
        optional={
            f.name: st.deferred(lambda f=f: st.one_of(own_kind(f, ids), ANY_JSON))
            for f in fields(cls)
        },
    )
    extra = st.dictionaries(
        st.one_of(st.just("$type"), TEXT),
        st.one_of(st.sampled_from(TYPE_NAMES), ANY_JSON),
        max_size=2,
    )
    return st.builds(lambda a, b: {**a, **b}, known, st.one_of(st.just({}), extra))


def encoded(text):
    """Text as bytes: UTF-8 mostly, else another encoding JSON or XML may come in (or one
    they may not)."""
    return st.builds(
        lambda t, enc: t.encode(enc, "surrogatepass" if enc.startswith("utf") else "replace"),
        text,
        often("utf-8", st.sampled_from(["utf-16", "utf-32", "utf-8-sig", "latin-1", "utf-16-be"])),
    )


def spoiled(body):
    """Bodies broken on the way: cut short, or with a few bytes put in anywhere."""
    return st.one_of(
        st.builds(lambda b, at: b[: int(len(b) * at)], body, st.floats(0, 1)),
        st.builds(
            lambda b, at, junk: b[: int(len(b) * at)] + junk + b[int(len(b) * at) :],
            body,
            st.floats(0, 1),
            st.binary(min_size=1, max_size=6),
        ),
    )


def json_text(values):
    """JSON text of ``values`` (escaped to ASCII or not), encoded."""
    return encoded(st.builds(to_json, values, st.booleans()))


# --------------------------------------------------------------------------- JSON

CONTENT_TYPES = st.sampled_from(
    [
        "application/json; charset=utf-8",
        "text/plain",
        None,
        "text/xml",
        "application/x-www-form-urlencoded",
        "application/json; charset=latin-1",
        "multipart/form-data; boundary=x",
        "",
        ";;",
        "application/jsonx",
        "application/soap+xml",
        "text/xml; charset=utf-16",
        "text/xml; charset=bogus",
    ]
)


@st.composite
def json_cases(draw, known=()):
    """A POST to /services/rs/<Service>/<operation>: almost right, any JSON, or broken
    (cut short, bytes, another content type, a path naming nothing)."""
    svc, name, op = draw(st.sampled_from(OPERATIONS))
    almost = st.builds(to_json, request_objects(op.request, ids_of(known))).map(str.encode)
    path, content_type = f"/services/rs/{svc.name}/{name}", "application/json"
    kind = draw(st.sampled_from(["almost", "almost", "any", "broken"]))
    if kind == "almost":
        body = draw(almost)
    elif kind == "any":
        body = draw(json_text(ANY_JSON))
    else:
        body = draw(
            st.one_of(
                spoiled(almost),
                json_text(request_objects(op.request, ids_of(known))),
                st.binary(max_size=200),
            )
        )
        path = draw(
            often(
                path,
                st.sampled_from(
                    [f"/services/rs/{svc.name}/{junk}" for junk in JUNK_NAMES]
                    + [
                        f"/services/rs/XNothing/{name}",
                        f"/services/rs/{svc.name}",
                        f"{path}/more",
                        "/services/rs",
                    ]
                ),
            )
        )
        content_type = draw(often(content_type, CONTENT_TYPES))
    return Case("json", post(path, body, content_type))


# --------------------------------------------------------------------------- JSON-RPC

RPC_IDS = st.one_of(
    st.integers(), TEXT, st.none(), st.floats(allow_nan=False, allow_infinity=False)
)
#: a member of a request object, of another kind than it must be
ODD_MEMBERS = {
    "jsonrpc": st.one_of(st.sampled_from(["1.0", "2", "", "2.0 ", "2.00"]), ANY_JSON),
    "method": st.one_of(
        st.sampled_from([name for _, name, _ in OPERATIONS] + list(JUNK_NAMES)), TEXT, ANY_JSON
    ),
    "params": ANY_JSON,
    "id": st.one_of(
        st.booleans(),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(TEXT, st.integers(), max_size=2),
        EDGE_INTS,
        ODD_NUMBERS,
        st.floats(),
    ),
}


@st.composite
def _rpc_request(draw, svc, known):
    """A request object for one of ``svc``'s operations (its params almost right); a
    notification one time in five."""
    _, name, op = draw(st.sampled_from([o for o in OPERATIONS if o[0] is svc]))
    request = {
        "jsonrpc": "2.0",
        "method": name,
        "params": draw(request_objects(op.request, ids_of(known))),
    }
    if draw(st.integers(0, 4)):
        request["id"] = draw(RPC_IDS)
    return request


@st.composite
def _rpc_odd(draw, svc, known):
    """A request object with one member left out or of another kind."""
    request = draw(_rpc_request(svc, known))
    member = draw(st.sampled_from(sorted(ODD_MEMBERS)))
    if draw(st.booleans()):
        request.pop(member, None)
    else:
        request[member] = draw(ODD_MEMBERS[member])
    return request


@st.composite
def jsonrpc_cases(draw, known=()):
    """A POST to /services/rpc/<Service>: a request, a request with a member wrong, a
    batch of both and of anything, any JSON, or broken."""
    svc = draw(st.sampled_from(SERVICES))
    good, odd = _rpc_request(svc, known), _rpc_odd(svc, known)
    path, content_type = f"/services/rpc/{svc.name}", "application/json"
    kind = draw(st.sampled_from(["good", "odd", "batch", "any", "broken"]))
    if kind == "broken":
        body = draw(
            st.one_of(spoiled(st.builds(to_json, good).map(str.encode)), st.binary(max_size=200))
        )
        path = draw(
            often(
                path,
                st.sampled_from(["/services/rpc/XNothing", "/services/rpc", f"{path}/watchJob"]),
            )
        )
        return Case("jsonrpc", post(path, body, draw(often(content_type, CONTENT_TYPES))))
    payload = draw(
        {
            "good": good,
            "odd": odd,
            "any": ANY_JSON,
            "batch": st.lists(st.one_of(good, good, odd, ANY_JSON), max_size=5),
        }[kind]
    )
    text = to_json(payload, draw(st.booleans()))
    body = draw(encoded(st.just(text)))
    return Case(
        "jsonrpc",
        post(path, body, content_type),
        payload=payload if _reads_back(text, body) else None,
    )


def _reads_back(text, body) -> bool:
    """Whether ``body`` is ``text`` as sent: its encoding lost nothing (Latin-1 writes
    "?" for what it cannot encode), so that the server reads the payload that was drawn."""
    try:
        return body.decode(json.detect_encoding(body), "surrogatepass") == text
    except UnicodeDecodeError:
        return False


# --------------------------------------------------------------------------- SOAP

LEXICAL = {
    INT: st.one_of(
        st.integers().map(str),
        st.sampled_from(
            [
                " 5 ",
                "+5",
                "0x10",
                "1e3",
                "5.0",
                "\u0661",
                "1_000",
                "",
                "NaN",
                "-0",
                "9" * 5000,
                "2147483648",
                "9223372036854775808",
                "-9223372036854775809",
                "１２",
            ]
        ),
    ),
    BOOL: st.sampled_from(["true", "false", "1", "0", "TRUE", "yes", " true ", ""]),
}
RAW_XML_TEXT = st.sampled_from(
    [
        "&undefined;",
        "&#0;",
        "&#xD800;",
        "<![CDATA[5]]>",
        "<!-- c -->5",
        "&lt;",
        "<",
        "&",
        "]]>",
        "<x/>",
        "&#x1F600;",
        "\x01",
    ]
)
PROLOGS = st.sampled_from(
    [
        "",
        '<?xml version="1.0" encoding="utf-8"?>',
        '<?xml version="1.1"?>',
        '<?xml version="1.0" encoding="bogus"?>',
        '<?xml version="1.0" encoding="UTF-16"?>',
        "<?xml version='1.0' standalone='yes'?>",
        "<!-- a comment -->",
        "<?pi data?>",
        "\ufeff",
        " \n ",
        '<?xml version="1.0"?><?xml version="1.0"?>',
    ]
)
#: envelopes right and wrong, around the body's content
FRAMES = {
    "plain": "{prolog}<soap:Envelope {ns}><soap:Body>{body}</soap:Body></soap:Envelope>",
    "header": (
        "{prolog}<soap:Envelope {ns}><soap:Header><x/></soap:Header><soap:Body>{body}</soap:Body>"
        "</soap:Envelope>"
    ),
    "empty": "{prolog}<soap:Envelope {ns}/>",
    "no body": "{prolog}<soap:Envelope {ns}>{body}</soap:Envelope>",
    "undeclared": "{prolog}<soap:Envelope><soap:Body>{body}</soap:Body></soap:Envelope>",
    "bare": "{prolog}{body}",
    "two": "{prolog}<soap:Envelope {ns}><soap:Body>{body}{body}</soap:Body></soap:Envelope>",
    "text": "{prolog}<soap:Envelope {ns}><soap:Body>text{body}</soap:Body></soap:Envelope>",
    "nothing": "{prolog}<soap:Envelope {ns}><soap:Body></soap:Body></soap:Envelope>",
}


def dtd(depth, size):
    """A DTD and the entity reference that uses it: a doctype alone, XXE, a parameter
    entity, billion laughs ``depth`` deep, or one entity of ``size`` characters."""
    laughs = '<!ENTITY l0 "lol">' + "".join(
        f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10}">' for i in range(1, depth + 1)
    )
    return st.sampled_from(
        [
            ("<!DOCTYPE Envelope>", ""),
            ('<!DOCTYPE e [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>', "&xxe;"),
            ('<!DOCTYPE e [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>', ""),
            (f"<!DOCTYPE lolz [{laughs}]>", f"&l{depth};"),
            (f'<!DOCTYPE e [<!ENTITY a "{"a" * size}">]>', "&a;" * 200),
            ('<!ENTITY a "b">', "&a;"),
        ]
    )


def _soap_text(f, known, entity):
    if entity and f.name in ("id", "steps"):
        return st.just(entity)
    own = st.one_of(ids_of(known), TEXT) if f.kind not in LEXICAL else LEXICAL[f.kind]
    return st.one_of(own.map(escape), own.map(escape), RAW_XML_TEXT, HUGE_TEXT.map(escape))


@st.composite
def _attributes(draw, odd):
    if not odd:
        return ""
    chosen = draw(
        st.lists(
            st.sampled_from(
                [
                    ("xsi:type", "t:BulkProgress"),
                    ("xsi:type", "t:Job"),
                    ("xsi:type", "nope:Thing"),
                    ("xsi:type", ""),
                    ("xsi:nil", "true"),
                    ("xsi:nil", "1"),
                    ("xsi:nil", "maybe"),
                    ("huge", None),
                    ("b:c", "x"),
                    ("xmlns", "urn:x"),
                    ("xmlns:t", ""),
                ]
            ),
            max_size=2,
        )
    )
    return "".join(
        f" {name}={quoteattr(value if value is not None else 'A' * draw(st.integers(0, 30000)))}"
        for name, value in chosen
    )


@st.composite
def _element(draw, cls, tag, known, entity, odd, declared="", depth=0):
    """``<tag ...>`` with children named as ``cls``'s fields, each holding text of its
    kind or not; when ``odd``, also in other namespaces, with attributes (``xsi:type``,
    ``xsi:nil``, huge ones) and with elements ``cls`` does not have."""
    children = []
    for name, f, ns in draw(st.lists(st.sampled_from(plan(cls)), max_size=4)):
        prefix = draw(often("f", st.sampled_from(["t", "s", "", "nope"]))) if odd else "f"
        child = f"{prefix}:{name}" if prefix else name
        if f.kind == OBJ and depth < 2:
            children.append(
                draw(_element(f.type, child, known, entity, odd, f' xmlns:f="{ns}"', depth + 1))
            )
        else:
            text = draw(_soap_text(f, known, entity))
            children.append(f'<{child}{draw(_attributes(odd))} xmlns:f="{ns}">{text}</{child}>')
    if odd and draw(st.booleans()):
        children.append(draw(st.sampled_from(["<bogus>1</bogus>", "text", "<f:x/>", "<?pi?>"])))
    return f"<{tag}{declared}{draw(_attributes(odd))}>{''.join(children)}</{tag}>"


@st.composite
def soap_cases(draw, known=()):
    """A POST to /services/ws/<Service>: an envelope almost right (its fields' text),
    wrong in its structure (envelope, namespaces, elements, attributes, prolog), with a
    DTD (XXE, billion laughs; in UTF-8 or UTF-16), or broken on the way."""
    svc = draw(st.sampled_from(SERVICES))
    kind = draw(st.sampled_from(["almost", "almost", "structure", "dtd", "broken"]))
    _, name, op = draw(st.sampled_from([o for o in OPERATIONS if kind != "almost" or o[0] is svc]))
    prolog, entity, env, op_ns, frame = "", "", SOAP11, svc.namespace, "plain"
    if kind == "structure":
        prolog, frame = draw(PROLOGS), draw(st.sampled_from(sorted(FRAMES)))
        env = draw(often(SOAP11, st.sampled_from([SOAP12, "", "urn:x", SOAP11 + "/"])))
        op_ns = draw(
            often(op_ns, st.sampled_from([TYPES_NS, "", "urn:x"] + [s.namespace for s in SERVICES]))
        )
        name = draw(often(name, st.sampled_from(JUNK_NAMES[:4])))
    elif kind == "dtd":
        prolog, entity = draw(dtd(draw(st.integers(1, 12)), draw(st.integers(1, 20000))))
    operation = draw(_element(op.request, f"o:{name}", known, entity, odd=kind == "structure"))
    namespaces = (
        f'xmlns:soap="{env}" xmlns:o="{op_ns}" xmlns:t="{TYPES_NS}" xmlns:s="{svc.namespace}" '
        f'xmlns:xsi="{XSI}"'
    )
    text = FRAMES[frame].format(prolog=prolog, ns=namespaces, body=operation)
    data = text.encode("utf-8", "surrogatepass")
    path, content_type = f"/services/ws/{svc.name}", "text/xml; charset=utf-8"
    if kind == "dtd" and draw(st.booleans()):
        data = ('<?xml version="1.0" encoding="UTF-16"?>' + text).encode("utf-16", "surrogatepass")
    elif kind == "broken":
        data = draw(
            st.one_of(encoded(st.just(text)), spoiled(st.just(data)), st.binary(max_size=200))
        )
        path = draw(
            often(path, st.sampled_from(["/services/ws/XNothing", "/services/ws", f"{path}/more"]))
        )
        content_type = draw(often(content_type, CONTENT_TYPES))
    return Case("soap", post(path, data, content_type), refused=kind == "dtd")


# --------------------------------------------------------------------------- raw HTTP

#: (method, target, content type, body) of requests that are right
ROUTES = (
    ("POST", "/services/rs/XRuntime/watchJob", "application/json", b'{"id":"no-such-job"}'),
    ("POST", "/services/rs/XDemo/startSimulate", "application/json", b'{"durationMs":0}'),
    ("POST", "/services/rs/XRuntime/getRuntimeInformation", "application/json", b"{}"),
    (
        "POST",
        "/services/rpc/XRuntime",
        "application/json",
        b'{"jsonrpc":"2.0","method":"watchJob","params":{"id":"x"},"id":1}',
    ),
    (
        "POST",
        "/services/ws/XRuntime",
        "text/xml",
        f'<s:Envelope xmlns:s="{SOAP11}"><s:Body>'
        f'<r:watchJob xmlns:r="{xruntime.namespace}"><t:id xmlns:t="{TYPES_NS}">'
        "x</t:id></r:watchJob></s:Body></s:Envelope>".encode(),
    ),
    ("GET", "/services/ws/XDemo?wsdl", None, b""),
    ("POST", "/", "application/json", b"{}"),
)
METHODS = st.one_of(
    st.sampled_from(
        [
            "GET",
            "HEAD",
            "PUT",
            "DELETE",
            "OPTIONS",
            "PATCH",
            "TRACE",
            "CONNECT",
            "PRI",
            "post",
            "G E T",
            "",
            "BREW",
            "\x00GET",
            "GET\x7f",
        ]
    ),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF), max_size=12),
)
TARGETS = st.one_of(
    st.sampled_from(
        [
            "*",
            "http://fuzz/services/rs/XRuntime/getRuntimeInformation",
            "/services/ws/XRuntime?WSDL",
            "/services/rs/XRuntime/watchJob?x=%zz",
            "/services/%ff%fe",
            "/services/ws/XDemo?wsdl&x=%00",
            "/%2e%2e/etc/passwd",
            "//services//rs",
            "/services/rs/XDemo/startSimulate#frag",
            "/services/ws/XDemo?wsdl=%ff",
            "fuzz:80",
            "",
        ]
    ),
    st.text(st.characters(codec=None, exclude_characters="\r\n"), max_size=30).map(
        lambda t: "/" + t
    ),
    st.integers(1000, 70000).map(lambda n: "/services/rs/" + "a" * n),
)
VERSIONS = st.sampled_from(
    [
        "HTTP/1.0",
        "http/1.1",
        "HTTP/2.0",
        "HTTP/1.1x",
        "HTTP/0.9",
        "",
        "HTTP/1",
        "HTTP/9.9",
        "HTTP/1.1 extra",
        "HTTP/1.1\x00",
    ]
)
#: header names as HTTP allows them, with values of every size
GOOD_HEADERS = st.tuples(
    st.sampled_from(
        [
            "Host",
            "Content-Type",
            "Connection",
            "Expect",
            "Accept",
            "Upgrade",
            "X-Fuzz",
            "Cookie",
            "Accept-Encoding",
            "X-Forwarded-For",
            "X-Forwarded-Host",
            "Origin",
        ]
    ),
    st.one_of(
        st.sampled_from(
            [
                "close",
                "keep-alive",
                "100-continue",
                "websocket",
                "h2c",
                "Upgrade",
                "",
                "fuzz:99999999999",
                "[::1",
                'a b<c>"',
                "gzip, br",
                "upgrade, keep-alive",
                "\xe9\xff",
                "text/xml; charset=utf-8",
                "https://evil.example",
                "null",
                "http://127.0.0.1:1",
            ]
        ),
        st.integers(1000, 70000).map(lambda n: "v" * n),
    ),
)
#: header lines HTTP does not allow: spaces and control characters in names, no colon
BAD_HEADERS = st.tuples(
    st.one_of(
        st.sampled_from(
            ["Host ", " Host", "Bad Header", "", "Ho\x01st", "\x80\xff", "Host\x00", "\tX"]
        ),
        st.text(
            st.characters(min_codepoint=0x01, max_codepoint=0xFF, exclude_characters="\r\n:"),
            min_size=1,
            max_size=10,
        ),
    ),
    st.text(
        st.characters(min_codepoint=0x01, max_codepoint=0xFF, exclude_characters="\r\n"),
        max_size=20,
    ),
)


def _chunked(body, sizes):
    """``body`` in chunks of the given sizes, then the last chunk."""
    out, at = b"", 0
    for size in sizes:
        if at >= len(body):
            break
        out += b"%x\r\n%s\r\n" % (len(body[at : at + size]), body[at : at + size])
        at += size
    if at < len(body):
        out += b"%x\r\n%s\r\n" % (len(body) - at, body[at:])
    return out + b"0\r\n\r\n"


@st.composite
def _framed(draw, body, right):
    """(headers, body bytes, ends_open): ``body`` framed right (by its length, in
    chunks, or without a body), or, unless ``right``, every way wrong.  A request framed
    wrong may look unfinished to the server (``ends_open``)."""
    how = draw(
        st.sampled_from(
            ["length", "chunked", "none"]
            if right
            else [
                "longer",
                "shorter",
                "bad length",
                "two lengths",
                "broken chunks",
                "length and chunked",
                "other coding",
            ]
        )
    )
    if how == "length":
        return [("Content-Length", str(len(body)))], body, False
    if how == "chunked":
        return (
            [("Transfer-Encoding", "chunked")],
            _chunked(body, draw(st.lists(st.integers(1, 64), max_size=4))),
            False,
        )
    if how == "none":
        return [], b"", False
    if how == "longer":
        return [("Content-Length", str(len(body) + draw(st.integers(1, 10**6))))], body, True
    if how == "shorter":
        return [("Content-Length", str(max(0, len(body) - draw(st.integers(1, 50)))))], body, True
    if how == "bad length":
        value = draw(
            st.sampled_from(
                ["-1", "abc", "1e3", "0x10", " 5", "5 5", "+5", "9" * 30, "", "5\x00", "1,1"]
            )
        )
        return [("Content-Length", value)], body, True
    if how == "two lengths":
        return (
            [("Content-Length", str(len(body))), ("Content-Length", str(len(body) + 1))],
            body,
            True,
        )
    if how == "broken chunks":
        return (
            [("Transfer-Encoding", "chunked")],
            draw(
                st.sampled_from(
                    [
                        b"zz\r\nab\r\n0\r\n\r\n",
                        b"ffff\r\nab\r\n",
                        b"2\r\nab",
                        b"2\r\nabcd\r\n",
                        b"2;ext=\x01\r\nab\r\n0\r\n\r\n",
                        b"-1\r\nab\r\n",
                        b"0\r\nX-Trailer\r\n\r\n",
                        b"2\r\nab\r\n0\r\n",
                        b"1" * 40 + b"\r\n",
                    ]
                )
            ),
            True,
        )
    if how == "length and chunked":
        return [("Content-Length", str(len(body))), ("Transfer-Encoding", "chunked")], body, True
    coding = draw(
        st.sampled_from(["gzip", "chunked, gzip", "identity", "Chunked", "chunked, chunked", "x"])
    )
    return [("Transfer-Encoding", coding)], body, True


@st.composite
def http_cases(draw, known=()):
    """A request over a raw socket, right but for one part: its request line (bad
    methods, lower-case versions, odd targets), its headers (spaces and control
    characters in names, huge values), its framing (bad lengths, broken chunks), or
    cut short anywhere; or right with odd but allowed headers; or just bytes."""
    kind = draw(st.sampled_from(["right", "right", "line", "headers", "framing", "cut", "bytes"]))
    if kind == "bytes":
        return Case("http", draw(st.binary(min_size=1, max_size=300)), method="", ends_open=True)
    method, target, content_type, body = draw(st.sampled_from(ROUTES))
    version, headers = (
        "HTTP/1.1",
        [("Host", "127.0.0.1")] + ([("Content-Type", content_type)] if content_type else []),
    )
    if kind == "right":
        headers += draw(st.lists(GOOD_HEADERS, max_size=2))
    elif kind == "line":
        part = draw(st.sampled_from(["method", "target", "version"]))
        method = draw(METHODS) if part == "method" else method
        target = draw(TARGETS) if part == "target" else target
        version = draw(VERSIONS) if part == "version" else version
    elif kind == "headers":
        headers += draw(st.lists(BAD_HEADERS, min_size=1, max_size=3))
    framing, body, ends_open = draw(_framed(body, right=kind != "framing"))
    lines = [f"{method} {target} {version}".encode("utf-8", "surrogatepass")]
    lines += [f"{name}: {value}".encode("latin-1", "replace") for name, value in headers + framing]
    raw = b"\r\n".join(lines) + b"\r\n\r\n" + body
    if kind == "cut":
        raw, ends_open = raw[: draw(st.integers(0, len(raw) - 1))], True
    return Case("http", raw, method=method, ends_open=ends_open)


CASES = {"json": json_cases, "jsonrpc": jsonrpc_cases, "soap": soap_cases, "http": http_cases}

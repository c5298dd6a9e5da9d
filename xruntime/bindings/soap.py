"""The SOAP 1.1 binding: ``POST /services/ws/<Service>``, WSDL at ``?wsdl`` (docs/protocol.md §7).

Document/literal, bare: the body's one element names the operation and holds the
request.  The envelope is parsed with entities, DTDs and network access switched off,
and a message carrying a DTD is refused before parsing (SOAP 1.1 forbids DTDs), so an
entity-expansion body costs nothing.  The envelope is read piece by piece and the
``soap:Header``'s content is dropped as it is read (nothing here needs it: headers are
not interpreted), so a header costs no memory; the body's elements are counted before
parsing (``parsing.check_marks``), so its tree is bounded by its bytes.  Faults travel
with HTTP 500 as ``soap:Fault`` (``Client`` for InvalidRequestFault and
RejectedRequestFault, ``Server`` otherwise) with the typed fault element, declared in
the WSDL, inside ``<detail>``.
"""

import json
import re
from collections.abc import Callable, Container, Iterable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from lxml import etree
from werkzeug.wrappers import Response

from ..operations.failures import as_fault
from ..payload.stream import lazy_value
from ..protocol import codec
from ..protocol.faults import InvalidRequestFault, XServerFault
from ..protocol.typeinfo import complex_types
from ..protocol.types import NAMESPACE as TYPES_NS
from ..support import metrics
from ..support.blocking import INLINE_BYTES
from . import parsing, xml_codec
from .request import BodyRequest
from .wsdl import SCHEMA_FOLDER, build_all_wsdl, build_wsdl, polymorphic_types, schema_documents

if TYPE_CHECKING:
    from ..author.service import Operation, Service
    from ..operations.accounts import Caller
    from ..operations.dispatch import Answer, Dispatcher
    from ..settings.model import Settings

SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
XML_TYPE = "text/xml; charset=utf-8"
ACCEPTED_TYPES = ("text/xml", "application/xml", "application/soap+xml")
# <!DOCTYPE, <!ENTITY: a bare "<!"; comments and CDATA sections (whose text may hold "<!")
# are matched whole and passed over
_MARKUP_DECLARATION = re.compile(rb"<!\[CDATA\[.*?\]\]>|<!--.*?-->|<!", re.S)
_ADDRESS_PLACEHOLDER = "http://xruntime.invalid/soap-address"

_BARE_PREFIXES = {SOAP_ENV: "soap", TYPES_NS: "t"}
_PARSER_OPTIONS = dict(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    dtd_validation=False,
    huge_tree=False,
    remove_comments=True,
    remove_pis=True,
)
_HEADER = f"{{{SOAP_ENV}}}Header"
#: The envelope is fed to the parser in pieces of this size; the header's content
#: read so far is dropped after each.
FEED_BYTES = 64 * 1024
#: An XML body may hold one element or attribute per this many bytes (on average):
#: a coordinate ``<lon>8.1</lon>`` is one per 14.
XML_BYTES_PER_MARK = 12


@cache
def wsdl_template(service: "Service") -> str:
    """The service's WSDL with a placeholder address, built once."""
    return build_wsdl(service, _ADDRESS_PLACEHOLDER).decode("utf-8")


def wsdl_for(service: "Service", address: str) -> bytes:
    return (
        wsdl_template(service)
        .replace(_ADDRESS_PLACEHOLDER, escape(address, {'"': "&quot;"}))
        .encode()
    )


class SoapService:
    """What the binding needs of one service: its operations by element, its prefixes."""

    def __init__(self, service: "Service", dispatcher: "Dispatcher") -> None:
        self.service = service
        self.operations = {op.name: op for op in dispatcher.operations_of(service.name).values()}
        self.prefixes = {
            SOAP_ENV: "soap",
            xml_codec.XSI: "xsi",
            TYPES_NS: "t",
            service.namespace: "s",
        }
        for cls in polymorphic_types(service):  # e.g. other services' progress types
            self.prefixes.setdefault(cls.get_namespace(), f"n{len(self.prefixes)}")
        for op in self.operations.values():  # the types an xsi:type may name
            for cls in complex_types(op.response):
                self.prefixes.setdefault(cls.get_namespace(), f"n{len(self.prefixes)}")
        self.declarations = _declarations(self.prefixes)


def _declarations(prefixes: dict[str, str]) -> str:
    """The ``xmlns:`` attributes that declare ``prefixes`` ({namespace: prefix})."""
    return "".join(f' xmlns:{prefix}="{ns}"' for ns, prefix in prefixes.items())


class SoapBinding:
    """The SOAP binding at ``/services/ws``: ``handle(request)`` answers a Response."""

    name = "soap"  # in metrics

    def __init__(self, dispatcher: "Dispatcher", settings: "Callable[[], Settings]") -> None:
        self.dispatcher = dispatcher
        self.settings = settings
        self.services = {
            name: SoapService(svc, dispatcher) for name, svc in dispatcher.services.items()
        }
        for svc in dispatcher.services.values():
            wsdl_template(svc)  # built once, at start-up
        schema_documents()

    @staticmethod
    def is_public(method: str, path: str, query: bytes) -> bool:
        """A WSDL and its schemas may be public ([auth] public_wsdl), so that clients
        can be generated."""
        return method == "GET" and (
            _schema_name(path) is not None
            or _asks_wsdl(parse_qs(query.decode("latin-1"), keep_blank_values=True))
        )

    async def handle(self, request: BodyRequest, caller: "Caller") -> Response:
        name = request.path.strip("/")
        schema = _schema_name(name)
        if schema is not None and request.method == "GET":
            document = schema_documents().get(schema)
            if document is None:
                return Response(
                    f"no schema {schema} here; a WSDL names the ones it imports\n",
                    status=404,
                    content_type="text/plain; charset=utf-8",
                )
            return Response(document, content_type=XML_TYPE)
        soap = self.services.get(name)
        if request.method == "GET" and _asks_wsdl(request.args):
            if name == "":  # every service's, for wsimport
                served = [
                    s.service
                    for n, s in self.services.items()
                    if self.settings().service_enabled(n)
                ]
                return Response(
                    build_all_wsdl(served, self._address(request, "").rstrip("/")),
                    content_type=XML_TYPE,
                )
            if soap is None or not self.settings().service_enabled(name):
                return Response(
                    f"no WSDL here: the service {name} is not served\n",
                    status=404,
                    content_type="text/plain; charset=utf-8",
                )
            return Response(
                wsdl_for(soap.service, self._address(request, name)), content_type=XML_TYPE
            )
        try:
            if soap is None:
                raise InvalidRequestFault(
                    f"there is no service {name!r}; services are at /services/ws/<Service>"
                )
            if request.method != "POST":
                raise InvalidRequestFault(
                    f"{request.method} is not allowed; POST a SOAP envelope, "
                    f"or GET {request.base_url}?wsdl"
                )
            self.dispatcher.check_enabled(name)
            op, (data, sent) = await parsing.parse(
                request.content_length, self.settings().max_request_bytes, self._read, request, soap
            )
            size = request.content_length
            del request  # a held watch keeps nothing of the request
            answer = await self.dispatcher.call(op, data, caller, sent, size=size)
        except Exception as exc:
            return self._fault(soap, as_fault(exc, f"SOAP {name}"))
        if answer.large() or len(answer.text) > INLINE_BYTES:  # streamed from the pool
            return Response(self._streamed(soap, op, answer), content_type=XML_TYPE)
        # one Response for all the watchers sharing the answer
        return answer.rendered(
            f"soap:{name}:{op.name}",
            lambda: Response(b"".join(self._streamed(soap, op, answer)), content_type=XML_TYPE),
        )

    def _streamed(self, soap: SoapService, op: "Operation", answer: "Answer") -> Iterator[bytes]:
        """The answer's envelope as text, in chunks: a large result is never a tree, and
        a large stored one never whole (its arrays are read as they are written,
        ``payload.stream``).  (The ASGI application runs a large one's chunks in
        the pool.)"""
        stored = answer.stored
        try:
            data = lazy_value(stored) if stored is not None else json.loads(answer.text)
            head, tail = _envelope_ends(soap.declarations)
            yield head.encode("utf-8")
            for chunk in xml_codec.iter_text(
                f"s:{op.name}Response", data, op.response, soap.prefixes
            ):
                yield chunk.encode("utf-8")
            yield tail.encode("utf-8")
        finally:
            if stored is not None:
                stored.close()

    def refusal(self, path: str, fault: XServerFault) -> Response:
        return self._fault(self.services.get(path.strip("/")), fault)

    def _address(self, request: BodyRequest, name: str) -> str:
        """The address of the service ``name`` (of /services/ws itself for "") as the
        client reached it, or under the configured public URL."""
        public = self.settings().public_url
        return f"{public}/services/ws/{name}" if public else request.base_url

    # ------------------------------------------------------------------ reading

    def _read(
        self, request: BodyRequest, soap: SoapService
    ) -> tuple["Operation", tuple[dict[str, Any], dict[str, str]]]:
        limit = self.settings().max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise InvalidRequestFault(
                f"the request body has {request.content_length} bytes, more "
                f"than the {limit} this server accepts"
            )
        if request.mimetype not in ACCEPTED_TYPES:
            raise InvalidRequestFault(
                f"the content type {request.mimetype or 'none'} is not XML; "
                "SOAP 1.1 messages are text/xml"
            )
        body = request.stream.read(limit + 1)
        if len(body) > limit:
            raise InvalidRequestFault(
                f"the request body is larger than the {limit} bytes this server accepts"
            )
        if any(m.group() == b"<!" for m in _MARKUP_DECLARATION.finditer(body)):
            raise InvalidRequestFault(
                "the message contains a DTD or entity declaration, which SOAP 1.1 forbids",
                hint="Send the envelope without <!DOCTYPE>.",
            )
        # elements (start tags, and comments or CDATA, which count too) and attributes
        parsing.check_marks(
            body,
            body.count(b"<") - body.count(b"</") + body.count(b"="),
            XML_BYTES_PER_MARK,
            "XML elements and attributes",
        )
        try:
            root = _parse_envelope(body)
        except etree.XMLSyntaxError as exc:
            raise InvalidRequestFault(f"the request is not well-formed XML: {exc}") from exc
        docinfo = root.getroottree().docinfo
        if docinfo.doctype or docinfo.internalDTD is not None:  # e.g. in UTF-16
            raise InvalidRequestFault(
                "the message contains a DTD, which SOAP 1.1 forbids",
                hint="Send the envelope without <!DOCTYPE>.",
            )
        if root.tag != f"{{{SOAP_ENV}}}Envelope":
            raise InvalidRequestFault("the request is not a SOAP 1.1 envelope")
        body_elem = root.find(f"{{{SOAP_ENV}}}Body")
        payload = [c for c in body_elem if isinstance(c.tag, str)] if body_elem is not None else []
        if len(payload) != 1:
            raise InvalidRequestFault("the SOAP body must hold exactly one operation element")
        qname = etree.QName(payload[0])
        op = soap.operations.get(qname.localname)
        if op is None or qname.namespace != soap.service.namespace:
            raise InvalidRequestFault(
                f"the service {soap.service.name} has no operation "
                f"{{{qname.namespace}}}{qname.localname}"
            )
        return op, xml_codec.read(payload[0], op.request)

    # ------------------------------------------------------------------ writing

    def _envelope(
        self, soap: SoapService | None, fill: Iterable[str], status: int = 200
    ) -> Response:
        """An envelope whose body holds ``fill``, pieces of XML text written with the
        prefixes of ``soap`` (with no service, the bare ones)."""
        head, tail = _envelope_ends(soap.declarations if soap else _declarations(_BARE_PREFIXES))
        text = head + "".join(fill) + tail
        return Response(text.encode("utf-8"), status=status, content_type=XML_TYPE)

    def _fault(self, soap: SoapService | None, fault: XServerFault) -> Response:
        metrics.fault_answered(fault)
        data = codec.encode_fault(fault)["faultInfo"]
        data.pop(codec.TYPE_KEY)
        # the protocol's faults are declared in the types namespace, a service's own in
        # its namespace (schemas/<Service>.xsd)
        ns = fault.get_namespace()
        prefixes = soap.prefixes if soap is not None and ns in soap.prefixes else _BARE_PREFIXES
        fill = [
            f"<soap:Fault><faultcode>soap:{fault.soap_faultcode}</faultcode>"
            f"<faultstring>{xml_codec.escaped(fault.faultstring)}</faultstring><detail>",
            *xml_codec.iter_text(
                f"{prefixes[ns]}:{fault.get_type_name()}", data, type(fault), prefixes
            ),
            "</detail></soap:Fault>",
        ]
        return self._envelope(soap, fill, status=500)


def _parse_envelope(body: bytes) -> etree._Element:
    """The envelope's root element, its ``soap:Header`` (if any) empty: the header's
    descendants are dropped as they are read, so they are never a tree.  Only the
    elements the parser has finished are removed (all but the last child at each
    level of the open header), so the tree under construction stays whole."""
    parser = etree.XMLPullParser(events=("start",), tag=_HEADER, **_PARSER_OPTIONS)
    header = None
    view = memoryview(body)
    for at in range(0, len(body), FEED_BYTES):
        parser.feed(bytes(view[at : at + FEED_BYTES]))
        for _, elem in parser.read_events():
            parent = elem.getparent()
            if header is None and parent is not None and parent.getparent() is None:
                header = elem  # the Envelope's own header, not a body element
        if header is not None:
            _drop_finished(header)
    root = parser.close()
    if header is not None:
        del header[:]
    return root


def _drop_finished(elem: etree._Element) -> None:
    """Remove the finished descendants of ``elem``, an element being parsed: at each
    level every child but the last (the one the parser may still be in)."""
    while len(elem):
        if len(elem) > 1:
            del elem[:-1]
        elem = elem[-1]


def _schema_name(path: str) -> str | None:
    """The file a path asks for under schemas/ (``schemas/types.xsd``), else None."""
    folder, _, name = path.strip("/").partition("/")
    return name if folder == SCHEMA_FOLDER and name else None


def _asks_wsdl(args: Container[str]) -> bool:
    return "wsdl" in args or "WSDL" in args


def _envelope_ends(declarations: str) -> tuple[str, str]:
    """The text before and after the body's content, for every envelope we write."""
    return (
        f"<?xml version='1.0' encoding='utf-8'?>\n<soap:Envelope{declarations}><soap:Body>",
        "</soap:Body></soap:Envelope>",
    )

"""The WSDLs and XML Schemas of the services, from the one definition of their types.

Every operation is document/literal, *bare*: the SOAP body holds one element named after
the operation whose type is the request (``<startSimulate>`` of type SimulateRequest),
and the answer one element ``<startSimulateResponse>`` of the response type.  Every
operation declares every fault, so generated clients get typed exceptions.  Subtypes
of the polymorphic types (progress, result limitations, faults) are declared too, so a
client can read what travels with ``xsi:type``.

**One schema document per namespace**, served at ``/services/ws/schemas/<file>.xsd``
and imported by every WSDL that needs it under that one relative address
(``schemas/types.xsd``): the protocol's types (``Job``, the faults, ...) are defined
once, in the same text for every service, so a client generated from several WSDLs in
one run (JAX-WS ``wsimport``, Mono's ``wsdl``) gets one ``Job``.  Identical copies
inline in each WSDL were measured: ``wsimport`` refuses them ("'JobStatus' is already
defined"), whereas a document imported from one address is read once.

What the generators need of the schemas (docs/soap-binding.md):

- Global elements exist only for the operations and the faults.  spyne declares one
  per type; JAXB makes a factory method of each, and ``JobProgress``'s collided with
  the one of the field ``Job/progress``, so ``wsimport`` refused every WSDL.
- Optional fields are ``minOccurs="0"``, not ``nillable``: absent means not given.
  (JAXB wraps an optional nillable field in ``JAXBElement``.)
- The schemas are ``elementFormDefault="unqualified"``: the operations' and faults'
  elements are namespaced, the fields' elements are not, so every SOAP client writes a
  field the same way whichever namespace declares its type (npm ``soap`` writes a field
  in the namespace of the element that holds it).

spyne writes the type definitions; the messages are read and written by
``bindings.soap`` with the same type metadata.
"""

import logging
import re
from collections.abc import Iterable, Sequence
from functools import cache
from typing import TYPE_CHECKING

from lxml import etree
from spyne import Application, ServiceBase
from spyne.interface.xml_schema import XmlSchema
from spyne.protocol.soap import Soap11

from ..protocol.faults import XServerFault
from ..protocol.typeinfo import is_protocol_type, original, subclasses
from ..protocol.types import NAMESPACE as TYPES_NS
from ..protocol.types import JobProgress, ResultLimitation, XModel

if TYPE_CHECKING:
    from ..author.service import Service

logging.getLogger("spyne").setLevel(logging.WARNING)

#: A type a schema declares: a model of the protocol or of a service, or a fault.
ModelClass = type[XModel] | type[XServerFault]

POLYMORPHIC_BASES = (JobProgress, ResultLimitation, XServerFault)
WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
SOAP_BIND_NS = "http://schemas.xmlsoap.org/wsdl/soap/"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
SOAP_HTTP = "http://schemas.xmlsoap.org/soap/http"
JAXWS_NS = "http://java.sun.com/xml/ns/jaxws"
#: Where the schema documents are, relative to a WSDL's address (…/services/ws/XDemo).
SCHEMA_FOLDER = "schemas"
TYPES_FILE = "types.xsd"
#: The namespace of the WSDL of every service (build_all_wsdl).
ALL_SERVICES_NS = "http://xruntime.org/xserver"
ALL_SERVICES_FILE = "XServices.wsdl"
_UNUSED_NS = "urn:xruntime:unused"  # spyne's application must have one


def declared_faults(service: "Service") -> list[type[XServerFault]]:
    """The fault classes a service's operations may raise: the protocol's and its own."""
    return [c for c in subclasses(XServerFault) if _visible(c, service)]


def polymorphic_types(service: "Service") -> list[ModelClass]:
    """The subtypes a service's messages may carry with ``xsi:type``."""
    return [cls for base in POLYMORPHIC_BASES for cls in subclasses(base) if _visible(cls, service)]


def _visible(cls: type, service: "Service") -> bool:
    """Protocol types, the types that belong to this service, and for XRuntime every
    service's progress types (its watchJob answers any job)."""
    if is_protocol_type(cls) or cls.__dict__.get("__namespace__") == service.namespace:
        return True
    if not (service.shows_all_progress and issubclass(cls, JobProgress)):
        return False
    from ..operations.runtime_service import served_services

    return cls.__dict__.get("__namespace__") in {s.namespace for s in served_services().values()}


# --------------------------------------------------------------------------- schemas


def _services() -> "dict[str, Service]":
    from ..operations.runtime_service import served_services

    return served_services()


def schema_file(namespace: str) -> str:
    """The file name of a namespace's schema document: types.xsd, <Service>.xsd for a
    service's namespace, else the namespace's last segment."""
    return _catalogue()[1][namespace][1]


def _prefixes() -> dict[str, str]:
    """{namespace: prefix}: the same prefixes in every document we write."""
    return {XSD_NS: "xs", **{ns: prefix for ns, (prefix, _) in _catalogue()[1].items()}}


@cache
def _catalogue() -> tuple[dict[str, etree._Element], dict[str, tuple[str, str]]]:
    """spyne's schemas of every type of every service ({namespace: xs:schema}) and the
    prefix and file of each namespace ({namespace: (prefix, file)})."""
    services = _services()
    classes: list[type] = []
    for service in services.values():
        for op in service.operations().values():
            classes += [op.request, op.response]
        classes += polymorphic_types(service) + declared_faults(service) + list(service.extra_types)
    written = _spyne_schemas(classes)
    names = {TYPES_NS: ("t", TYPES_FILE)}
    wanted = [(s.namespace, s.name) for s in services.values()]
    wanted += [
        (ns, re.sub(r"[^A-Za-z0-9]+", "-", ns.rstrip("/").rsplit("/", 1)[-1]) or "schema")
        for ns in sorted(written)
    ]
    taken = {"xs", "tns", "wsdl", "soap"} | {prefix for prefix, _ in names.values()}
    for namespace, stem in wanted:
        if namespace in names:
            continue
        prefix, file, n = stem.lower(), stem, 1
        while prefix in taken or f"{file}.xsd" in {f for _, f in names.values()}:
            prefix, file, n = f"{stem.lower()}{n}", f"{stem}{n}", n + 1
        taken.add(prefix)
        names[namespace] = (prefix, f"{file}.xsd")
    return written, names


@cache
def schema_documents() -> dict[str, bytes]:
    """{file name: XML Schema document} of every namespace: the protocol's types, each
    service's, and any other its types are in.  The same documents whichever service's
    WSDL imports them."""
    services = _services()
    written, names = _catalogue()
    # {namespace: {element name: its type}}
    elements: dict[str, dict[str, ModelClass]] = {namespace: {} for namespace in names}
    for service in services.values():
        for name, op in service.operations().items():
            elements[service.namespace][name] = original(op.request)
            elements[service.namespace][name + "Response"] = original(op.response)
        for cls in declared_faults(service):
            elements[cls.get_namespace()][cls.get_type_name()] = cls
    return {
        names[namespace][1]: _serialised(_schema(namespace, written.get(namespace), named))
        for namespace, named in elements.items()
    }


def _spyne_schemas(classes: Iterable[type]) -> dict[str, etree._Element]:
    """{namespace: xs:schema} as spyne writes the type definitions of ``classes``."""

    class Types(ServiceBase):
        pass

    app = Application([Types], tns=_UNUSED_NS, in_protocol=Soap11(), out_protocol=Soap11())
    for cls in classes:
        app.interface.add_class(original(cls))
    writer = XmlSchema(app.interface, element_form_default="unqualified")
    writer.build_interface_document()
    return {
        schema.get("targetNamespace"): schema
        for schema in writer.get_interface_document().values()
        if schema.get("targetNamespace") != _UNUSED_NS
    }


def _schema(
    namespace: str, written: etree._Element | None, elements: dict[str, ModelClass]
) -> etree._Element:
    """The schema document of ``namespace``: spyne's type definitions (``written``)
    without its global elements or optional fields' ``nillable``, the ``elements``
    ({name: type}) and an import, with its file, of every namespace it refers to."""
    prefixes = _prefixes()
    declarations = []
    for node in written if written is not None else []:
        if not isinstance(node.tag, str) or etree.QName(node).localname in ("import", "element"):
            continue
        declarations.append(_renamed(node, prefixes))
    for name, cls in elements.items():
        element = etree.Element(f"{{{XSD_NS}}}element", name=name)
        element.set("type", f"{prefixes[cls.get_namespace()]}:{cls.get_type_name()}")
        declarations.append(element)
    for node in declarations:
        for field in node.iter(f"{{{XSD_NS}}}element"):
            if field.get("minOccurs") == "0" and field.get("nillable") == "true":
                del field.attrib["nillable"]
    referred = {
        _namespace_of(value, prefixes)
        for node in declarations
        for attribute in ("type", "base")
        for e in node.iter()
        if (value := e.get(attribute))
    }
    others = sorted(referred - {namespace, XSD_NS})
    schema = etree.Element(
        f"{{{XSD_NS}}}schema",
        targetNamespace=namespace,
        elementFormDefault="unqualified",
        nsmap={prefixes[ns]: ns for ns in [XSD_NS, namespace, *others]},
    )
    for other in others:
        etree.SubElement(
            schema, f"{{{XSD_NS}}}import", namespace=other, schemaLocation=schema_file(other)
        )
    for node in sorted(declarations, key=_declaration_key):
        schema.append(node)
    etree.cleanup_namespaces(schema, top_nsmap=schema.nsmap, keep_ns_prefixes=list(schema.nsmap))
    return schema


def _renamed(node: etree._Element, prefixes: dict[str, str]) -> etree._Element:
    """A copy of ``node`` whose QName values use ``prefixes`` instead of spyne's."""
    copy = etree.fromstring(etree.tostring(node))
    for original_elem, elem in zip(node.iter(), copy.iter(), strict=True):
        for attribute in ("type", "base", "ref"):
            value = elem.get(attribute)
            if value and ":" in value:
                prefix, local = value.split(":", 1)
                elem.set(attribute, f"{prefixes[original_elem.nsmap[prefix]]}:{local}")
    return copy


def _namespace_of(qname: str, prefixes: dict[str, str]) -> str:
    """The namespace of a ``prefix:name`` written with ``prefixes``."""
    prefix = qname.split(":", 1)[0]
    return next(ns for ns, p in prefixes.items() if p == prefix)


_ORDER = ["import", "simpleType", "complexType", "element"]


def _declaration_key(elem: etree._Element) -> tuple[int, str]:
    local = etree.QName(elem).localname
    return (_ORDER.index(local) if local in _ORDER else len(_ORDER), elem.get("name") or "")


def _serialised(root: etree._Element) -> bytes:
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", pretty_print=True)


# --------------------------------------------------------------------------- WSDL


def exception_name(fault: str) -> str:
    """The name of a fault's WSDL message, which JAX-WS gives its exception class:
    UnknownJobException, whose getFaultInfo() is the UnknownJobFault of the types
    package (the same name would make every catch of it ambiguous in Java)."""
    return (fault[: -len("Fault")] if fault.endswith("Fault") else fault) + "Exception"


def _without_wrapper_style(root: etree._Element) -> None:
    """JAX-WS unwraps a request into parameters and the answer into Holders when the
    operation's element is named after it (its "wrapper style", which every operation
    here matches); a binding declaration embedded in the WSDL keeps the request and
    answer objects, without a bindings file.  Other clients ignore it."""
    jaxws = etree.SubElement(root, f"{{{JAXWS_NS}}}bindings", nsmap={"jaxws": JAXWS_NS})
    etree.SubElement(jaxws, f"{{{JAXWS_NS}}}enableWrapperStyle").text = "false"


def build_wsdl(service: "Service", address: str) -> bytes:
    """The WSDL of ``service`` with ``address`` as its ``soap:address``: its messages,
    port type, binding and port, and imports of the schema documents it uses."""
    prefixes = _prefixes()
    used = {TYPES_NS, service.namespace} | {
        cls.get_namespace() for cls in polymorphic_types(service)
    }
    nsmap = {"wsdl": WSDL_NS, "soap": SOAP_BIND_NS, "xs": XSD_NS, "tns": service.namespace}
    nsmap.update({prefixes[ns]: ns for ns in sorted(used) if ns != service.namespace})
    W = lambda tag, **attrs: etree.Element(f"{{{WSDL_NS}}}{tag}", **attrs)  # noqa: E731
    S = lambda tag, **attrs: etree.Element(f"{{{SOAP_BIND_NS}}}{tag}", **attrs)  # noqa: E731
    root = etree.Element(
        f"{{{WSDL_NS}}}definitions",
        nsmap=nsmap,
        name=service.name,
        targetNamespace=service.namespace,
    )
    _without_wrapper_style(root)
    types = etree.SubElement(root, f"{{{WSDL_NS}}}types")
    imports = etree.SubElement(types, f"{{{XSD_NS}}}schema")
    for ns in sorted(used, key=lambda ns: (ns != TYPES_NS, schema_file(ns))):
        etree.SubElement(
            imports,
            f"{{{XSD_NS}}}import",
            namespace=ns,
            schemaLocation=f"{SCHEMA_FOLDER}/{schema_file(ns)}",
        )

    def own(name: str) -> str:
        return f"tns:{name}"

    faults = declared_faults(service)
    operations = sorted(service.operations())
    for name in operations:
        for message in (name, name + "Response"):
            root.append(W("message", name=message))
            root[-1].append(W("part", name=message, element=own(message)))
    for cls in faults:
        fault = cls.get_type_name()
        prefix = (
            "tns" if cls.get_namespace() == service.namespace else prefixes[cls.get_namespace()]
        )
        root.append(W("message", name=exception_name(fault)))
        root[-1].append(W("part", name=fault, element=f"{prefix}:{fault}"))
    port_type = etree.SubElement(root, f"{{{WSDL_NS}}}portType", name=service.name)
    binding = etree.SubElement(
        root, f"{{{WSDL_NS}}}binding", name=service.name, type=own(service.name)
    )
    binding.append(S("binding", style="document", transport=SOAP_HTTP))
    for name in operations:
        abstract = etree.SubElement(port_type, f"{{{WSDL_NS}}}operation", name=name)
        abstract.append(W("input", name=name, message=own(name)))
        abstract.append(W("output", name=name + "Response", message=own(name + "Response")))
        concrete = etree.SubElement(binding, f"{{{WSDL_NS}}}operation", name=name)
        concrete.append(S("operation", soapAction=name, style="document"))
        for direction, message in (("input", name), ("output", name + "Response")):
            etree.SubElement(concrete, f"{{{WSDL_NS}}}{direction}", name=message).append(
                S("body", use="literal")
            )
        for cls in faults:
            fault = cls.get_type_name()
            abstract.append(W("fault", name=fault, message=own(exception_name(fault))))
            etree.SubElement(concrete, f"{{{WSDL_NS}}}fault", name=fault).append(
                S("fault", name=fault, use="literal")
            )
    port = etree.SubElement(
        etree.SubElement(root, f"{{{WSDL_NS}}}service", name=service.name),
        f"{{{WSDL_NS}}}port",
        name=service.name,
        binding=own(service.name),
    )
    port.append(S("address", location=address))
    return _serialised(root)


def build_all_wsdl(services: "Sequence[Service]", at: str) -> bytes:
    """One WSDL for every service in ``services``, at ``at`` (…/services/ws) + ?wsdl: it
    imports each service's WSDL and declares a port of each.  JAX-WS ``wsimport``
    generates the client of one root WSDL's services only (given several WSDLs, it
    takes one of them), so this is the document that gives every client in one run."""
    nsmap = {"wsdl": WSDL_NS, "soap": SOAP_BIND_NS}
    prefixes = _prefixes()
    nsmap.update({prefixes[service.namespace]: service.namespace for service in services})
    root = etree.Element(
        f"{{{WSDL_NS}}}definitions", nsmap=nsmap, name="XServices", targetNamespace=ALL_SERVICES_NS
    )
    _without_wrapper_style(root)
    for service in services:
        etree.SubElement(
            root,
            f"{{{WSDL_NS}}}import",
            namespace=service.namespace,
            location=f"{at}/{service.name}?wsdl",
        )
    for service in services:
        # named <Service>Service: the port types (XDemo) become the interfaces
        element = etree.SubElement(root, f"{{{WSDL_NS}}}service", name=f"{service.name}Service")
        port = etree.SubElement(
            element,
            f"{{{WSDL_NS}}}port",
            name=service.name,
            binding=f"{prefixes[service.namespace]}:{service.name}",
        )
        etree.SubElement(port, f"{{{SOAP_BIND_NS}}}address", location=f"{at}/{service.name}")
    return _serialised(root)

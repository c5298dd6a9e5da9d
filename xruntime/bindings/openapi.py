"""The OpenAPI document of the JSON binding, from the one definition of the types.

Served at ``/services/rs/openapi.json`` (public exactly when the WSDLs are) and written
by ``xruntime wsdl --out`` beside them, it is made from the same spyne types, operations
and faults the WSDL and the codec read (``protocol.typeinfo``), never by hand:

- one path per operation, ``POST /services/rs/<Service>/<operation>``, with the
  operation's name as its ``operationId`` (``<Service>_<operation>`` where two services
  name an operation alike) and the service as its tag; its body required only where
  the request has a required field (an empty body is the request ``{}``);
- each request and response type, each enumeration and each fault a named component
  under its WSDL type name (prefixed with its service's name only where two services
  name a type alike), so that generated models have readable names;
- every bound the codec checks (required fields, ranges, lengths, enumerations, no
  unknown field), and the bounds the WSDL cannot state, checked where the job is
  started or watched (``RUNTIME_BOUNDS``, ``RUNTIME_REQUIRED``);
- a value declared as a type with subtypes (progress, result limitations, a fault's
  info) as ``oneOf`` its subtypes with a discriminator on ``$type``, which answers
  always carry there;
- a type's description: the first sentence of its docstring;
- every fault status the binding answers, with the ``Fault`` schema, and
  ``Retry-After`` where the binding sends it.

OpenAPI 3.0 (not 3.1): what every generator and gateway reads, and what the OGC API's
``oas30`` class asks for (``bindings.ogcapi`` reuses the schemas made here).
"""

import copy
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from spyne.model import ModelBase

from .. import __version__
from ..callbacks.targets import MAX_URL_CHARS, PROGRESS_PERIOD_MS
from ..operations.jobs import LIST_LIMIT_MAX
from ..protocol.codec import TYPE_KEY
from ..protocol.faults import XServerFault
from ..protocol.typeinfo import (
    BOOL,
    ENUM,
    FLOAT,
    INT,
    OBJ,
    Field,
    complex_types,
    fields,
    is_polymorphic,
    is_protocol_type,
    original,
    subclasses,
)
from ..protocol.types import Callback, ListJobsRequest, Timeouts, WatchJobsRequest
from .wsdl import declared_faults, polymorphic_types, schema_file

if TYPE_CHECKING:
    from ..author.service import Operation, Service
    from ..settings.model import Settings

OPENAPI_VERSION = "3.0.3"
#: Where the JSON binding's operations are, and its document.
JSON_PREFIX = "/services/rs"
DOCUMENT_NAME = "openapi.json"
COMPONENTS = "#/components/schemas/"
JSON_MEDIA = "application/json"
FAULT = "Fault"
#: Missing or wrong credentials (accounts on): the ASGI application's 401, a Fault.
UNAUTHENTICATED = 401


def longest_request_timeout(settings: "Settings") -> int:
    """The longest ``timeouts`` a start request may ask for, in ms: the ``[jobs]``
    ``max_request_timeout``, or a service's own where it is longer (``Timeouts`` is one
    type for every service; each service refuses past its own)."""
    own = [s.jobs.max_request_timeout_ms for s in settings.services.values() if s.jobs is not None]
    return max([settings.jobs.max_request_timeout_ms, *own])


#: Bounds the WSDL cannot state, checked where a job is started, watched or listed:
#: (type, field) → the schema keywords, from the settings in force.
RUNTIME_BOUNDS: dict[tuple[type, str], Callable[["Settings"], dict[str, Any]]] = {
    (WatchJobsRequest, "ids"): lambda s: {"minItems": 1, "maxItems": s.max_watched_ids},
    (ListJobsRequest, "limit"): lambda s: {"minimum": 1, "maximum": LIST_LIMIT_MAX},
    (Callback, "progressPeriod"): lambda s: {
        "minimum": PROGRESS_PERIOD_MS[0],
        "maximum": PROGRESS_PERIOD_MS[1],
    },
    (Callback, "url"): lambda s: {"maxLength": MAX_URL_CHARS},
    (Timeouts, "queueingTimeout"): lambda s: {"minimum": 0, "maximum": longest_request_timeout(s)},
    (Timeouts, "computationTimeout"): lambda s: {
        "minimum": 0,
        "maximum": longest_request_timeout(s),
    },
}
#: Fields the server requires though the WSDL cannot say so: watchJobs' ``ids``, which
#: SOAP cannot tell from an empty list (refused alike, ``InvalidValueFault``).
RUNTIME_REQUIRED: frozenset[tuple[type, str]] = frozenset({(WatchJobsRequest, "ids")})


def stated(settings: "Settings") -> tuple[str, ...]:
    """What of ``settings`` a document states (``RUNTIME_BOUNDS``): with the services
    served, the key of a document made once (a live reload may change it)."""
    return tuple(json.dumps(bound(settings), sort_keys=True) for bound in RUNTIME_BOUNDS.values())


_NUMBER_BOUNDS = (
    ("ge", "minimum", False),
    ("gt", "minimum", True),
    ("le", "maximum", False),
    ("lt", "maximum", True),
)


def _finite(bound: Any) -> bool:
    try:
        return bound is not None and abs(float(bound)) != float("inf")
    except (TypeError, ValueError):
        return False


class SchemaBook:
    """The named schemas (``components.schemas``) of the types of ``services``' messages,
    made as positions ask for them (``position``): a component per complex type,
    enumeration and fault, a ``oneOf`` where a type with subtypes is declared."""

    def __init__(self, services: "Iterable[Service]", settings: "Settings") -> None:
        self.services = list(services)
        self.settings = settings
        self.schemas: dict[str, dict[str, Any]] = {}
        namespaces = {s.namespace for s in self.services}
        #: every type these services' messages may carry: protocol types and their own
        self._visible = lambda cls: (
            is_protocol_type(cls) or (cls.__dict__.get("__namespace__") in namespaces)
        )
        known: list[type] = []
        bodies: list[type] = []
        for service in self.services:
            for op in service.operations().values():
                bodies += [original(op.request), original(op.response)]
                known += complex_types(op.request) + complex_types(op.response)
            for cls in polymorphic_types(service) + declared_faults(service):
                known += complex_types(cls)
            for cls in service.extra_types:
                known += complex_types(cls)
        self._names = _component_names(known + _enums(known))
        #: types that travel where a type with subtypes is declared, which carry ``$type``
        #: there; required unless the type is also declared where it travels without
        #: (``_bare_positions``)
        self._typed = {
            c for base in self._polymorphic_positions(known) for c in self._subtypes(base)
        }
        self._always_typed = self._typed - self._bare_positions(known, bodies)

    # ------------------------------------------------------------------ names

    def name(self, cls: type) -> str:
        """The component name of a type: its WSDL type name, unless two types share it."""
        return self._names[original(cls)]

    def ref(self, cls: type) -> dict[str, str]:
        return {"$ref": COMPONENTS + self.name(cls)}

    # ------------------------------------------------------------------ positions

    def position(self, declared: type) -> dict[str, Any]:
        """The schema of a value declared as ``declared`` (a field's type, a body)."""
        cls = original(declared)
        if hasattr(cls, "_type_info") and is_polymorphic(cls):
            variants = self._subtypes(cls)
            for variant in variants:
                self._component(variant)
            return {
                "oneOf": [self.ref(v) for v in variants],
                "discriminator": {
                    "propertyName": TYPE_KEY,
                    "mapping": {v.get_type_name(): COMPONENTS + self.name(v) for v in variants},
                },
            }
        self._component(cls)
        return self.ref(cls)

    def fault(self) -> dict[str, str]:
        """The ``Fault`` schema, ``{message, faultInfo: {$type, hint, …}}``."""
        if FAULT not in self.schemas:
            self.schemas[FAULT] = {
                "type": "object",
                "description": "A fault: the message for people, and the fault's type "
                "and fields, its hint on what to do among them.",
                "properties": {
                    "message": {"type": "string"},
                    "faultInfo": self.position(XServerFault),
                },
                "required": ["message", "faultInfo"],
                "additionalProperties": False,
            }
        return {"$ref": COMPONENTS + FAULT}

    def inline(self, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` with every reference replaced by the component it names: one
        JSON Schema that stands alone (an OGC process's input and output)."""
        if "$ref" in schema:
            return self.inline(self.schemas[schema["$ref"][len(COMPONENTS) :]])
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "discriminator":
                out[key] = {"propertyName": value["propertyName"]}  # (its mapping names refs)
            elif isinstance(value, dict) and key != "mapping":
                out[key] = (
                    {k: self.inline(v) for k, v in value.items()}
                    if key == "properties"
                    else self.inline(value)
                )
            elif isinstance(value, list) and key in ("oneOf", "allOf", "anyOf"):
                out[key] = [self.inline(v) for v in value]
            else:
                out[key] = copy.deepcopy(value)
        return out

    # ------------------------------------------------------------------ components

    def _subtypes(self, cls: type) -> list[Any]:
        """``cls`` and its subtypes that these services' messages may carry."""
        return [c for c in subclasses(cls) if self._visible(c)]

    def _polymorphic_positions(self, known: list[type]) -> set[type]:
        """The types with subtypes declared as a field's type (and the faults' root)."""
        found: set[type] = {XServerFault}
        for cls in known:
            for f in fields(cls):
                t = original(f.type)
                if f.kind == OBJ and is_polymorphic(t):
                    found.add(t)
        return found

    def _bare_positions(self, known: list[type], bodies: list[type]) -> set[type]:
        """The types declared where their values carry no ``$type``: a field's type
        without subtypes, a request or response body."""
        found = {b for b in bodies if not is_polymorphic(b)}
        for cls in known:
            for f in fields(cls):
                t = original(f.type)
                if f.kind == OBJ and not is_polymorphic(t):
                    found.add(t)
        return found

    def required(self, cls: type) -> list[str]:
        """The fields of ``cls`` a request must have: the WSDL's and ``RUNTIME_REQUIRED``."""
        lineage = _lineage(cls)
        return [
            f.name
            for f in fields(cls)
            if f.required or any((c, f.name) in RUNTIME_REQUIRED for c in lineage)
        ]

    def _component(self, cls: Any) -> None:
        name = self.name(cls)
        if name in self.schemas:
            return
        if not hasattr(cls, "_type_info"):  # an enumeration
            self.schemas[name] = {"type": "string", "enum": list(cls.__values__)}
            return
        self.schemas[name] = {}  # (taken before its fields: no type refers back to itself)
        properties: dict[str, Any] = {}
        required: list[str] = []
        if cls in self._typed:
            properties[TYPE_KEY] = {"type": "string", "enum": [cls.get_type_name()]}
            if cls in self._always_typed:
                required.append(TYPE_KEY)
        for f in fields(cls):
            properties[f.name] = self._field(cls, f)
        required += self.required(cls)
        schema: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        if cls.__module__ != ModelBase.__module__:
            description = first_sentence(cls.__doc__ or "")
            if description:
                schema["description"] = description
        self.schemas[name] = schema

    def _field(self, owner: type, f: Field) -> dict[str, Any]:
        item = self._value(f)
        extra: dict[str, Any] = {}
        for cls in _lineage(owner):
            bounds = RUNTIME_BOUNDS.get((cls, f.name))
            if bounds is not None:
                extra = bounds(self.settings)
        if f.many:
            return {"type": "array", "items": item, **extra}
        if "$ref" in item and extra:
            return {"allOf": [item], **extra}
        return {**item, **extra}

    def _value(self, f: Field) -> dict[str, Any]:
        attrs = f.attrs
        if f.kind in (OBJ, ENUM):
            return self.position(f.type)
        if f.kind == BOOL:
            return {"type": "boolean"}
        if f.kind in (INT, FLOAT):
            schema: dict[str, Any] = (
                {"type": "integer", "format": "int64"}
                if f.kind == INT
                else {"type": "number", "format": "double"}
            )
            for attribute, keyword, exclusive in _NUMBER_BOUNDS:
                bound: Any = getattr(attrs, attribute, None)
                if _finite(bound):
                    schema[keyword] = int(bound) if f.kind == INT else float(bound)
                    if exclusive:
                        schema["exclusive" + keyword[:1].upper() + keyword[1:]] = True
            return schema
        schema = {"type": "string"}
        if attrs.max_len is not None and _finite(attrs.max_len):
            schema["maxLength"] = int(attrs.max_len)
        return schema


#: The end of a docstring's sentence: a full stop and two spaces, or a line's end.
_SENTENCE_END = re.compile(r"(?<=\.)(?: {2,}|\s*\n)")


def first_sentence(doc: str) -> str:
    """A docstring's first sentence, on one line, in Markdown (what follows it speaks
    to the code's readers)."""
    first = _SENTENCE_END.split(doc.strip(), maxsplit=1)[0]
    return " ".join(first.split()).replace("``", "`")


def _lineage(cls: type) -> list[type]:
    found: list[type] = []
    c: Any = original(cls)
    while c is not None and hasattr(c, "_type_info"):
        found.append(c)
        c = getattr(c, "__extends__", None)
    return found


def _enums(known: list[type]) -> list[type]:
    found: list[type] = []
    for cls in known:
        for f in fields(cls):
            if f.kind == ENUM and original(f.type) not in found:
                found.append(original(f.type))
    return found


def _component_names(types: Iterable[type]) -> dict[type, str]:
    """{type: component name}: its type name, or, where types of several namespaces
    share one, ``<file stem>_<name>`` for the ones outside the protocol's namespace."""
    distinct = list(dict.fromkeys(original(t) for t in types))
    by_name: dict[str, list[type]] = {}
    for t in distinct:
        by_name.setdefault(t.get_type_name(), []).append(t)
    names: dict[type, str] = {}
    for name, alike in by_name.items():
        for t in alike:
            if len(alike) == 1 or is_protocol_type(t):
                names[t] = name
            else:
                names[t] = schema_file(t.get_namespace()).rsplit(".", 1)[0] + "_" + name
    return names


# --------------------------------------------------------------------------- the document


def fault_statuses() -> list[int]:
    """Every HTTP status the JSON binding answers a fault with."""
    return sorted({c.http_status for c in subclasses(XServerFault)} | {UNAUTHENTICATED})


def fault_responses(book: SchemaBook, statuses: Iterable[int]) -> dict[str, Any]:
    """The ``responses`` entries of the fault statuses, each with the Fault schema."""
    retry_after = {c.http_status for c in subclasses(XServerFault) if c.retry_after_s is not None}
    out: dict[str, Any] = {}
    for status in statuses:
        kinds = sorted(
            c.get_type_name() for c in subclasses(XServerFault) if c.http_status == status
        )
        response: dict[str, Any] = {
            "description": (
                "Missing or wrong credentials (with accounts on): AccessDeniedFault, "
                "with a Basic challenge"
                if status == UNAUTHENTICATED
                else "A fault: " + ", ".join(kinds)
            ),
            "content": {JSON_MEDIA: {"schema": book.fault()}},
        }
        if status == UNAUTHENTICATED:
            response["headers"] = {
                "WWW-Authenticate": {"schema": {"type": "string"}, "description": "Basic"}
            }
        if status in retry_after:
            response["headers"] = {
                "Retry-After": {
                    "schema": {"type": "integer"},
                    "description": "Seconds after which the same request may succeed "
                    "(TemporarilyUnavailableFault)",
                }
            }
        out[str(status)] = response
    return out


SECURITY_SCHEMES = {
    "basic": {
        "type": "http",
        "scheme": "basic",
        "description": "Your user name and token (with accounts on)",
    },
    "bearer": {"type": "http", "scheme": "bearer", "description": "Your token (with accounts on)"},
}
#: Credentials are needed only with accounts on: either scheme, or none.
SECURITY: list[dict[str, list[str]]] = [{"basic": []}, {"bearer": []}, {}]


def operation_ids(services: "Iterable[Service]") -> dict[tuple[str, str], str]:
    """{(service, operation): operationId}: the operation's name, or
    ``<Service>_<operation>`` where two services name an operation alike (two services
    made by ``xruntime new-service`` both have ``process``)."""
    services = list(services)
    names = Counter(name for s in services for name in s.operations())
    return {
        (s.name, name): name if names[name] == 1 else f"{s.name}_{name}"
        for s in services
        for name in s.operations()
    }


def _operation(
    book: SchemaBook, op: "Operation", service: "Service", operation_id: str
) -> dict[str, Any]:
    from ..author.service import CALL, FETCH, RUN, START

    summary = {
        START: "Start a job; answers it QUEUING at once",
        FETCH: "The result of a SUCCEEDED job (or the intermediate result of a stopped one)",
        RUN: "Run the job and answer its result (the synchronous form)",
        CALL: "",
    }[op.kind]
    entry: dict[str, Any] = {"operationId": operation_id, "tags": [service.name]}
    doc = first_sentence(getattr(op.target, "__doc__", None) or "") if op.kind == CALL else ""
    if summary or doc:
        entry["summary"] = summary or doc.rstrip(".")
    entry["requestBody"] = {
        # (an empty body is the request {}: required only where {} is refused)
        "required": bool(book.required(original(op.request))),
        "content": {JSON_MEDIA: {"schema": book.position(op.request)}},
    }
    entry["responses"] = {
        "200": {
            "description": f"The {op.response.get_type_name()}",
            "content": {JSON_MEDIA: {"schema": book.position(op.response)}},
        },
        **fault_responses(book, fault_statuses()),
    }
    return entry


def build(services: "Iterable[Service]", settings: "Settings") -> dict[str, Any]:
    """The OpenAPI document of the JSON binding of ``services``."""
    services = sorted(services, key=lambda s: s.name)
    book = SchemaBook(services, settings)
    ids = operation_ids(services)
    paths: dict[str, Any] = {}
    for service in services:
        for name, op in service.operations().items():
            paths[f"{JSON_PREFIX}/{service.name}/{name}"] = {
                "post": _operation(book, op, service, ids[service.name, name])
            }
    book.fault()
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            # (a generator names its package after the title: xruntime_json_binding_client)
            "title": "xruntime JSON binding",
            "version": __version__,
            "description": "Long operations as asynchronous jobs (the xServer job protocol). "
            "Start a job, watch it with XRuntime's watchJob, stop or delete it, fetch "
            "its result. A value whose type has subtypes names its type in $type.",
        },
        "servers": [{"url": "/"}],
        "tags": [{"name": s.name, "description": s.description} for s in services],
        "security": SECURITY,
        "paths": paths,
        "components": {
            "schemas": dict(sorted(book.schemas.items())),
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


def document_bytes(document: dict[str, Any]) -> bytes:
    """A document as written to a file and served: the same bytes."""
    return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


Made = TypeVar("Made")


def made_once(
    make: Callable[[list["Service"], "Settings"], Made],
) -> Callable[["Iterable[Service]", "Settings"], Made]:
    """``make(services, settings)`` made once per set of services and of what it states
    of the settings (``stated``): not at every GET, and again after a live edit."""
    made: dict[tuple[object, ...], Made] = {}

    def found(services: "Iterable[Service]", settings: "Settings") -> Made:
        services = list(services)
        key = (tuple(s.name for s in services), stated(settings))
        if key not in made:
            made[key] = make(services, settings)
        return made[key]

    return found


#: The served document of the services served under some settings, as the bytes served
#: and written.
served = made_once(lambda services, settings: document_bytes(build(services, settings)))

"""Long operations as OGC API – Processes' processes: their ids, descriptions and
execute requests.

Every long operation of every served service is one process, ``<Service>.<operation>``
(``XDemo.simulate``), outside services' alike.  Its description is made from the same
definition every binding and the WSDL read: one input per field of the operation's
request (``callback`` aside: the execute request's ``subscriber`` is its OGC form), each
with the JSON Schema the JSON binding's OpenAPI document states for it (the WSDL's
bounds and the ones checked at the start, ``openapi.SchemaBook``), made to stand alone;
and one output, ``result``, whose schema is the response type.

An execute request (``read_execution``) becomes the operation's request object, which
the dispatcher then decodes and validates as it does every binding's: ``inputs`` are
the request's fields (an input given as a qualified value, ``{"value": …}``, is taken
as that value); ``outputs`` may ask for ``result`` by value; ``response`` is ``raw``
(default) or ``document``; ``subscriber`` becomes the request's ``callback``
(docs/ogcapi.md, "Subscriber").
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ... import __version__
from ...author.service import LongOperation, Operation, Service
from ...protocol.faults import InvalidRequestFault, InvalidValueFault, MissingParameterFault
from ...protocol.typeinfo import OBJ, fields, original
from ..openapi import SchemaBook, made_once
from .jobs import JSON_MEDIA, REL_JOB_LIST, process_id

REL_EXECUTE = "http://www.opengis.net/def/rel/ogc/1.0/execute"
#: What every process allows: both execution modes, and DELETE of its jobs.
JOB_CONTROL = ["async-execute", "sync-execute", "dismiss"]
#: Results are sent in the answer, never left somewhere to fetch.
OUTPUT_TRANSMISSION = ["value"]
#: The one output of every process.
OUTPUT = "result"
#: The request's field that is not an input: ``subscriber`` is its OGC form.
CALLBACK = "callback"
#: ms between the progress callbacks an ``inProgressUri`` asks for (the least allowed).
PROGRESS_PERIOD_MS = 1000
#: An execute request's members.
EXECUTE_KEYS = ("inputs", "outputs", "response", "subscriber")
#: The members of a qualified input value (``{"value": …, "mediaType": …}``).
QUALIFIED_KEYS = frozenset({"value", "mediaType", "encoding", "schema"})
#: The members of a link (an input given by reference).
LINK_KEYS = frozenset({"href", "rel", "type", "hreflang", "title"})


@dataclass(frozen=True)
class Process:
    """One long operation as a process: its service, and the three operations the
    dispatcher serves for it."""

    service: Service
    operation: LongOperation
    start: Operation
    run: Operation
    fetch: Operation

    @property
    def id(self) -> str:
        return process_id(self.service.name, self.operation.name)


def processes(services: Iterable[Service]) -> dict[str, Process]:
    """Every long operation of ``services`` (the served ones) as a process, by id,
    sorted by id."""
    found: dict[str, Process] = {}
    for service in services:
        ops = service.operations()
        for long in service.long_operations.values():
            process = Process(
                service, long, ops[long.start_name], ops[long.name], ops[long.fetch_name]
            )
            found[process.id] = process
    return dict(sorted(found.items()))


def _sentence(text: str) -> str:
    return " ".join(text.split())


def summary(process: Process, base: str) -> dict[str, Any]:
    """The process summary (``/processes``), its links under ``base``."""
    long = process.operation
    doc = _sentence((long.function.__doc__ or "").split("\n\n")[0])
    here = f"{base}/processes/{process.id}"
    return {
        "id": process.id,
        "title": f"{process.service.name} {long.name}",
        "description": " ".join(
            part
            for part in (
                _sentence(process.service.description),
                doc,
                f"The long operation {long.name} of the service {process.service.name}: "
                f"its request {long.request.get_type_name()}, its result "
                f"{long.response.get_type_name()}.",
            )
            if part
        ),
        "keywords": [process.service.name, long.name],
        "version": __version__,
        "jobControlOptions": list(JOB_CONTROL),
        "outputTransmission": list(OUTPUT_TRANSMISSION),
        "links": [
            {"href": here, "rel": "self", "type": JSON_MEDIA, "title": "its description"},
            {
                "href": here + "/execution",
                "rel": REL_EXECUTE,
                "type": JSON_MEDIA,
                "title": "execute it",
            },
            {
                "href": f"{base}/jobs?processID={process.id}",
                "rel": REL_JOB_LIST,
                "type": JSON_MEDIA,
                "title": "its jobs",
            },
        ],
    }


def inputs_schema(book: SchemaBook, process: Process) -> dict[str, Any]:
    """The request's schema, every reference resolved, without ``callback``: one
    property per input."""
    schema = book.inline(book.position(process.operation.request))
    properties = {k: v for k, v in schema.get("properties", {}).items() if k != CALLBACK}
    required = [k for k in schema.get("required", ()) if k != CALLBACK]
    return {**schema, "properties": properties, **({"required": required} if required else {})}


def description(process: Process, book: SchemaBook, base: str) -> dict[str, Any]:
    """The process description (``/processes/{id}``): the summary, one input per
    request field and the output ``result``, each with a JSON Schema that stands alone."""
    long = process.operation
    request = inputs_schema(book, process)
    required = set(request.get("required", ()))
    inputs = {}
    for name, schema in request["properties"].items():
        entry: dict[str, Any] = {
            "title": name,
            "description": schema.get("description")
            or f"The field {name} of {long.request.get_type_name()}.",
            "minOccurs": 1 if name in required else 0,
            "maxOccurs": 1,
            "schema": schema,
        }
        inputs[name] = entry
    result = book.inline(book.position(long.response))
    return {
        **summary(process, base),
        "inputs": inputs,
        "outputs": {
            OUTPUT: {
                "title": long.response.get_type_name(),
                "description": f"The {long.response.get_type_name()}, as the JSON binding's "
                f"{long.fetch_name} answers it.",
                "schema": result,
            }
        },
    }


# --------------------------------------------------------------------------- execute


@dataclass(frozen=True)
class Execution:
    """An execute request, read: the operation's request object (the codec's plain
    form) and the form of a synchronous answer (``document``: ``{"result": {"value":
    …}}``; else raw, the result itself)."""

    request: dict[str, Any]
    document: bool


def read_execution(body: Any, process: Process) -> Execution:
    """The Execution of an execute request's body; InvalidValueFault (or
    MissingParameterFault) naming what cannot be honoured."""
    if not isinstance(body, dict):
        raise InvalidRequestFault(
            "the execute request must be a JSON object",
            hint='Send {"inputs": {...}}, with the request\'s fields as inputs.',
        )
    for key in body:
        if key not in EXECUTE_KEYS:
            raise InvalidValueFault(
                f"an execute request has no member {key}",
                parameter=key,
                hint="Its members: " + ", ".join(EXECUTE_KEYS) + ".",
            )
    given = body.get("inputs")
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise InvalidValueFault(
            "inputs must be an object: input id → value", parameter="inputs", value=_shown(given)
        )
    declared = {f.name: f for f in fields(process.operation.request)}
    request: dict[str, Any] = {}
    for name, value in given.items():
        if name == CALLBACK:
            raise InvalidValueFault(
                "callback is not an input of a process",
                parameter="inputs.callback",
                hint="Ask for callbacks with the execute request's subscriber "
                '({"successUri": URL}).',
            )
        request[name] = _value(name, value, declared.get(name))
    _check_outputs(body.get("outputs"))
    response = body.get("response")
    if response not in (None, "raw", "document"):
        raise InvalidValueFault(
            "response must be raw or document", parameter="response", value=_shown(response)
        )
    callback = _callback(body.get("subscriber"))
    if callback is not None:
        request[CALLBACK] = callback
    return Execution(request, response == "document")


def _shown(value: Any) -> str:
    return str(value)[:200]


def _value(name: str, value: Any, declared: Any) -> Any:
    """An input's value: a qualified value's ``value``; an input by reference refused
    (unless the field's own type has such members)."""
    if not isinstance(value, dict):
        return value
    own: set[str] = set()
    if declared is not None and declared.kind == OBJ and not declared.many:
        cls = original(declared.type)
        own = {f.name for f in fields(cls)} if hasattr(cls, "_type_info") else set()
    keys = set(value)
    if "value" in keys and keys <= QUALIFIED_KEYS and "value" not in own:
        return value["value"]
    if "href" in keys and keys <= LINK_KEYS and "href" not in own:
        raise InvalidValueFault(
            f"input {name} is given by reference; this server takes inputs by value only",
            parameter=f"inputs.{name}",
            value=_shown(value.get("href")),
            hint="Send the value itself.",
        )
    return value


def _check_outputs(outputs: Any) -> None:
    """``outputs`` may ask for ``result``, by value, as JSON."""
    if outputs is None:
        return
    if not isinstance(outputs, dict):
        raise InvalidValueFault(
            "outputs must be an object: output id → how to send it",
            parameter="outputs",
            value=_shown(outputs),
        )
    for name, how in outputs.items():
        where = f"outputs.{name}"
        if name != OUTPUT:
            raise InvalidValueFault(
                f"there is no output {name}; the one output of every process is {OUTPUT}",
                parameter=where,
            )
        if how is None:
            continue
        if not isinstance(how, dict):
            raise InvalidValueFault(
                f"{where} must be an object", parameter=where, value=_shown(how)
            )
        mode = how.get("transmissionMode")
        if mode not in (None, "value"):
            raise InvalidValueFault(
                "results are sent by value only",
                parameter=f"{where}.transmissionMode",
                value=_shown(mode),
            )
        media = (
            (how.get("format") or {}).get("mediaType")
            if isinstance(how.get("format"), dict)
            else None
        )
        if media is not None and media.split(";")[0].strip().lower() != JSON_MEDIA:
            raise InvalidValueFault(
                f"the result is sent as {JSON_MEDIA} only",
                parameter=f"{where}.format.mediaType",
                value=_shown(media),
            )


def _callback(subscriber: Any) -> dict[str, Any] | None:
    """The request's ``callback`` a ``subscriber`` asks for: the store keeps one URL per
    job, which gets the job's end, success or failure (and, with ``inProgressUri``,
    its progress); so ``successUri`` is that URL, and ``failedUri`` and
    ``inProgressUri`` may only name it again."""
    if subscriber is None:
        return None
    if not isinstance(subscriber, dict):
        raise InvalidValueFault(
            "subscriber must be an object: successUri, and failedUri or inProgressUri",
            parameter="subscriber",
            value=_shown(subscriber),
        )
    for key, value in subscriber.items():
        if key not in ("successUri", "failedUri", "inProgressUri"):
            raise InvalidValueFault(
                f"a subscriber has no member {key}",
                parameter=f"subscriber.{key}",
                hint="Its members: successUri, failedUri, inProgressUri.",
            )
        if value is not None and not isinstance(value, str):
            raise InvalidValueFault(
                f"subscriber.{key} must be a URL",
                parameter=f"subscriber.{key}",
                value=_shown(value),
            )
    url = subscriber.get("successUri")
    if url is None:
        raise MissingParameterFault(
            "subscriber needs a successUri: the URL the job's end is sent to",
            parameter="subscriber.successUri",
        )
    for key in ("failedUri", "inProgressUri"):
        other = subscriber.get(key)
        if other is not None and other != url:
            raise InvalidValueFault(
                f"subscriber.{key} must be the successUri or absent: this server sends every "
                "event of a job (its end, however it ended, and its progress) to one URL",
                parameter=f"subscriber.{key}",
                value=_shown(other),
                hint="Give one URL as successUri (and the same as failedUri and inProgressUri "
                "if you like); the event's status tells success from failure.",
            )
    callback: dict[str, Any] = {"url": url}
    if subscriber.get("inProgressUri") is not None:
        callback["progressPeriod"] = PROGRESS_PERIOD_MS
    return callback


# --------------------------------------------------------------------------- made once


#: The SchemaBook of the services served under some settings (each process
#: description's schemas), made once, and again after a live edit that changes them.
book_of = made_once(SchemaBook)

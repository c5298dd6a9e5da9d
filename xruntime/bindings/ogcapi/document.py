"""The OpenAPI 3.0 document of the OGC API – Processes binding (``/ogcapi/api``).

The ``oas30`` conformance class asks for the API's definition as OpenAPI 3.0; this one
is made in code, from the same definitions as the other documents: the standard's
resources (landing page, conformance, processes, jobs, results, its exception as an
RFC 7807 problem) as components of their own (``Ogc…``), and for each process an
execute path whose ``inputs`` and results are the operation's request and response
types as the JSON binding's document names them (``openapi.SchemaBook``).  Served at
``/ogcapi/api`` (public exactly when the WSDLs are) and written by ``xruntime wsdl
--out`` beside the WSDLs (``api_document``): the same document, since nothing in it
depends on the request.
"""

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ... import __version__
from ...protocol.faults import XServerFault
from ...protocol.typeinfo import subclasses
from ...protocol.types import JobProgress
from ..openapi import (
    COMPONENTS,
    OPENAPI_VERSION,
    SECURITY,
    SECURITY_SCHEMES,
    SchemaBook,
    document_bytes,
    fault_statuses,
    made_once,
)
from .jobs import LIMIT_DEFAULT, LIMIT_MAX, STORED_OF
from .processes import CALLBACK, JOB_CONTROL, OUTPUT, OUTPUT_TRANSMISSION, processes

if TYPE_CHECKING:
    from ...author.service import Service
    from ...settings.model import Settings

#: Where the binding is, and this document's file name when written beside the WSDLs.
PREFIX = "/ogcapi"
DOCUMENT_NAME = "ogcapi.json"
JSON = "application/json"
PROBLEM = "application/problem+json"
OPENAPI_MEDIA = "application/vnd.oai.openapi+json;version=3.0"
#: Statuses this binding answers beside the faults' own: no such resource, no such method.
HTTP_STATUSES = (404, 405)

STOP_NOTE = (
    "Stopping a job and keeping what it computed so far is an xruntime extension: "
    "Part 1 has no word for it. XRuntime's stopJob does it for a job started here as for "
    'any (POST /services/rs/XRuntime/stopJob with {"id": jobID}; also in SOAP and '
    "JSON-RPC); the job then ends successful with an intermediate result, or failed with "
    "RequestStoppedFault when it had nothing yet. watchJob (POST "
    "/services/rs/XRuntime/watchJob) follows a job by long polling instead of asking "
    "for its status again and again."
)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": COMPONENTS + name}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _ogc_schemas(book: SchemaBook) -> dict[str, Any]:
    """The standard's documents as components (its schemas, OpenAPI 3.0)."""
    link = {
        "type": "object",
        "required": ["href"],
        "properties": {
            "href": {"type": "string"},
            "rel": {"type": "string"},
            "type": {"type": "string"},
            "hreflang": {"type": "string"},
            "title": {"type": "string"},
        },
    }
    summary = {
        "type": "object",
        "required": ["id", "version"],
        "properties": {
            "id": {"type": "string", "description": "<Service>.<operation>"},
            "title": {"type": "string"},
            "description": {"type": "string"},
            "keywords": _array({"type": "string"}),
            "version": {"type": "string"},
            "jobControlOptions": _array(
                {"type": "string", "enum": ["sync-execute", "async-execute", "dismiss"]}
            ),
            "outputTransmission": _array({"type": "string", "enum": ["value", "reference"]}),
            "links": _array(_ref("OgcLink")),
        },
    }
    described: dict[str, Any] = {
        "type": "object",
        "required": ["schema"],
        "properties": {
            "title": {"type": "string"},
            "description": {"type": "string"},
            "schema": {"type": "object", "description": "A JSON Schema (OpenAPI 3.0 form)"},
        },
    }
    status_info = {
        "type": "object",
        "required": ["jobID", "status", "type", "processID"],
        "properties": {
            "processID": {"type": "string"},
            "type": {"type": "string", "enum": ["process"]},
            "jobID": {"type": "string"},
            "status": _ref("OgcStatusCode"),
            "message": {"type": "string"},
            "created": {"type": "string", "format": "date-time"},
            "started": {"type": "string", "format": "date-time"},
            "finished": {"type": "string", "format": "date-time"},
            "updated": {"type": "string", "format": "date-time"},
            "progress": {"type": "integer", "minimum": 0, "maximum": 100},
            "xserver:status": {
                "type": "string",
                "description": "The job's xServer status (QUEUING, RUNNING, STOPPING, "
                "SUCCEEDED, FAILED, DELETED): the standard's running is RUNNING or STOPPING",
            },
            "xserver:progress": {
                **book.position(JobProgress),
                "description": "The job's progress as the service reported it, with its "
                "$type, as watchJob answers it in the JSON binding",
            },
            "links": _array(_ref("OgcLink")),
        },
    }
    return {
        "OgcLink": link,
        "OgcLandingPage": {
            "type": "object",
            "required": ["links"],
            "properties": {
                "title": {"type": "string"},
                "description": {"type": "string"},
                "links": _array(_ref("OgcLink")),
            },
        },
        "OgcConfClasses": {
            "type": "object",
            "required": ["conformsTo"],
            "properties": {"conformsTo": _array({"type": "string"})},
        },
        "OgcProcessSummary": summary,
        "OgcProcessList": {
            "type": "object",
            "required": ["processes", "links"],
            "properties": {
                "processes": _array(_ref("OgcProcessSummary")),
                "links": _array(_ref("OgcLink")),
            },
        },
        "OgcInputDescription": {
            **described,
            "properties": {
                **described["properties"],
                "minOccurs": {"type": "integer"},
                "maxOccurs": {"type": "integer"},
            },
        },
        "OgcOutputDescription": described,
        "OgcProcess": {
            "allOf": [
                _ref("OgcProcessSummary"),
                {
                    "type": "object",
                    "properties": {
                        "inputs": {
                            "type": "object",
                            "additionalProperties": _ref("OgcInputDescription"),
                        },
                        "outputs": {
                            "type": "object",
                            "additionalProperties": _ref("OgcOutputDescription"),
                        },
                    },
                },
            ]
        },
        "OgcStatusCode": {"type": "string", "enum": list(STORED_OF)},
        "OgcStatusInfo": status_info,
        "OgcJobList": {
            "type": "object",
            "required": ["jobs", "links"],
            "properties": {
                "jobs": _array(_ref("OgcStatusInfo")),
                "links": _array(_ref("OgcLink")),
            },
        },
        "OgcSubscriber": {
            "type": "object",
            "description": "Callbacks, signed as Standard Webhooks sign (docs/protocol.md "
            "§14): the job's end, success or failure, is POSTed to successUri; failedUri "
            "may only name the same URL; inProgressUri, the same URL too, adds the job's "
            "progress, at most once a second",
            "required": ["successUri"],
            "properties": {
                "successUri": {"type": "string", "format": "uri"},
                "inProgressUri": {"type": "string", "format": "uri"},
                "failedUri": {"type": "string", "format": "uri"},
            },
            "additionalProperties": False,
        },
        "OgcOutput": {
            "type": "object",
            "properties": {
                "format": {
                    "type": "object",
                    "properties": {
                        "mediaType": {"type": "string", "enum": [JSON]},
                        "encoding": {"type": "string"},
                        "schema": {"type": "object"},
                    },
                },
                "transmissionMode": {"type": "string", "enum": ["value"]},
            },
        },
        "OgcProblem": {
            "type": "object",
            "description": "An RFC 7807 problem document; message and faultInfo are the "
            "JSON binding's fault, of which faultInfo's $type names the type",
            "required": ["type", "title", "status", "detail", "message", "faultInfo"],
            "properties": {
                "type": {"type": "string"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
                "instance": {"type": "string"},
                "message": {"type": "string"},
                "faultInfo": book.position(XServerFault),
            },
        },
    }


def _problems(statuses: Iterable[int]) -> dict[str, Any]:
    """The ``responses`` entries of error statuses, each an OgcProblem."""
    retry_after = {c.http_status for c in subclasses(XServerFault) if c.retry_after_s is not None}
    out: dict[str, Any] = {}
    for status in sorted(set(statuses)):
        meaning = {
            400: "The request is wrong: a parameter, an input, the execute request",
            401: "Missing or wrong credentials (with accounts on), with a Basic challenge",
            403: "Not allowed",
            404: "No such process (no-such-process), job (no-such-job, also another "
            "user's), result not ready yet (result-not-ready), or path",
            405: "The path does not serve this method",
            409: "The job's state refuses it (a child job is dismissed with its parent)",
            429: "A quota of yours is reached",
            500: "The job failed with this fault, or the server did",
            503: "The queue is full or the service is not served, or the store is away "
            "for a moment",
            504: "The job timed out",
        }.get(status, "A fault")
        response: dict[str, Any] = {
            "description": meaning,
            "content": {PROBLEM: {"schema": _ref("OgcProblem")}},
        }
        headers: dict[str, Any] = {}
        if status == 401:
            headers["WWW-Authenticate"] = {"schema": {"type": "string"}, "description": "Basic"}
        if status in retry_after:
            headers["Retry-After"] = {
                "schema": {"type": "integer"},
                "description": "Seconds after which the same request may succeed",
            }
        if status == 405:
            headers["Allow"] = {"schema": {"type": "string"}, "description": "The methods served"}
        if headers:
            response["headers"] = headers
        out[str(status)] = response
    return out


ERRORS = sorted(set(fault_statuses()) | set(HTTP_STATUSES))


def _get(
    operation_id: str,
    summary: str,
    ok: dict[str, Any],
    parameters: list[dict[str, Any]] | None = None,
    errors: Iterable[int] = (400, 401, 404, 405, 500, 503),
    description: str | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"operationId": operation_id, "summary": summary}
    if description:
        entry["description"] = description
    if parameters:
        entry["parameters"] = parameters
    entry["responses"] = {"200": ok, **_problems(errors)}
    return entry


def _json_ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _path_id(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


LIMIT = _query(
    "limit",
    {"type": "integer", "minimum": 1, "default": LIMIT_DEFAULT},
    f"At most this many (at most {LIMIT_MAX} are answered)",
)
CURSOR = _query("cursor", {"type": "string"}, "The next page: as the next link gives it")
FORMAT = _query("f", {"type": "string", "enum": ["json"]}, "The format: JSON, the one served")


def _process_paths(book: SchemaBook, services: "list[Service]") -> tuple[dict, dict, list]:
    """Each process's execute path, the schemas it names, and its Results components."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    results: list[dict[str, str]] = []
    for pid, process in processes(services).items():
        long = process.operation
        stem = pid.replace(".", "_")
        book.position(long.request)
        request = book.schemas[book.name(long.request)]
        inputs = {
            **request,
            "properties": {k: v for k, v in request["properties"].items() if k != CALLBACK},
            "description": f"The inputs of {pid}: the fields of "
            f"{long.request.get_type_name()} (callback aside: see subscriber)",
        }
        required = [k for k in request.get("required", ()) if k != CALLBACK]
        if required:
            inputs["required"] = required
        else:
            inputs.pop("required", None)
        response = book.position(long.response)
        schemas[f"{stem}_Inputs"] = inputs
        schemas[f"{stem}_Execute"] = {
            "type": "object",
            "properties": {
                "inputs": _ref(f"{stem}_Inputs"),
                "outputs": {
                    "type": "object",
                    "properties": {OUTPUT: _ref("OgcOutput")},
                    "additionalProperties": False,
                },
                "response": {"type": "string", "enum": ["raw", "document"], "default": "raw"},
                "subscriber": _ref("OgcSubscriber"),
            },
            "additionalProperties": False,
        }
        schemas[f"{stem}_Results"] = {
            "type": "object",
            "description": f"The results document of {pid}",
            "required": [OUTPUT],
            "properties": {
                OUTPUT: {
                    "type": "object",
                    "required": ["value"],
                    "properties": {"value": response},
                }
            },
            "additionalProperties": False,
        }
        results.append(_ref(f"{stem}_Results"))
        paths[f"/processes/{pid}/execution"] = {
            "post": {
                "operationId": f"execute_{stem}",
                "tags": [process.service.name],
                "summary": f"Execute {pid}: a job (Prefer: respond-async), or synchronously",
                "description": "With Prefer: respond-async, the job is started and answered "
                "at once (201, its statusInfo, Location). Without it, the job is run and "
                "its result answered when it ends: raw (the result itself, as the JSON "
                f"binding's {long.fetch_name} answers it) or, with response document, "
                '{"result": {"value": …}}. ' + STOP_NOTE,
                "parameters": [
                    {
                        "name": "Prefer",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                        "description": "respond-async: start a job and answer at once (RFC "
                        "7240; other preferences are ignored)",
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {JSON: {"schema": _ref(f"{stem}_Execute")}},
                },
                "responses": {
                    "200": _json_ok(
                        f"The result of a synchronous execution: the "
                        f"{long.response.get_type_name()} (response raw) or the results "
                        "document (response document)",
                        {"oneOf": [response, _ref(f"{stem}_Results")]},
                    ),
                    "201": {
                        "description": "The job is started (Prefer: respond-async)",
                        "headers": {
                            "Location": {
                                "schema": {"type": "string"},
                                "description": "The job's status: /ogcapi/jobs/{jobID}",
                            },
                            "Preference-Applied": {
                                "schema": {"type": "string"},
                                "description": "respond-async",
                            },
                        },
                        "content": {JSON: {"schema": _ref("OgcStatusInfo")}},
                    },
                    **_problems(ERRORS),
                },
            }
        }
    return paths, schemas, results


def api_document(services: "Iterable[Service]", settings: "Settings") -> dict[str, Any]:
    """The OpenAPI 3.0 document of the OGC API binding of ``services`` (those served;
    the ones without a long operation, XRuntime's, offer no process and are left out)."""
    services = sorted((s for s in services if s.long_operations), key=lambda s: s.name)
    book = SchemaBook(services, settings)
    ogc = _ogc_schemas(book)
    process_paths, process_schemas, results = _process_paths(book, services)
    job_id = _path_id("jobID", "The job's id (the same in every binding)")
    process_id = _path_id("processID", "<Service>.<operation>, e.g. XDemo.simulate")
    results_schema = {"oneOf": results} if results else {"type": "object"}
    paths: dict[str, Any] = {
        "/": {
            "get": _get(
                "getLandingPage",
                "The landing page",
                _json_ok("Links to the API's resources", _ref("OgcLandingPage")),
                errors=(401, 500),
            )
        },
        "/conformance": {
            "get": _get(
                "getConformanceClasses",
                "The conformance classes served",
                _json_ok("Their URIs", _ref("OgcConfClasses")),
                errors=(401, 500),
            )
        },
        "/api": {
            "get": _get(
                "getAPI",
                "This document",
                {
                    "description": "The OpenAPI 3.0 document of this API",
                    "content": {OPENAPI_MEDIA: {"schema": {"type": "object"}}},
                },
                errors=(401, 500),
            )
        },
        "/processes": {
            "get": _get(
                "getProcesses",
                "The processes: every long operation of every service served",
                _json_ok("A page of process summaries", _ref("OgcProcessList")),
                [LIMIT, CURSOR, FORMAT],
                errors=(400, 401, 500),
            )
        },
        "/processes/{processID}": {
            "get": _get(
                "getProcessDescription",
                "A process's description: its inputs (its request's fields) and its output",
                _json_ok("The description", _ref("OgcProcess")),
                [process_id, FORMAT],
                errors=(400, 401, 404, 500),
            )
        },
        **process_paths,
        "/jobs": {
            "get": _get(
                "getJobs",
                "The jobs you may see, newest first: yours (an admin's: everyone's)",
                _json_ok("A page of jobs", _ref("OgcJobList")),
                [
                    LIMIT,
                    _query(
                        "processID",
                        _array({"type": "string"}),
                        "Only jobs of these processes (repeated, or separated by commas)",
                    ),
                    _query(
                        "status",
                        _array(_ref("OgcStatusCode")),
                        "Only jobs in these statuses (repeated, or separated by commas)",
                    ),
                    _query(
                        "type",
                        _array({"type": "string", "enum": ["process"]}),
                        "Only jobs of this type: every job is a process's",
                    ),
                    _query(
                        "datetime",
                        {"type": "string"},
                        "Only jobs created at this RFC 3339 instant (to the millisecond) or "
                        "in this interval, start/end, .. or nothing for an open end",
                    ),
                    _query(
                        "minDuration",
                        {"type": "integer", "minimum": 0},
                        "Only jobs that ran at least this many seconds (from started to "
                        "finished, or to now while they run)",
                    ),
                    _query(
                        "maxDuration",
                        {"type": "integer", "minimum": 0},
                        "Only jobs that ran at most this many seconds",
                    ),
                    CURSOR,
                    FORMAT,
                ],
                errors=(400, 401, 500, 503),
            )
        },
        "/jobs/{jobID}": {
            "get": _get(
                "getStatus",
                "A job's status",
                _json_ok("Its statusInfo", _ref("OgcStatusInfo")),
                [job_id, FORMAT],
                errors=(400, 401, 404, 500, 503),
                description=STOP_NOTE,
            ),
            "delete": {
                "operationId": "dismiss",
                "summary": "Dismiss a job: deleteJob; a running job's work is stopped and "
                "the job erased once its worker let go, a finished job erased at once",
                "description": STOP_NOTE,
                "parameters": [job_id],
                "responses": {
                    "200": _json_ok("The job, dismissed", _ref("OgcStatusInfo")),
                    **_problems((401, 404, 409, 500, 503)),
                },
            },
        },
        "/jobs/{jobID}/results": {
            "get": _get(
                "getResult",
                "A finished job's results: the results document, or its fault",
                _json_ok("The results document of a successful job", results_schema),
                [job_id, FORMAT],
                errors=ERRORS,
            )
        },
    }
    clash = set(ogc) & set(book.schemas) | set(process_schemas) & set(book.schemas)
    if clash:
        raise ValueError(f"component names taken twice: {sorted(clash)}")
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "xruntime: OGC API – Processes – Part 1: Core",
            "version": __version__,
            "description": "Every long operation of every service served is a process "
            "(<Service>.<operation>); each job is the same job in every binding of the "
            "xServer job protocol (JSON, SOAP, JSON-RPC). Job control: "
            + ", ".join(JOB_CONTROL)
            + "; results by "
            + ", ".join(OUTPUT_TRANSMISSION)
            + ". "
            + STOP_NOTE,
        },
        "servers": [{"url": PREFIX}],
        "tags": [{"name": s.name, "description": s.description} for s in services],
        "security": SECURITY,
        "paths": paths,
        "components": {
            "schemas": dict(sorted({**book.schemas, **ogc, **process_schemas}.items())),
            "securitySchemes": SECURITY_SCHEMES,
        },
    }


#: The served document (``/ogcapi/api``) of the services served under some settings, as bytes.
served = made_once(lambda services, settings: document_bytes(api_document(services, settings)))

"""The OGC API – Processes – Part 1: Core 1.0 binding at ``/ogcapi`` (docs/ogcapi.md).

The same jobs as every other binding, described the way OGC API – Processes describes
them: each long operation is a process (``processes``), each job shows as a
``statusInfo`` (``jobs``), every error is an RFC 7807 document carrying the
xServer fault (``problems``), and ``/api`` is this binding's OpenAPI 3.0
document (``document``).  Nothing about jobs is decided here: an execute is the
operation's start (``Prefer: respond-async``) or its synchronous form, through the
dispatcher, which decodes and validates the request as for every binding; a job's
status is its record as JobManager lets the caller see it; a dismiss is deleteJob;
results are the JSON binding's fetch.  A job started here is the same job for
watchJob, stopJob and the fetch of the other bindings, and theirs show here.

Paths (below ``/ogcapi``)::

    GET /                          landing page
    GET /conformance               conformance classes
    GET /api                       the OpenAPI 3.0 document of this binding
    GET /processes                 process summaries (limit, cursor)
    GET /processes/{id}            a process's description
    POST /processes/{id}/execution execute (Prefer: respond-async: a job; else synchronous)
    GET /jobs                      the job list (limit, processID, status, type,
                                   datetime, minDuration, maxDuration, cursor)
    GET /jobs/{id}                 a job's statusInfo
    DELETE /jobs/{id}              dismiss (deleteJob)
    GET /jobs/{id}/results         its results (document form), or its fault

Links are absolute: ``[server] public_url`` + ``/ogcapi`` when it is set, else the
scheme and host the request came to.
"""

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from werkzeug.wrappers import Response

from ...author.service import Service
from ...operations.failures import as_fault
from ...payload.stream import Source, json_chunks
from ...protocol.faults import (
    InvalidRequestFault,
    InvalidValueFault,
    JobStateFault,
    UnknownJobFault,
    XServerFault,
)
from ...protocol.states import Status
from ...store import JobRecord, now_ms
from ...support import metrics
from ...support.blocking import blocking, sized
from .. import parsing
from ..json_binding import read_json_body
from ..request import BodyRequest
from . import document
from .jobs import (
    JSON_MEDIA,
    LIMIT_DEFAULT,
    REL_JOB_LIST,
    JobQuery,
    check_format,
    read_limit,
    status_info,
)
from .prefer import prefers
from .problems import (
    NO_SUCH_JOB,
    NO_SUCH_PROCESS,
    RESULT_NOT_READY,
    ProblemResponse,
    problem,
)
from .processes import (
    Process,
    book_of,
    description,
    processes,
    read_execution,
    summary,
)

if TYPE_CHECKING:
    from ...operations.accounts import Caller
    from ...operations.dispatch import Dispatcher
    from ...settings.model import Settings

log = logging.getLogger(__name__)

PREFIX = "/ogcapi"
JSON_TYPE = "application/json; charset=utf-8"
OPENAPI_TYPE = "application/vnd.oai.openapi+json;version=3.0"
RESPOND_ASYNC = "respond-async"
OGC_REL = "http://www.opengis.net/def/rel/ogc/1.0/"
CONFORMANCE = [
    f"http://www.opengis.net/spec/ogcapi-processes-1/1.0/conf/{name}"
    for name in (
        "core",
        "ogc-process-description",
        "json",
        "oas30",
        "job-list",
        "dismiss",
        "callback",
    )
]
#: Paths (their segments below the prefix; "*" stands for an id) and the methods each
#: serves; GET serves HEAD too.
ROUTES: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("GET",),
    ("conformance",): ("GET",),
    ("api",): ("GET",),
    ("processes",): ("GET",),
    ("processes", "*"): ("GET",),
    ("processes", "*", "execution"): ("POST",),
    ("jobs",): ("GET",),
    ("jobs", "*"): ("GET", "DELETE"),
    ("jobs", "*", "results"): ("GET",),
}
#: The paths that tell nothing of anyone's jobs: public when the WSDLs are.
PUBLIC = {(), ("conformance",), ("api",), ("processes",), ("processes", "*")}


class Refusal(Exception):
    """An answer of one of the standard's exception types (or at a status of its own)."""

    def __init__(
        self,
        fault: XServerFault,
        ogc_type: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(fault.faultstring)
        self.fault, self.ogc_type, self.status, self.headers = fault, ogc_type, status, headers


def _route(path: str) -> tuple[tuple[str, ...], list[str]] | None:
    """The route of a path below the prefix and the ids in it, or None."""
    parts = [p for p in path.split("/") if p]
    for pattern in ROUTES:
        if len(pattern) == len(parts) and all(
            want in ("*", got) for want, got in zip(pattern, parts, strict=True)
        ):
            return pattern, [got for want, got in zip(pattern, parts, strict=True) if want == "*"]
    return None


def _query(request: BodyRequest) -> dict[str, list[str]]:
    return {name: request.args.getlist(name) for name in request.args}


class OgcApiBinding:
    """The OGC API – Processes binding at ``/ogcapi``: ``handle(request, caller)``
    answers a Response."""

    name = "ogcapi"  # in metrics

    def __init__(self, dispatcher: "Dispatcher", settings: "Callable[[], Settings]") -> None:
        self.dispatcher = dispatcher
        self.jobs = dispatcher.jobs
        self.settings = settings
        self._handlers = self._by_route()

    # ------------------------------------------------------------------ the Binding protocol

    def refusal(self, path: str, fault: XServerFault) -> Response:
        return problem(fault, PREFIX + path)

    @staticmethod
    def is_public(method: str, path: str, query: bytes) -> bool:
        """The landing page, conformance, the API document and the processes may be
        public ([auth] public_wsdl), as the WSDLs are; jobs need the caller's
        credentials."""
        found = _route(path)
        return method in ("GET", "HEAD") and found is not None and found[0] in PUBLIC

    async def handle(self, request: BodyRequest, caller: "Caller") -> Response:
        instance = request.root_path + request.path
        try:
            found = _route(request.path)
            if found is None:
                raise Refusal(
                    InvalidRequestFault(
                        f"nothing is served at {instance}",
                        hint=f"The landing page {PREFIX}/ links to what is served.",
                    ),
                    status=404,
                )
            pattern, ids = found
            method = "GET" if request.method == "HEAD" else request.method
            allowed = ROUTES[pattern]
            if method not in allowed:
                raise Refusal(
                    InvalidRequestFault(
                        f"{request.method} is not served at {instance}; use "
                        + " or ".join(allowed),
                    ),
                    status=405,
                    headers={"Allow": ", ".join(allowed + (("HEAD",) if "GET" in allowed else ()))},
                )
            handler = self._handlers[(pattern, method)]
            return await handler(request, caller, *ids)
        except Refusal as refused:
            return problem(
                refused.fault, instance, refused.ogc_type, refused.status, refused.headers
            )
        except Exception as exc:
            fault = as_fault(exc, instance)
            return problem(
                fault, instance, NO_SUCH_JOB if isinstance(fault, UnknownJobFault) else None
            )

    def _by_route(
        self,
    ) -> dict[tuple[tuple[str, ...], str], Callable[..., Awaitable[Response]]]:
        return {
            ((), "GET"): self._landing,
            (("conformance",), "GET"): self._conformance,
            (("api",), "GET"): self._api,
            (("processes",), "GET"): self._process_list,
            (("processes", "*"), "GET"): self._process,
            (("processes", "*", "execution"), "POST"): self._execute,
            (("jobs",), "GET"): self._job_list,
            (("jobs", "*"), "GET"): self._job,
            (("jobs", "*"), "DELETE"): self._dismiss,
            (("jobs", "*", "results"), "GET"): self._results,
        }

    # ------------------------------------------------------------------ helpers

    def _base(self, request: BodyRequest) -> str:
        """The binding's absolute URL (no trailing slash)."""
        public = self.settings().public_url
        if public:
            return public.rstrip("/") + PREFIX
        return request.host_url.rstrip("/") + request.root_path

    def _served(self) -> list[Service]:
        settings = self.settings()
        return [
            svc for name, svc in self.dispatcher.services.items() if settings.service_enabled(name)
        ]

    def _processes(self) -> dict[str, Process]:
        return processes(self._served())

    def _find(self, process_id: str) -> Process:
        found = self._processes().get(process_id)
        if found is None:
            raise Refusal(
                InvalidRequestFault(
                    f"there is no process {process_id}",
                    hint=f"{PREFIX}/processes lists the processes: <Service>.<operation>.",
                ),
                NO_SUCH_PROCESS,
                404,
            )
        return found

    @staticmethod
    def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return Response(
            json.dumps(data, ensure_ascii=False).encode("utf-8"),
            status=status,
            content_type=JSON_TYPE,
            headers=headers,
        )

    def _peek(self, job_id: str, caller: "Caller") -> JobRecord | None:
        """The job's record as ``caller`` may see it, or None (blocking)."""
        # (a job's id is a UUID: text no id can be, a NUL, is no question for the store)
        plausible = len(job_id) <= 100 and job_id.isascii() and job_id.isprintable()
        return self.jobs.peek(job_id, caller) if plausible else None

    def _record(self, job_id: str, caller: "Caller") -> JobRecord:
        """The job's record as ``caller`` may see it (blocking); no-such-job otherwise."""
        rec = self._peek(job_id, caller)
        if rec is None:
            raise Refusal(
                UnknownJobFault(f"there is no job with id {job_id}", jobId=job_id), NO_SUCH_JOB
            )
        return rec

    # ------------------------------------------------------------------ capabilities

    async def _landing(self, request: BodyRequest, caller: "Caller") -> Response:
        metrics.operation_named("getLandingPage")
        base = self._base(request)
        return self._json(
            {
                "title": "xruntime: OGC API – Processes",
                "description": "Long operations as asynchronous jobs: every long operation "
                "of every service served is a process. The same jobs are served by the "
                "xServer job protocol's JSON, SOAP and JSON-RPC bindings "
                "(/services/rs, /services/ws, /services/rpc).",
                "links": [
                    {"href": base + "/", "rel": "self", "type": JSON_MEDIA, "title": "this page"},
                    {
                        "href": base + "/api",
                        "rel": "service-desc",
                        "type": OPENAPI_TYPE,
                        "title": "the API definition (OpenAPI 3.0)",
                    },
                    {
                        "href": base + "/conformance",
                        "rel": OGC_REL + "conformance",
                        "type": JSON_MEDIA,
                        "title": "the conformance classes",
                    },
                    {
                        "href": base + "/processes",
                        "rel": OGC_REL + "processes",
                        "type": JSON_MEDIA,
                        "title": "the processes",
                    },
                    {
                        "href": base + "/jobs",
                        "rel": REL_JOB_LIST,
                        "type": JSON_MEDIA,
                        "title": "the jobs",
                    },
                ],
            }
        )

    async def _conformance(self, request: BodyRequest, caller: "Caller") -> Response:
        metrics.operation_named("getConformanceClasses")
        return self._json({"conformsTo": CONFORMANCE})

    async def _api(self, request: BodyRequest, caller: "Caller") -> Response:
        metrics.operation_named("getAPI")
        return Response(document.served(self._served(), self.settings()), content_type=OPENAPI_TYPE)

    # ------------------------------------------------------------------ processes

    async def _process_list(self, request: BodyRequest, caller: "Caller") -> Response:
        metrics.operation_named("getProcesses")
        args = _query(request)
        for name in args:
            if name not in ("limit", "cursor", "f"):
                raise InvalidValueFault(
                    f"the process list has no parameter {name}",
                    parameter=name,
                    hint="Its parameters: limit, cursor, f.",
                )
        check_format(args)
        limit = read_limit(args, LIMIT_DEFAULT)
        every = self._processes()
        ids = list(every)
        after = _process_cursor(args.get("cursor"))
        if after is not None:
            ids = [i for i in ids if i > after]
        page = ids[:limit]
        base = self._base(request)
        links = [
            {
                "href": base + "/processes" + _query_text(args),
                "rel": "self",
                "type": JSON_MEDIA,
                "title": "this document",
            }
        ]
        if len(ids) > limit:
            following = {k: v for k, v in args.items() if k != "cursor"}
            following["cursor"] = [_encode_cursor(page[-1])]
            links.append(
                {
                    "href": base + "/processes" + _query_text(following),
                    "rel": "next",
                    "type": JSON_MEDIA,
                    "title": "the next page",
                }
            )
        return self._json({"processes": [summary(every[i], base) for i in page], "links": links})

    async def _process(self, request: BodyRequest, caller: "Caller", process_id: str) -> Response:
        metrics.operation_named("getProcessDescription")
        check_format(_query(request))
        process = self._find(process_id)
        book = book_of(self._served(), self.settings())
        return self._json(description(process, book, self._base(request)))

    # ------------------------------------------------------------------ execute

    async def _execute(self, request: BodyRequest, caller: "Caller", process_id: str) -> Response:
        process = self._find(process_id)
        self.dispatcher.check_enabled(process.service.name)
        limit = self.settings().max_request_bytes
        body = await parsing.parse(
            request.content_length, limit, read_json_body, request, limit, empty={}
        )
        execution = read_execution(body, process)
        asynchronous = prefers(request.headers.getlist("Prefer"), RESPOND_ASYNC)
        base = self._base(request)
        del body
        try:
            answer = await self.dispatcher.call(
                process.start if asynchronous else process.run, execution.request, caller
            )
        except InvalidValueFault as fault:
            raise _as_subscriber(fault) from None
        if asynchronous:
            job_id = json.loads(answer.text)["id"]
            info = await blocking(self._accepted, job_id, process, caller, base)
            return self._json(
                info,
                201,
                {"Location": f"{base}/jobs/{job_id}", "Preference-Applied": RESPOND_ASYNC},
            )
        text = answer.text
        return await sized(len(text), _result, text, execution.document)

    def _accepted(
        self, job_id: str, process: Process, caller: "Caller", base: str
    ) -> dict[str, Any]:
        """The statusInfo of a job just started (blocking)."""
        rec = self._peek(job_id, caller)
        if rec is None:  # deleted meanwhile: as it was started
            rec = JobRecord(
                id=job_id,
                service=process.service.name,
                operation=process.operation.name,
                fetch_type=process.operation.fetch_type,
                status=Status.QUEUING,
                queued_at=now_ms(),
            )
        return status_info(rec, self.jobs.job_view(rec), base)

    # ------------------------------------------------------------------ jobs

    async def _job_list(self, request: BodyRequest, caller: "Caller") -> Response:
        metrics.operation_named("getJobs")
        args = _query(request)
        query = JobQuery.read(args)
        base = self._base(request)
        return await blocking(self._job_page, query, args, caller, base)

    def _job_page(
        self, query: JobQuery, args: dict[str, list[str]], caller: "Caller", base: str
    ) -> Response:
        """The job list's page (blocking)."""
        records: list[JobRecord] = []
        following = None
        if query.any_type:
            records, following = self.jobs.job_page(
                caller,
                query.limit,
                query.cursor,
                query.statuses,
                query.operations(),
                query.queued_between,
                query.duration_between,
            )
        now = now_ms()
        links = [
            {
                "href": base + "/jobs" + _query_text(args),
                "rel": "self",
                "type": JSON_MEDIA,
                "title": "this document",
            }
        ]
        if following is not None:
            after = {k: v for k, v in args.items() if k != "cursor"}
            after["cursor"] = [following]
            links.append(
                {
                    "href": base + "/jobs" + _query_text(after),
                    "rel": "next",
                    "type": JSON_MEDIA,
                    "title": "the next page",
                }
            )
        jobs = [status_info(rec, self.jobs.job_view(rec, now), base) for rec in records]
        return self._json({"jobs": jobs, "links": links})

    async def _job(self, request: BodyRequest, caller: "Caller", job_id: str) -> Response:
        metrics.operation_named("getStatus")
        check_format(_query(request))
        base = self._base(request)

        def read() -> dict[str, Any]:
            rec = self._record(job_id, caller)
            return status_info(rec, self.jobs.job_view(rec), base)

        return self._json(await blocking(read))

    async def _dismiss(self, request: BodyRequest, caller: "Caller", job_id: str) -> Response:
        metrics.operation_named("dismiss")
        base = self._base(request)

        def dismiss() -> dict[str, Any]:
            rec = self._record(job_id, caller)
            job = self.jobs.delete(job_id, caller)
            if job.status == Status.UNKNOWN:  # erased meanwhile
                raise Refusal(
                    UnknownJobFault(f"there is no job with id {job_id}", jobId=job_id), NO_SUCH_JOB
                )
            return status_info(rec, job, base)

        return self._json(await blocking(dismiss))

    async def _results(self, request: BodyRequest, caller: "Caller", job_id: str) -> Response:
        metrics.operation_named("getResult")
        check_format(_query(request))
        rec = await blocking(self._record, job_id, caller)
        status = Status(rec.status)
        if status in (Status.QUEUING, Status.RUNNING, Status.STOPPING, Status.DELETED):
            raise Refusal(
                JobStateFault(
                    f"job {job_id} is {status}; its results are there once it has ended",
                    jobId=job_id,
                    status=status,
                    hint="Follow the job's status until it is successful or failed.",
                ),
                RESULT_NOT_READY if status != Status.DELETED else NO_SUCH_JOB,
                404,
            )
        fetch = self.dispatcher.operation(rec.service, "fetch" + rec.fetch_type)
        if fetch is None:  # its service is no longer loaded
            raise Refusal(
                UnknownJobFault(
                    f"job {job_id} is of {rec.service}, which this node does not serve",
                    jobId=job_id,
                ),
                NO_SUCH_JOB,
            )
        answer = await self.dispatcher.call(fetch, {"id": job_id}, caller)
        if answer.large():
            return Response(_document_chunks(cast(Source, answer.stored)), content_type=JSON_TYPE)
        text = answer.text
        return await sized(len(text), _result, text, True)


# --------------------------------------------------------------------------- answers


def _result(text: str, document: bool) -> Response:
    """A result's answer: its JSON text as the JSON binding writes it (raw), or in the
    results document ``{"result": {"value": …}}``."""
    body = text.encode("utf-8")
    if document:
        body = DOCUMENT_HEAD + body + DOCUMENT_TAIL
    return Response(body, content_type=JSON_TYPE)


DOCUMENT_HEAD = b'{"result":{"value":'
DOCUMENT_TAIL = b"}}"


def _document_chunks(stored: Source) -> Iterator[bytes]:
    """A large stored result in the results document, written as it is read."""
    yield DOCUMENT_HEAD
    yield from json_chunks(stored)
    yield DOCUMENT_TAIL


def _as_subscriber(fault: InvalidValueFault) -> InvalidValueFault:
    """A fault of the request's callback, named as the subscriber that asked for it."""
    parameter = fault.parameter or ""
    if not parameter.startswith("callback"):
        return fault
    named = {"callback.url": "subscriber.successUri", "callback": "subscriber"}
    renamed = named.get(parameter, parameter.replace("callback", "subscriber", 1))
    return InvalidValueFault(
        fault.faultstring.replace(parameter, renamed),
        parameter=renamed,
        value=fault.value,
        hint=fault.hint,
    )


def _query_text(args: dict[str, list[str]]) -> str:
    pairs = [(k, v) for k, values in args.items() for v in values]
    return "?" + urlencode(pairs) if pairs else ""


def _encode_cursor(process_id: str) -> str:
    return base64.urlsafe_b64encode(f"after:{process_id}".encode()).decode().rstrip("=")


def _process_cursor(values: list[str] | None) -> str | None:
    """The process id a process list's cursor names (None: the first page)."""
    if not values:
        return None
    cursor = values[-1]
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, after = text.partition(":")
        if kind == "after" and after:
            return after
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidValueFault(
        "cursor is not one this server gave out",
        parameter="cursor",
        value=cursor[:200],
        hint="Follow the next link as it is.",
    )


__all__ = ["OgcApiBinding", "ProblemResponse", "PREFIX", "CONFORMANCE"]

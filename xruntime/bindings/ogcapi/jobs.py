"""Jobs as OGC API – Processes shows them: statusInfo, and the job list's query.

A job is the one the store holds, whichever binding started it: its ``statusInfo`` is
read from its record, with the xServer status mapped to the standard's five
(docs/ogcapi.md, "Status")::

    QUEUING → accepted    RUNNING, STOPPING → running    SUCCEEDED → successful
    FAILED → failed       DELETED → dismissed            UNKNOWN → 404 no-such-job

``progress`` (0–100) is counted from a ``BulkProgress`` (``successful + failed`` of
``successful + failed + remaining``); the progress as the service reported it, of any
type, is kept in the extension member ``xserver:progress`` (with its ``$type``, as
watchJob answers it in JSON), and the xServer status, which the mapping folds, in
``xserver:status``.  ``created``, ``started``, ``finished`` and ``updated`` are the
record's times (first queued, last claimed, ended; ``updated`` the latest of them) in
RFC 3339 with milliseconds.

``JobQuery`` reads ``/jobs``' parameters: ``limit``, ``processID``, ``status``,
``type``, ``datetime`` (an RFC 3339 instant, or an interval ``a/b`` with ``..`` or
nothing for an open end, matched against ``created``), ``minDuration`` and
``maxDuration`` (seconds, from ``started`` to ``finished``, or to now while it
runs), and the opaque ``cursor`` of a ``next`` link (listJobs' own).
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from ...operations.jobs import LIST_LIMIT_MAX, iso_time
from ...protocol import codec
from ...protocol.faults import InvalidValueFault
from ...protocol.states import Status
from ...protocol.types import BulkProgress, Job, JobProgress
from ...store import JobRecord

#: The standard's status of each xServer status that is stored.
STATUS_OF = {
    Status.QUEUING: "accepted",
    Status.RUNNING: "running",
    Status.STOPPING: "running",
    Status.SUCCEEDED: "successful",
    Status.FAILED: "failed",
    Status.DELETED: "dismissed",
}
#: The xServer statuses of each of the standard's.
STORED_OF: dict[str, tuple[Status, ...]] = {}
for _stored, _ogc in STATUS_OF.items():
    STORED_OF[_ogc] = (*STORED_OF.get(_ogc, ()), _stored)

REL_RESULTS = "http://www.opengis.net/def/rel/ogc/1.0/results"
REL_EXCEPTIONS = "http://www.opengis.net/def/rel/ogc/1.0/exceptions"
REL_JOB_LIST = "http://www.opengis.net/def/rel/ogc/1.0/job-list"
JSON_MEDIA = "application/json"
PROBLEM_MEDIA = "application/problem+json"

#: The job list's page: by default, at most (listJobs' largest page).
LIMIT_DEFAULT, LIMIT_MAX = 100, LIST_LIMIT_MAX


def process_id(service: str, operation: str) -> str:
    """The id of a long operation's process: ``<Service>.<operation>``."""
    return f"{service}.{operation}"


def percent(progress: JobProgress | None) -> int | None:
    """0–100 from a BulkProgress (done of all), None for other progress or none."""
    if not isinstance(progress, BulkProgress):
        return None
    done = (progress.successful or 0) + (progress.failed or 0)
    total = done + (progress.remaining or 0)
    if total <= 0:
        return None
    return max(0, min(100, done * 100 // total))


def _message(rec: JobRecord, status: str) -> str:
    if status == Status.QUEUING:
        return (
            "queued, waiting for its retry's due time"
            if rec.not_before is not None
            else "queued, waiting for a worker"
        )
    if status == Status.RUNNING:
        return "running, waiting for its child jobs" if rec.waiting_for is not None else "running"
    if status == Status.STOPPING:
        return "stopping: a stop was asked, or its computation timeout passed"
    if status == Status.SUCCEEDED:
        return "succeeded; its results are ready"
    if status == Status.FAILED:
        return "failed; its results answer the fault"
    return "dismissed"


def status_info(rec: JobRecord, job: Job, base: str) -> dict[str, Any]:
    """The statusInfo of a job from its record and its ``Job`` (as watchJob answers it,
    ``JobManager.job_view``; its status wins over the record's, so that a dismissed
    job reads ``dismissed``), with links under ``base`` (the binding's absolute URL)."""
    status = Status(job.status)
    ogc = STATUS_OF[status]
    info: dict[str, Any] = {
        "type": "process",
        "processID": process_id(rec.service, rec.operation),
        "jobID": rec.id,
        "status": ogc,
        "message": _message(rec, status),
        "created": iso_time(rec.queued_at),
    }
    times = [rec.queued_at]
    if rec.started_at is not None:
        info["started"] = iso_time(rec.started_at)
        times.append(rec.started_at)
    if rec.finished_at is not None:
        info["finished"] = iso_time(rec.finished_at)
        times.append(rec.finished_at)
    info["updated"] = iso_time(max(times))
    progress = cast(JobProgress | None, job.progress)  # (an instance: the field's value)
    share = percent(progress)
    if share is not None:
        info["progress"] = share
    info["xserver:status"] = str(status)
    if progress is not None:
        info["xserver:progress"] = codec.encode(progress, JobProgress)
    here = f"{base}/jobs/{rec.id}"
    links = [
        {"href": here, "rel": "self", "type": JSON_MEDIA, "title": "this job's status"},
        {"href": f"{base}/jobs", "rel": "up", "type": JSON_MEDIA, "title": "the job list"},
    ]
    if ogc == "successful":
        links.append(
            {
                "href": here + "/results",
                "rel": REL_RESULTS,
                "type": JSON_MEDIA,
                "title": "its results",
            }
        )
    elif ogc == "failed":
        links.append(
            {
                "href": here + "/results",
                "rel": REL_EXCEPTIONS,
                "type": PROBLEM_MEDIA,
                "title": "its fault",
            }
        )
    info["links"] = links
    return info


# --------------------------------------------------------------------------- the job list


@dataclass(frozen=True)
class JobQuery:
    """What ``/jobs``' parameters ask for (``read``)."""

    limit: int = LIMIT_DEFAULT
    cursor: str | None = None
    #: stored statuses (None: any)
    statuses: tuple[Status, ...] | None = None
    #: process ids (None: any)
    processes: tuple[str, ...] | None = None
    #: False when ``type`` names no type of job this server has (then none matches)
    any_type: bool = True
    queued_between: tuple[int | None, int | None] = (None, None)
    duration_between: tuple[int | None, int | None] = (None, None)

    #: The parameters the job list reads (``f``: the one format it has, json).
    PARAMETERS = (
        "limit",
        "cursor",
        "status",
        "processID",
        "type",
        "datetime",
        "minDuration",
        "maxDuration",
        "f",
    )

    @classmethod
    def read(cls, args: Mapping[str, Sequence[str]]) -> "JobQuery":
        """The query of ``args`` (each parameter's values, as sent); InvalidValueFault
        naming the parameter for a value the definition does not allow, or a parameter
        it does not have."""
        for name in args:
            if name not in cls.PARAMETERS:
                raise InvalidValueFault(
                    f"the job list has no parameter {name}",
                    parameter=name,
                    hint="Its parameters: " + ", ".join(cls.PARAMETERS) + ".",
                )
        check_format(args)
        statuses = None
        if "status" in args:
            found: list[Status] = []
            for value in _listed(args["status"]):
                if value not in STORED_OF:
                    raise InvalidValueFault(
                        f"status {value!r} is none of " + ", ".join(STORED_OF),
                        parameter="status",
                        value=value[:200],
                    )
                found.extend(STORED_OF[value])
            statuses = tuple(dict.fromkeys(found))
        types = _listed(args["type"]) if "type" in args else ["process"]
        return cls(
            limit=read_limit(args),
            cursor=_single(args, "cursor"),
            statuses=statuses,
            processes=tuple(_listed(args["processID"])) if "processID" in args else None,
            any_type="process" in types,
            queued_between=_interval(_single(args, "datetime")),
            duration_between=(_seconds(args, "minDuration"), _seconds(args, "maxDuration")),
        )

    def operations(self) -> list[tuple[str, str]] | None:
        """The (service, operation) pairs of ``processes`` (None: any); an id that can
        name no process (no dot, a control character) names none."""
        if self.processes is None:
            return None
        return [
            (p.split(".", 1)[0], p.split(".", 1)[1])
            for p in self.processes
            if "." in p and p.isprintable()
        ]


def check_format(args: Mapping[str, Sequence[str]]) -> None:
    """``f`` may ask for JSON, the one format served."""
    value = _single(args, "f")
    if value is not None and value.lower() != "json":
        raise InvalidValueFault(
            f"the format {value!r} is not served; only json is",
            parameter="f",
            value=value[:200],
        )


def read_limit(args: Mapping[str, Sequence[str]], default: int = LIMIT_DEFAULT) -> int:
    """``limit``: an integer of at least 1 (``default`` without one); a larger one than
    ``LIMIT_MAX`` is taken as ``LIMIT_MAX`` (the standard lets a server answer fewer)."""
    text = _single(args, "limit")
    if text is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", text.strip()) or int(text) < 1:
        raise InvalidValueFault(
            f"limit must be an integer of at least 1 (at most {LIMIT_MAX} are answered)",
            parameter="limit",
            value=text[:200],
        )
    return min(int(text), LIMIT_MAX)


def _single(args: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = args.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise InvalidValueFault(
            f"{name} may be given once", parameter=name, value=",".join(values)[:200]
        )
    return values[0]


def _listed(values: Sequence[str]) -> list[str]:
    """A list parameter's values, repeated (``a=x&a=y``) or comma-separated (``a=x,y``)."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _seconds(args: Mapping[str, Sequence[str]], name: str) -> int | None:
    """minDuration/maxDuration: a number of seconds ≥ 0, as ms (None when absent)."""
    text = _single(args, name)
    if text is None:
        return None
    if not re.fullmatch(r"[0-9]{1,12}", text.strip()):
        raise InvalidValueFault(
            f"{name} must be a whole number of seconds, 0 or more",
            parameter=name,
            value=text[:200],
        )
    return int(text) * 1000


#: RFC 3339 §5.6's date-time (the time and its offset are required): (the date and
#: time to the second, the fraction, the offset).
_DATE_TIME = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _instant(text: str) -> int:
    """An RFC 3339 date-time as ms since the epoch (a fraction below a ms is cut);
    ValueError for anything else."""
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        raise ValueError(text)
    whole, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    try:
        moment = datetime.fromisoformat(whole.upper() + zone)
        seconds = int(moment.timestamp())
    except OverflowError as exc:
        raise ValueError(text) from exc
    return seconds * 1000 + int((fraction or ".0")[1:4].ljust(3, "0"))


def _interval(text: str | None) -> tuple[int | None, int | None]:
    """``datetime``: an instant (the jobs created in that ms) or ``start/end`` with
    ``..`` or nothing for an open end, as (earliest, latest) ms, both included."""
    if text is None:
        return None, None
    try:
        if "/" not in text:
            moment = _instant(text)
            return moment, moment
        start, end = text.split("/", 1)
        earliest = None if start in ("", "..") else _instant(start)
        latest = None if end in ("", "..") else _instant(end)
    except ValueError:
        raise InvalidValueFault(
            "datetime must be an RFC 3339 date-time (2026-11-23T06:46:54Z) or an interval "
            "of two, start/end, with .. for an open end",
            parameter="datetime",
            value=text[:200],
        ) from None
    if earliest is not None and latest is not None and earliest > latest:
        raise InvalidValueFault(
            "datetime's interval ends before it starts", parameter="datetime", value=text[:200]
        )
    return earliest, latest

"""XRuntime: the job operations every client uses (docs/protocol.md §4, §11, §12, §14).

A service declared with the author's API whose calls are the operation layer's own
(``JobManager``): an adapter from one to the other, so it sits here, above both.  The
registry (``author.registry``) finds the services written with that API, the shipped
ones and any outside one; ``served_services`` puts XRuntime in front of them, and every
binding, command and process of a node that serves them asks it.
"""

from typing import TYPE_CHECKING

from ..author.registry import PluginError, discover
from ..author.registry import origin_of as plugin_origin
from ..author.service import Service
from ..protocol.faults import (
    AccessDeniedFault,
    InvalidRequestFault,
    InvalidValueFault,
    JobStateFault,
    MissingParameterFault,
    UnknownJobFault,
)
from ..protocol.types import (
    Job,
    JobEvents,
    JobList,
    JobRequest,
    ListJobsRequest,
    RuntimeInformation,
    RuntimeInformationRequest,
    WatchedJobs,
    WatchJobsRequest,
    WatchRequest,
)

if TYPE_CHECKING:  # for the annotations: a command listing the services loads no store
    from .accounts import Caller
    from .jobs import JobManager

xruntime = Service(
    "XRuntime",
    "Watch, stop and delete jobs; information about this server.",
    shows_all_progress=True,
)

#: where XRuntime comes from, as ``check-config`` shows it
ORIGIN = "xruntime itself"


def served_services() -> dict[str, Service]:
    """Every service a node serves, by name: XRuntime first, then those the registry
    discovers; ``PluginError`` when one of those is named XRuntime too."""
    found = discover()
    if xruntime.name in found:
        raise PluginError(
            f"two services named {xruntime.name!r}: {plugin_origin(xruntime.name)} and "
            f"{ORIGIN}; uninstall or rename one"
        )
    return {xruntime.name: xruntime, **found}


def origin_of(name: str) -> str:
    """Where the service ``name`` came from, as ``check-config`` shows it."""
    return ORIGIN if name == xruntime.name else plugin_origin(name)


_REQUEST_FAULTS = (InvalidRequestFault, InvalidValueFault, MissingParameterFault)


@xruntime.call(request=WatchRequest, response=Job, faults=_REQUEST_FAULTS)
async def watchJob(jobs: "JobManager", request: WatchRequest, caller: "Caller") -> Job:
    """The job as it is now or at its next change (docs/protocol.md §4, "watchJob, exactly").

    At once for a finished or unknown job, else at its first change after
    ``progressUpdatePeriod``, or when ``maximumPollingPeriod`` has passed."""
    return await jobs.watch(
        request.id, request.progressUpdatePeriod, request.maximumPollingPeriod, caller=caller
    )


@xruntime.call(
    request=JobRequest, response=Job, faults=_REQUEST_FAULTS + (UnknownJobFault, JobStateFault)
)
def stopJob(jobs: "JobManager", request: JobRequest, caller: "Caller") -> Job:
    """Stop a running job: it ends with its intermediate result (docs/protocol.md §3)."""
    return jobs.stop(request.id, caller)


@xruntime.call(request=JobRequest, response=Job, faults=_REQUEST_FAULTS)
def deleteJob(jobs: "JobManager", request: JobRequest, caller: "Caller") -> Job:
    """Delete a job, its work aborted and its result erased (docs/protocol.md §3)."""
    return jobs.delete(request.id, caller)


@xruntime.call(
    request=RuntimeInformationRequest, response=RuntimeInformation, faults=_REQUEST_FAULTS
)
def getRuntimeInformation(
    jobs: "JobManager", request: RuntimeInformationRequest, caller: "Caller"
) -> RuntimeInformation:
    """This node: its version, its services and their operations, the jobs per status."""
    enabled = jobs.settings()
    return jobs.runtime_information(
        [s for s in jobs.services.values() if enabled.service_enabled(s.name)],
        with_job_counts=request.withJobCounts is not False,
        caller=caller,
    )


@xruntime.call(request=JobRequest, response=JobEvents, faults=_REQUEST_FAULTS + (UnknownJobFault,))
def getJobEvents(jobs: "JobManager", request: JobRequest, caller: "Caller") -> JobEvents:
    """A job's history: one event per change, oldest first (docs/protocol.md §11)."""
    return jobs.events(request.id, caller)


@xruntime.call(
    request=ListJobsRequest, response=JobList, faults=_REQUEST_FAULTS + (AccessDeniedFault,)
)
def listJobs(jobs: "JobManager", request: ListJobsRequest, caller: "Caller") -> JobList:
    """A page of the jobs the caller may see, newest first (docs/protocol.md §12)."""
    return jobs.list_jobs(request, caller)


@xruntime.call(request=WatchJobsRequest, response=WatchedJobs, faults=_REQUEST_FAULTS)
async def watchJobs(jobs: "JobManager", request: WatchJobsRequest, caller: "Caller") -> WatchedJobs:
    """The jobs of ``ids`` that changed, as watchJob answers each (docs/protocol.md §14)."""
    return await jobs.watch_jobs(
        request.ids, request.progressUpdatePeriod, request.maximumPollingPeriod, caller=caller
    )

"""XRuntime: the job operations every client uses (docs/protocol.md §4, §11, §12, §14)."""

from typing import TYPE_CHECKING

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
from .service import Service

if TYPE_CHECKING:  # the operation layer, above this one, calls these
    from ..operations.accounts import Caller
    from ..operations.jobs import JobManager

xruntime = Service(
    "XRuntime",
    "Watch, stop and delete jobs; information about this server.",
    shows_all_progress=True,
)

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

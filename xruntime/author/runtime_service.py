"""XRuntime: the job operations every client uses (docs/protocol.md §4, §11, §12)."""

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
    WatchRequest,
)
from .service import Service

xruntime = Service(
    "XRuntime",
    "Watch, stop and delete jobs; information about this server.",
    shows_all_progress=True,
)

_REQUEST_FAULTS = (InvalidRequestFault, InvalidValueFault, MissingParameterFault)


@xruntime.call(request=WatchRequest, response=Job, faults=_REQUEST_FAULTS)
async def watchJob(jobs, request, caller):
    return await jobs.watch(
        request.id, request.progressUpdatePeriod, request.maximumPollingPeriod, caller=caller
    )


@xruntime.call(
    request=JobRequest, response=Job, faults=_REQUEST_FAULTS + (UnknownJobFault, JobStateFault)
)
def stopJob(jobs, request, caller):
    return jobs.stop(request.id, caller)


@xruntime.call(request=JobRequest, response=Job, faults=_REQUEST_FAULTS)
def deleteJob(jobs, request, caller):
    return jobs.delete(request.id, caller)


@xruntime.call(
    request=RuntimeInformationRequest, response=RuntimeInformation, faults=_REQUEST_FAULTS
)
def getRuntimeInformation(jobs, request, caller):
    enabled = jobs.settings()
    return jobs.runtime_information(
        [s for s in jobs.services.values() if enabled.service_enabled(s.name)],
        with_job_counts=request.withJobCounts is not False,
        caller=caller,
    )


@xruntime.call(request=JobRequest, response=JobEvents, faults=_REQUEST_FAULTS + (UnknownJobFault,))
def getJobEvents(jobs, request, caller):
    return jobs.events(request.id, caller)


@xruntime.call(
    request=ListJobsRequest, response=JobList, faults=_REQUEST_FAULTS + (AccessDeniedFault,)
)
def listJobs(jobs, request, caller):
    return jobs.list_jobs(request, caller)

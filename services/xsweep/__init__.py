"""XSweep: a fan-out example (docs/protocol.md §13), used in docs/writing-a-service.md.

``sweep`` runs one XDemo simulation per scenario as a child job, on every worker of
every node, and sums them up.  With ``depth`` 2 or 3 its children are sweeps
themselves: a parent of parents.  Load it with::

    XRUNTIME_SERVICE_MODULES=xruntime_services.xsweep python -m xruntime serve
"""

from xruntime.author import Boolean, Child, JobContext, Long, RequestBase, ResponseBase, Service

from ..xdemo.types import SimulateRequest

service = Service("XSweep", "Runs many XDemo simulations as child jobs and sums them up.")


class SweepRequest(RequestBase):
    scenarios = Long(ge=0, le=1000)  # child jobs per sweep (default 10)
    durationMs = Long(ge=0, le=3_600_000)  # of each simulation
    steps = Long(ge=1, le=1000)  # of each simulation
    failScenario = Long(ge=1)  # this scenario (1, 2, …) fails
    tolerateFailures = Boolean  # a failed scenario is counted, not fatal
    depth = Long(ge=1, le=3)  # 2, 3: the children are sweeps themselves


class SweepResponse(ResponseBase):
    scenariosRun = Long  # simulations that succeeded, at every depth
    stepsDone = Long
    failedScenarios = Long


def children_of(request: SweepRequest) -> list[Child]:
    """The same children on every run: derived from the request alone."""
    count, depth = request.scenarios if request.scenarios is not None else 10, request.depth or 1
    if depth > 1:
        return [
            Child(
                "XSweep",
                "sweep",
                SweepRequest(
                    scenarios=count,
                    durationMs=request.durationMs,
                    steps=request.steps,
                    failScenario=request.failScenario,
                    tolerateFailures=request.tolerateFailures,
                    depth=depth - 1,
                ),
            )
            for _ in range(count)
        ]
    return [
        Child(
            "XDemo",
            "simulate",
            SimulateRequest(
                durationMs=request.durationMs or 0,
                steps=request.steps or 1,
                failAtStep=1 if request.failScenario == n + 1 else None,
            ),
        )
        for n in range(count)
    ]


@service.long_operation(request=SweepRequest, response=SweepResponse)
def sweep(request: SweepRequest, job: JobContext) -> SweepResponse:
    outcomes = job.run_children(
        children_of(request), failures="return" if request.tolerateFailures else "raise"
    )
    # after a stop (or with tolerateFailures) some children failed: sum up the others
    results = [o.result for o in outcomes if o.succeeded]
    nested = (request.depth or 1) > 1
    if job.stop_requested and not results:
        raise job.stop_fault()
    return SweepResponse(
        scenariosRun=sum(r.scenariosRun for r in results) if nested else len(results),
        stepsDone=sum(r.stepsDone for r in results),
        failedScenarios=sum(r.failedScenarios for r in results) + (len(outcomes) - len(results))
        if nested
        else len(outcomes) - len(results),
    )

"""XTour: plans delivery tours (a capacitated vehicle routing problem with time
windows and shifts), solved by PyVRP, as a long operation.

``planTours(PlanToursRequest): ToursResponse``, hence ``startPlanTours``,
``fetchToursResponse`` and the synchronous ``planTours``.  See docs/xtour.md.
"""

from xruntime.author import JobContext, Service

from .model import check
from .types import NoFeasibleSolutionFault, PlanToursRequest, TourPlanProgress, ToursResponse

service = Service("XTour", "Plans delivery tours for a fleet of vehicles (PyVRP).")
service.declare(TourPlanProgress)


def result_bound(request: PlanToursRequest) -> int:
    """The most a plan takes as stored: each order once, as a stop of a tour or as an
    unplanned id (up to 200 characters), and each vehicle's tour."""
    return 64 * 1024 + len(request.orders or ()) * 600 + request.fleet.count * 400


@service.long_operation(
    request=PlanToursRequest,
    response=ToursResponse,
    faults=(NoFeasibleSolutionFault,),
    validate=check,
    result_bound=result_bound,
)
def planTours(request: PlanToursRequest, job: JobContext) -> ToursResponse:
    from .solver import plan  # numpy and PyVRP are loaded only where jobs run

    return plan(request, job)

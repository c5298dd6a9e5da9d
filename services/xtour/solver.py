"""The planning itself: the request as a PyVRP problem, solved by PyVRP's iterated
local search, and its best solution as a ToursResponse.

Imported only where a job runs (a worker process), so that the HTTP server does not
load numpy and PyVRP.  PyVRP works on integers: distances are whole metres,
durations and times whole seconds.
"""

import time
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from pyvrp import (
    Client,
    Depot,
    IteratedLocalSearchParams,
    Location,
    ProblemData,
    Route,
    Solution,
    SolveParams,
    VehicleType,
    solve,
)
from pyvrp.IteratedLocalSearch import IteratedLocalSearch, IteratedLocalSearchCallbacks

from xruntime.author import JobContext

from ..geo import great_circle
from .model import Bounds, options
from .types import (
    NoFeasibleSolutionFault,
    PlanToursRequest,
    Tour,
    TourPlanProgress,
    ToursResponse,
    TourStop,
)

#: Progress is published at most this often (each report is a database write).
PROGRESS_PERIOD_S = 0.2
#: Stand-in for "no bound" in PyVRP's time windows (well below its overflow limits).
NO_BOUND = 1 << 40


def great_circle_m(lons: Sequence[float], lats: Sequence[float]) -> NDArray[np.float64]:
    """The great-circle distance in metres between every pair of points (longitudes
    and latitudes in degrees), as an n×n float array."""
    lon = np.radians(np.asarray(lons, dtype=float))
    lat = np.radians(np.asarray(lats, dtype=float))
    return great_circle(lon, lat, lon, lat)


def travel_matrices(request: PlanToursRequest) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(distances in m, durations in s) as int64 arrays over the locations: 0 is the
    depot, k is orders[k - 1].  From the request's matrix, or from its profile:
    distance = great-circle distance × detourFactor, duration = distance / speed."""
    if request.matrix is not None:
        rows = request.matrix.rows
        distances = np.array([row.distances for row in rows], dtype=np.int64)
        durations = np.array([row.durations for row in rows], dtype=np.int64)
    else:
        points = [request.depot.location] + [o.location for o in request.orders]
        profile = request.profile
        metres = great_circle_m([p.lon for p in points], [p.lat for p in points])
        metres = metres * (profile.detourFactor or 1.0)
        seconds = metres / (profile.averageSpeedKmh / 3.6)
        distances = np.rint(metres).astype(np.int64)
        durations = np.rint(seconds).astype(np.int64)
    np.fill_diagonal(distances, 0)
    np.fill_diagonal(durations, 0)
    return distances, durations


def unplanned_penalty(distances: NDArray[np.int64]) -> int:
    """The prize of an order: larger than what inserting it into any tour can cost
    (at most twice the longest distance), so the search plans every order it can."""
    return 10 * (2 * int(np.max(distances)) + 1)


def problem_data(
    request: PlanToursRequest, distances: NDArray[np.int64], durations: NDArray[np.int64]
) -> ProblemData:
    fleet = request.fleet
    dimensions = len(fleet.capacities or [])
    prize = unplanned_penalty(distances)
    locations = [Location(x=request.depot.location.lon, y=request.depot.location.lat)]
    clients = []
    for k, order in enumerate(request.orders, start=1):
        locations.append(Location(x=order.location.lon, y=order.location.lat))
        window = order.timeWindow
        clients.append(
            Client(
                location=k,
                delivery=list(order.demand or [0] * dimensions),
                service_duration=order.serviceTime or 0,
                tw_early=window.start if window else 0,
                tw_late=window.end if window else NO_BOUND,
                prize=prize,
                required=False,
            )
        )
    shift = fleet.shift
    vehicles = VehicleType(
        num_available=fleet.count,
        capacity=list(fleet.capacities or []),
        tw_early=shift.start if shift else 0,
        tw_late=shift.end if shift else NO_BOUND,
    )
    # (pyvrp's stub writes an integer matrix as np.ndarray[int], which numpy's generics
    # read as a shape of type int: no int64 array matches it)
    return ProblemData(
        locations,
        clients,
        [Depot(location=0)],
        [vehicles],
        [distances],  # type: ignore[list-item]
        [durations],  # type: ignore[list-item]
    )


class Search(IteratedLocalSearchCallbacks):
    """PyVRP's stopping criterion (called once before every iteration, with the cost
    of the best solution) and its callbacks: ends the search on a stop of the job or
    on the request's bounds, and publishes TourPlanProgress."""

    def __init__(self, job: JobContext, bounds: Bounds, began: float) -> None:
        self.job = job
        self.deadline = began + bounds["max_time_s"]
        self.max_iterations = bounds["max_iterations"]
        self.max_no_improvement = bounds["max_no_improvement"]
        self.iterations = -1  # the first call comes before iteration 1
        self.best: Solution | None = None
        self.best_cost: float | None = None
        self.improved_at = 0
        self.reported_at: float | None = None
        self.reported_iterations: int | None = None

    # callbacks
    def on_start(self, ils: IteratedLocalSearch) -> None:
        self.best = ils.initial_solution

    def on_best(self, best: Solution) -> None:
        self.best = best

    # the stopping criterion
    def __call__(self, best_cost: float) -> bool:
        self.iterations += 1
        if self.best_cost is None or best_cost < self.best_cost:
            self.best_cost, self.improved_at = best_cost, self.iterations
        now = time.monotonic()
        if self.reported_at is None or now - self.reported_at >= PROGRESS_PERIOD_S:
            self.report(now)
        return (
            self.job.stop_requested
            or now >= self.deadline
            or (self.max_iterations is not None and self.iterations >= self.max_iterations)
            or self.iterations - self.improved_at >= self.max_no_improvement
        )

    def report(self, now: float | None = None) -> None:
        if self.iterations == self.reported_iterations:
            return
        progress = TourPlanProgress(iterations=max(self.iterations, 0))
        if self.best is not None and self.best.is_feasible():
            assert self.best_cost is not None  # the stopping criterion saw it first
            progress.bestCost = int(self.best_cost)
            progress.bestDistance = int(self.best.distance())
            progress.plannedOrders = int(self.best.num_clients())
        self.job.report_progress(progress)
        self.reported_at = now if now is not None else time.monotonic()
        self.reported_iterations = self.iterations


def plan(request: PlanToursRequest, job: JobContext) -> ToursResponse:
    began = time.monotonic()
    bounds = options(request)
    distances, durations = travel_matrices(request)
    data = problem_data(request, distances, durations)
    search = Search(job, bounds, began)
    params = SolveParams(ils=IteratedLocalSearchParams(callbacks=search))
    result = solve(
        data, stop=search, seed=bounds["seed"], collect_stats=False, display=False, params=params
    )
    search.report()
    response = to_response(request, data, result.best, distances)
    response.iterations = result.num_iterations
    response.computationTimeMs = int((time.monotonic() - began) * 1000)
    if not response.plannedOrders and not job.stop_requested:
        n = len(request.orders)
        raise NoFeasibleSolutionFault(
            f"no tour can serve any of the {n} orders with this fleet",
            hint="Check the capacities against the demands, the time windows and service "
            "times against the fleet's shift and the travel times from the depot.",
            orders=n,
        )
    return response


def feasible_part(data: ProblemData, route: Route) -> Route | None:
    """The route itself when it keeps every constraint; otherwise its longest
    feasible beginning (None if not even its first stop is).  Only a search stopped
    before it found a feasible plan leaves such routes."""
    if route.is_feasible():
        return route
    visits = [a.idx for a in route.schedule() if a.is_client()]
    for end in range(len(visits) - 1, 0, -1):
        shorter = Route(data, visits[:end], route.vehicle_type())
        if shorter.is_feasible():
            return shorter
    return None


def to_response(
    request: PlanToursRequest, data: ProblemData, solution: Solution, distances: NDArray[np.int64]
) -> ToursResponse:
    """The solution as tours.  Every tour answered can be driven: the orders that a
    route cannot serve within its constraints (see feasible_part) are reported
    unplanned with the orders the solution leaves out."""
    orders = request.orders
    planned: set[int] = set()
    tours: list[Tour] = []
    for found in solution.routes():
        route = feasible_part(data, found)
        if route is None:
            continue
        stops, previous = [], 0
        for visit in route.schedule():
            if not visit.is_client():
                continue
            location = visit.idx + 1
            planned.add(visit.idx)
            stops.append(
                TourStop(
                    orderId=orders[visit.idx].id,
                    arrivalTime=int(visit.start_time - visit.wait_duration),
                    serviceStart=int(visit.start_time),
                    departureTime=int(visit.end_time),
                    distanceFromPrevious=int(distances[previous, location]),
                )
            )
            previous = location
        tours.append(
            Tour(
                vehicle=len(tours),
                stops=stops,
                load=[int(x) for x in route.delivery()],
                distance=int(route.distance()),
                duration=int(route.duration()),
                startTime=int(route.start_time()),
                endTime=int(route.end_time()),
            )
        )
    return ToursResponse(
        tours=tours,
        unplannedOrderIds=[o.id for i, o in enumerate(orders) if i not in planned],
        totalDistance=sum(t.distance for t in tours),
        totalDuration=sum(t.duration for t in tours),
        plannedOrders=len(planned),
    )

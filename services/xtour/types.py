"""XTour's request, response, progress and fault types.

Units everywhere: distances in metres, durations in seconds, points in time in seconds
from the start of the planning horizon (0 = the horizon's start, e.g. midnight of the
planning day). Coordinates are WGS84 longitude/latitude in degrees.
"""

from xruntime.author import (
    Double,
    JobProgress,
    Long,
    ProcessingFault,
    RequestBase,
    ResponseBase,
    Unicode,
    XModel,
    repeated,
    required,
)

#: The largest time, duration or quantity accepted (about 31 years in seconds).
MAX_VALUE = 10**9
#: The largest matrix distance (m) or duration (s) accepted.
MAX_MATRIX_VALUE = 10**9


class Coordinate(XModel):
    lon = required(Double, ge=-180, le=180)
    lat = required(Double, ge=-90, le=90)


class TimeWindow(XModel):
    """[start, end] in seconds from the start of the planning horizon."""

    start = required(Long, ge=0, le=MAX_VALUE)
    end = required(Long, ge=0, le=MAX_VALUE)


class Depot(XModel):
    id = Unicode(max_len=200)
    location = required(Coordinate)


class Order(XModel):
    id = required(Unicode, max_len=200)
    location = required(Coordinate)
    demand = repeated(Long(ge=0, le=MAX_VALUE))  # one amount per capacity dimension
    timeWindow = TimeWindow  # service must start inside it
    serviceTime = Long(ge=0, le=MAX_VALUE)  # seconds spent at the order


class Fleet(XModel):
    count = required(Long, ge=1, le=1000)  # identical vehicles available
    capacities = repeated(Long(ge=0, le=MAX_VALUE))  # one per quantity dimension
    shift = TimeWindow  # leave the depot / be back by


class MatrixRow(XModel):
    distances = repeated(Long(ge=0, le=MAX_MATRIX_VALUE))  # metres to every location
    durations = repeated(Long(ge=0, le=MAX_MATRIX_VALUE))  # seconds to every location


class TravelMatrix(XModel):
    """Row i, column j: from location i to location j; location 0 is the depot,
    location k (k >= 1) is orders[k - 1]."""

    rows = repeated(MatrixRow)


class TravelProfile(XModel):
    """Distances and durations computed from great-circle distances."""

    averageSpeedKmh = required(Double, gt=0, le=1000)
    detourFactor = Double(ge=1, le=10)  # default 1


class PlanningOptions(XModel):
    """Bounds of the search; it ends at the first one reached."""

    maxComputationTimeMs = Long(ge=1, le=24 * 3600 * 1000)  # default 10000
    maxIterations = Long(ge=0, le=10**9)  # default none
    maxIterationsWithoutImprovement = Long(ge=1, le=10**9)  # default 2000
    seed = Long(ge=0, le=2**31 - 1)  # default 0


class PlanToursRequest(RequestBase):
    depot = required(Depot)
    orders = repeated(Order)
    fleet = required(Fleet)
    matrix = TravelMatrix  # either a matrix ...
    profile = TravelProfile  # ... or a profile
    options = PlanningOptions


class TourStop(XModel):
    orderId = Unicode
    arrivalTime = Long  # arrival at the order
    serviceStart = Long  # arrival plus waiting for the time window to open
    departureTime = Long  # service start plus service time
    distanceFromPrevious = Long


class Tour(XModel):
    vehicle = Long  # 0 .. fleet.count - 1
    stops = repeated(TourStop)
    load = repeated(Long)  # total demand delivered, per dimension
    distance = Long  # metres, depot to depot
    duration = Long  # seconds, departure from the depot to the return
    startTime = Long  # departure from the depot
    endTime = Long  # return to the depot


class ToursResponse(ResponseBase):
    tours = repeated(Tour)
    unplannedOrderIds = repeated(Unicode)
    totalDistance = Long
    totalDuration = Long
    plannedOrders = Long
    iterations = Long
    computationTimeMs = Long


class TourPlanProgress(JobProgress):
    iterations = Long  # search iterations done
    bestCost = Long  # objective of the best plan so far (absent until one is feasible)
    bestDistance = Long  # its total distance, metres
    plannedOrders = Long  # orders it plans


class NoFeasibleSolutionFault(ProcessingFault):
    """The request is valid but the fleet cannot serve any of its orders."""

    orders = Long

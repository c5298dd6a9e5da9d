"""XTour without a server: the request checks, the travel matrices from a profile,
and the planning with a stand-in for the job (stop, progress, bounds)."""

import math
import time
from itertools import pairwise

import pytest

from xruntime.protocol import codec
from xruntime.protocol.faults import InvalidValueFault, MissingParameterFault
from xruntime_services.xtour.model import check
from xruntime_services.xtour.solver import great_circle_m, plan, travel_matrices, unplanned_penalty
from xruntime_services.xtour.types import PlanToursRequest


class FakeJob:
    """The ``job`` argument: records progress; stops after ``stop_after`` seconds."""

    def __init__(self, stop_after=None):
        self.reports = []
        self.began = time.monotonic()
        self.stop_after = stop_after

    def report_progress(self, progress):
        self.reports.append((time.monotonic(), codec.encode(progress)))

    @property
    def stop_requested(self):
        return self.stop_after is not None and time.monotonic() - self.began >= self.stop_after


def request(**parts):
    data = {
        "depot": {"location": {"lon": 8.4, "lat": 49.0}},
        "orders": [
            {"id": f"o{i}", "location": {"lon": 8.4 + 0.01 * i, "lat": 49.0}, "demand": [1]}
            for i in range(1, 4)
        ],
        "fleet": {"count": 2, "capacities": [5]},
        "profile": {"averageSpeedKmh": 36},
    }
    data.update(parts)
    return codec.decode(data, PlanToursRequest)


def grid(n, seed=0):
    import random

    rnd = random.Random(seed)
    return [
        {
            "id": f"o{i}",
            "location": {"lon": 8.4 + rnd.uniform(-0.1, 0.1), "lat": 49.0 + rnd.uniform(-0.1, 0.1)},
            "demand": [rnd.randint(1, 5)],
            "serviceTime": 120,
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------- checks


def test_a_good_request_passes():
    check(request())


@pytest.mark.parametrize(
    "change, parameter",
    [
        (lambda r: setattr(r.orders[0], "demand", [1, 1]), "orders[0].demand"),
        (lambda r: setattr(r.orders[2], "id", "o1"), "orders[2].id"),
        (lambda r: setattr(r.orders[1], "id", "  "), "orders[1].id"),
        (lambda r: setattr(r, "orders", r.orders * 700), "orders"),
    ],
)
def test_bad_requests_name_the_field(change, parameter):
    r = request()
    change(r)
    with pytest.raises(InvalidValueFault) as caught:
        check(r)
    assert caught.value.parameter == parameter


def test_windows_matrix_sizes_and_travel_source():
    r = request(fleet={"count": 1, "shift": {"start": 7, "end": 6}})
    with pytest.raises(InvalidValueFault) as caught:
        check(r)
    assert caught.value.parameter == "fleet.shift.end"
    rows = [{"distances": [0] * 4, "durations": [0] * 4} for _ in range(4)]
    r = request(matrix={"rows": rows})
    with pytest.raises(InvalidValueFault) as caught:
        check(r)  # both a matrix and a profile
    assert caught.value.parameter == "profile"
    r = request(matrix={"rows": rows}, profile=None)
    check(r)
    r.matrix.rows[3].distances = [0] * 5
    with pytest.raises(InvalidValueFault) as caught:
        check(r)
    assert caught.value.parameter == "matrix.rows[3].distances"
    with pytest.raises(MissingParameterFault) as caught:
        check(request(profile=None))
    assert caught.value.parameter == "profile"
    with pytest.raises(MissingParameterFault):
        check(request(orders=[]))


def test_field_ranges_are_the_codecs():
    with pytest.raises(InvalidValueFault) as caught:
        request(profile={"averageSpeedKmh": 36, "detourFactor": 0.5})
    assert caught.value.parameter == "profile.detourFactor"
    with pytest.raises(InvalidValueFault) as caught:
        request(depot={"location": {"lon": 181, "lat": 0}})
    assert caught.value.parameter == "depot.location.lon"


# --------------------------------------------------------------------------- matrices


def test_great_circle():
    d = great_circle_m([0, 1, 0], [0, 0, 90])
    assert d[0, 1] == pytest.approx(6371000 * math.pi / 180)
    assert d[0, 2] == pytest.approx(6371000 * math.pi / 2)
    assert d[1, 0] == d[0, 1] and d[0, 0] == 0


def test_profile_matrices_use_detour_and_speed():
    r = request(
        orders=[{"id": "a", "location": {"lon": 0.01, "lat": 0}}],
        depot={"location": {"lon": 0, "lat": 0}},
        profile={"averageSpeedKmh": 36, "detourFactor": 1.2},
    )
    distances, durations = travel_matrices(r)
    assert distances.tolist() == [[0, 1334], [1334, 0]]  # 1111.95 m × 1.2
    assert durations.tolist() == [[0, 133], [133, 0]]  # at 10 m/s
    assert unplanned_penalty(distances) == 10 * (2 * 1334 + 1)


def test_matrix_diagonal_is_ignored():
    rows = [
        {"distances": [5, 10], "durations": [5, 1]},
        {"distances": [10, 7], "durations": [1, 7]},
    ]
    r = request(
        orders=[{"id": "a", "location": {"lon": 0, "lat": 0}}], matrix={"rows": rows}, profile=None
    )
    distances, durations = travel_matrices(r)
    assert distances.tolist() == [[0, 10], [10, 0]] and durations.tolist() == [[0, 1], [1, 0]]


# --------------------------------------------------------------------------- planning


def test_plans_every_order_and_reports_progress():
    job = FakeJob()
    r = request(orders=grid(30), fleet={"count": 5, "capacities": [40]})
    result = plan(r, job)
    assert result.plannedOrders == 30 and not result.unplannedOrderIds
    assert sorted(s.orderId for t in result.tours for s in t.stops) == sorted(
        o.id for o in r.orders
    )
    assert result.totalDistance == sum(t.distance for t in result.tours)
    last = job.reports[-1][1]
    assert last["$type"] == "TourPlanProgress" and last["bestDistance"] == result.totalDistance
    assert last["iterations"] == result.iterations
    # at most one report each PROGRESS_PERIOD_S (0.2 s), not one an iteration: the
    # solver reads its clock before it reports and this job after, so a report delayed on
    # a loaded machine shortens the next gap seen here (0.19 s failed once in CI)
    assert all(b[0] - a[0] >= 0.1 for a, b in pairwise(job.reports[:-1]))


def test_stop_returns_the_best_so_far_and_bounds_apply():
    r = request(
        orders=grid(150, seed=2),
        fleet={"count": 20, "capacities": [60]},
        options={"maxComputationTimeMs": 60000, "maxIterationsWithoutImprovement": 10**9},
    )
    began = time.monotonic()
    result = plan(r, FakeJob(stop_after=0.8))
    assert time.monotonic() - began < 3
    assert result.plannedOrders == 150 and result.iterations > 0
    r.options.maxComputationTimeMs = 700
    began = time.monotonic()
    plan(r, FakeJob())
    assert 0.7 <= time.monotonic() - began < 2
    r.options.maxIterations = 3
    assert plan(r, FakeJob()).iterations == 3


def test_stopped_at_once_still_answers_a_plan():
    result = plan(
        request(orders=grid(20), fleet={"count": 5, "capacities": [100]}), FakeJob(stop_after=0)
    )
    assert result.iterations == 0 and result.plannedOrders == 20


def test_stopped_before_a_feasible_plan_answers_only_drivable_tours():
    """Two vehicles of capacity 5 for 20 orders: PyVRP's first solution overloads its
    routes; stopped at once, the answer keeps each route's feasible beginning."""
    r = request(orders=grid(20), fleet={"count": 2, "capacities": [5]})
    result = plan(r, FakeJob(stop_after=0))
    assert 0 < result.plannedOrders < 20 and result.tours
    demand = {o.id: o.demand[0] for o in r.orders}
    for tour in result.tours:
        assert tour.load[0] == sum(demand[s.orderId] for s in tour.stops) <= 5
    assert len(result.unplannedOrderIds) + result.plannedOrders == 20

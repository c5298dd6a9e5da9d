"""XTour end to end over real HTTP: JSON and SOAP (zeep, from the served WSDL), some
tests also over JSON-RPC.  Small instances whose optimum is known by hand, progress
while a 200-order instance runs, stop and timeout with the best plan so far, invalid
input, unplannable orders, and fetching across services."""

import time

import pytest

from tests.clients import BINDINGS, TERMINAL, RemoteFault, make_client, wait_done, watch
from tests.fixtures.instances import random_instance


@pytest.fixture(params=BINDINGS)
def client(request, server):
    return make_client(request.param, server.base)


@pytest.fixture(params=("json", "soap"))
def client2(request, server):
    """JSON and SOAP only, for the slower tests."""
    return make_client(request.param, server.base)


# --------------------------------------------------------------------------- helpers


def plain(value):
    """The answer without "$type" (SOAP answers carry it on every object)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if k != "$type"}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def wait_progress(client, job_id, iterations=1, timeout=30):
    """Watch until the job reports at least ``iterations``; answers the Job."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = watch(client, job_id, progressUpdatePeriod=250, maximumPollingPeriod=1000)
        assert job["status"] not in TERMINAL, job
        progress = job.get("progress")
        if progress and progress.get("iterations", 0) >= iterations:
            return job
    raise AssertionError("no progress")


def fault_of(call, *args):
    with pytest.raises(RemoteFault) as caught:
        call(*args)
    return caught.value


def matrix(distances, speed=10):
    """A matrix request part: durations = distance / speed (m/s)."""
    return {
        "rows": [{"distances": row, "durations": [d // speed for d in row]} for row in distances]
    }


def origin():
    """A coordinate for an instance given by a matrix (where coordinates are not used)."""
    return {"lon": 0.0, "lat": 0.0}


def square():
    """A depot at one corner of a 1 km square, orders at the other three: the best
    single tour is the square's perimeter, 4000 m (a diagonal is 1414 m)."""
    d = [[0, 1000, 1414, 1000], [1000, 0, 1000, 1414], [1414, 1000, 0, 1000], [1000, 1414, 1000, 0]]
    return {
        "depot": {"id": "D", "location": origin()},
        "orders": [
            {"id": name, "location": origin(), "demand": [1], "serviceTime": 60}
            for name in ("A", "B", "C")
        ],
        "fleet": {"count": 3, "capacities": [10]},
        "matrix": matrix(d),
    }


def line_with_capacity():
    """Orders at -2, -1, +1, +2 km on a line through the depot, 1 unit each, vehicles
    of capacity 2: the optimum is one tour per side, 4000 m each, 8000 m in all."""
    xs = [0, -2000, -1000, 1000, 2000]
    return {
        "depot": {"location": origin()},
        "orders": [{"id": f"o{x}", "location": origin(), "demand": [1]} for x in xs[1:]],
        "fleet": {"count": 4, "capacities": [2]},
        "matrix": matrix([[abs(a - b) for b in xs] for a in xs]),
    }


# --------------------------------------------------------------------------- solved exactly


def test_square_solved_exactly(client):
    result = plain(client.call("XTour", "planTours", square()))
    assert result["totalDistance"] == 4000
    assert result["plannedOrders"] == 3 and not result.get("unplannedOrderIds")
    (tour,) = result["tours"]
    assert tour["vehicle"] == 0 and tour["distance"] == 4000 and tour["load"] == [3]
    ids = [s["orderId"] for s in tour["stops"]]
    assert ids in (["A", "B", "C"], ["C", "B", "A"])  # around the square
    # 100 s per side, 60 s per stop, leaving at 0: arrivals 100, 260, 420, back at 580
    assert [s["arrivalTime"] for s in tour["stops"]] == [100, 260, 420]
    assert [s["departureTime"] for s in tour["stops"]] == [160, 320, 480]
    assert [s["distanceFromPrevious"] for s in tour["stops"]] == [1000, 1000, 1000]
    assert (tour["startTime"], tour["endTime"], tour["duration"]) == (0, 580, 580)
    assert result["totalDuration"] == 580
    assert not result.get("resultLimitations")


def test_capacity_splits_into_two_optimal_tours(client2):
    result = plain(client2.call("XTour", "planTours", line_with_capacity()))
    assert result["totalDistance"] == 8000 and result["plannedOrders"] == 4
    sides = sorted(sorted(s["orderId"] for s in t["stops"]) for t in result["tours"])
    assert sides == [["o-1000", "o-2000"], ["o1000", "o2000"]]
    assert sorted(t["vehicle"] for t in result["tours"]) == [0, 1]
    assert all(t["distance"] == 4000 and t["load"] == [2] for t in result["tours"])


def test_time_window_makes_the_vehicle_wait(client2):
    request = square()
    request["orders"][1]["timeWindow"] = {"start": 1000, "end": 2000}  # B, the far corner
    request["fleet"]["count"] = 1
    result = plain(client2.call("XTour", "planTours", request))
    (tour,) = result["tours"]
    assert tour["distance"] == 4000
    b = next(s for s in tour["stops"] if s["orderId"] == "B")
    assert b["serviceStart"] == 1000 and b["departureTime"] == 1060
    assert b["arrivalTime"] <= b["serviceStart"]


def test_profile_computes_great_circle_distances(client2):
    """One order 0.01° east of the depot on the equator: 1111.95 m great circle,
    × 1.2 detour = 1334 m each way; 36 km/h = 10 m/s, so 133 s each way."""
    request = {
        "depot": {"location": {"lon": 0.0, "lat": 0.0}},
        "orders": [{"id": "east", "location": {"lon": 0.01, "lat": 0.0}}],
        "fleet": {"count": 1},
        "profile": {"averageSpeedKmh": 36, "detourFactor": 1.2},
    }
    result = plain(client2.call("XTour", "planTours", request))
    (tour,) = result["tours"]
    assert tour["distance"] == 2 * 1334 and tour["stops"][0]["arrivalTime"] == 133


def test_unplannable_orders_are_listed(client2):
    request = square()
    request["orders"][0]["demand"] = [11]  # more than a vehicle holds
    request["orders"][2]["timeWindow"] = {"start": 0, "end": 50}  # C is 100 s away
    result = plain(client2.call("XTour", "planTours", request))
    assert result["unplannedOrderIds"] == ["A", "C"]
    assert result["plannedOrders"] == 1 and result["totalDistance"] == 2828


def test_no_order_can_be_served(client2):
    request = square()
    request["fleet"]["capacities"] = [0]
    job = client2.call("XTour", "startPlanTours", request)
    assert wait_done(client2, job["id"])["status"] == "FAILED"
    fault = fault_of(client2.call, "XTour", "fetchToursResponse", {"id": job["id"]})
    assert fault.type == "NoFeasibleSolutionFault" and fault.fields["orders"] == 3
    assert fault.fields["hint"]


# --------------------------------------------------------------------------- progress, stop


def test_progress_while_running_and_own_time_bound(client2):
    request = random_instance(maxComputationTimeMs=2500, maxIterationsWithoutImprovement=10**9)
    began = time.time()
    job = client2.call("XTour", "startPlanTours", request)
    running = wait_progress(client2, job["id"], iterations=1)
    progress = running["progress"]
    assert progress["$type"] == "TourPlanProgress"
    assert progress["bestCost"] > 0 and progress["bestDistance"] > 0
    assert progress["plannedOrders"] == 200
    done = wait_done(client2, job["id"])
    assert done["status"] == "SUCCEEDED"
    assert done["progress"]["iterations"] > progress["iterations"]
    assert done["progress"]["bestCost"] <= progress["bestCost"]
    result = plain(client2.call("XTour", "fetchToursResponse", {"id": job["id"]}))
    assert time.time() - began < 10
    assert not result.get("resultLimitations")  # its own bound is no stop
    assert 2500 <= result["computationTimeMs"] < 5000
    assert result["plannedOrders"] == 200 and not result.get("unplannedOrderIds")
    assert result["totalDistance"] == done["progress"]["bestDistance"]
    assert sum(len(t["stops"]) for t in result["tours"]) == 200
    for tour in result["tours"]:
        assert tour["load"][0] <= 100 and tour["load"][1] <= 30
        assert 0 <= tour["startTime"] and tour["endTime"] <= 8 * 3600


def test_stop_answers_the_best_plan_so_far(client2):
    request = random_instance(
        seed=11, maxComputationTimeMs=60000, maxIterationsWithoutImprovement=10**9
    )
    job = client2.call("XTour", "startPlanTours", request)
    seen = wait_progress(client2, job["id"], iterations=5)["progress"]
    assert client2.call("XRuntime", "stopJob", {"id": job["id"]})["status"] == "STOPPING"
    done = wait_done(client2, job["id"], timeout=10)
    assert done["status"] == "SUCCEEDED"
    result = plain(client2.call("XTour", "fetchToursResponse", {"id": job["id"]}))
    (limitation,) = result["resultLimitations"]
    assert limitation["reason"] == "REQUEST_STOPPED"
    assert result["plannedOrders"] == 200 and result["computationTimeMs"] < 60000
    assert result["totalDistance"] <= seen["bestDistance"]
    assert result["totalDistance"] == done["progress"]["bestDistance"]


def test_computation_timeout_answers_the_best_plan_so_far(server):
    client = make_client("json", server.base)
    request = random_instance(
        seed=3, maxComputationTimeMs=60000, maxIterationsWithoutImprovement=10**9
    )
    request["timeouts"] = {"computationTimeout": 1500}
    began = time.time()
    job = client.call("XTour", "startPlanTours", request)
    assert wait_done(client, job["id"])["status"] == "SUCCEEDED"
    assert time.time() - began < 15
    result = client.call("XTour", "fetchToursResponse", {"id": job["id"]})
    assert result["resultLimitations"][0]["reason"] == "REQUEST_TIMED_OUT"
    assert result["plannedOrders"] == 200


# --------------------------------------------------------------------------- invalid input


def _with(change):
    request = square()
    change(request)
    return request


INVALID = [
    (lambda r: r["orders"][1].update(demand=[1, 2]), "orders[1].demand"),
    (lambda r: r["orders"][2].update(demand=[-1]), "orders[2].demand[0]"),
    (lambda r: r["orders"][0]["location"].update(lat=95.0), "orders[0].location.lat"),
    (lambda r: r["orders"][2].update(id="A"), "orders[2].id"),
    (
        lambda r: r["orders"][0].update(timeWindow={"start": 500, "end": 100}),
        "orders[0].timeWindow.end",
    ),
    (lambda r: r["orders"][0].update(serviceTime=-5), "orders[0].serviceTime"),
    (lambda r: r["fleet"].update(count=0), "fleet.count"),
    (lambda r: r["fleet"].update(shift={"start": 10, "end": 5}), "fleet.shift.end"),
    (lambda r: r["matrix"]["rows"].pop(), "matrix.rows"),
    (lambda r: r["matrix"]["rows"][2]["durations"].pop(), "matrix.rows[2].durations"),
    (
        lambda r: r["matrix"]["rows"][1]["distances"].__setitem__(0, -1),
        "matrix.rows[1].distances[0]",
    ),
    (lambda r: r.update(profile={"averageSpeedKmh": 50}), "profile"),
    (
        lambda r: (r.pop("matrix"), r.update(profile={"averageSpeedKmh": 0})),
        "profile.averageSpeedKmh",
    ),
    (
        lambda r: (r.pop("matrix"), r.update(profile={"averageSpeedKmh": 50, "detourFactor": 0.9})),
        "profile.detourFactor",
    ),
    (lambda r: r.update(options={"maxComputationTimeMs": 0}), "options.maxComputationTimeMs"),
]


def test_invalid_input_names_the_field(client2):
    for change, parameter in INVALID:
        fault = fault_of(client2.call, "XTour", "startPlanTours", _with(change))
        assert (fault.type, fault.fields.get("parameter")) == ("InvalidValueFault", parameter)
        assert fault.fields["hint"]


def test_invalid_input_over_json_rpc_and_missing_parts(server):
    client = make_client("jsonrpc", server.base)
    fault = fault_of(client.call, "XTour", "planTours", _with(lambda r: r["fleet"].update(count=0)))
    assert fault.type == "InvalidValueFault" and fault.fields["parameter"] == "fleet.count"
    for change, parameter in (
        (lambda r: r.pop("matrix"), "profile"),
        (lambda r: r.update(orders=[]), "orders"),
    ):
        fault = fault_of(client.call, "XTour", "startPlanTours", _with(change))
        assert (fault.type, fault.fields["parameter"]) == ("MissingParameterFault", parameter)
    json_client = make_client("json", server.base)
    fault = fault_of(json_client.call, "XTour", "startPlanTours", _with(lambda r: r.pop("fleet")))
    assert fault.status == 400 and fault.fields["parameter"] == "fleet"


# --------------------------------------------------------------------------- across services


def test_invalid_fetch_type_both_ways(client):
    tour_job = client.call("XTour", "startPlanTours", square())["id"]
    demo_job = client.call("XDemo", "startSimulate", {"durationMs": 0})["id"]
    assert wait_done(client, tour_job)["status"] == "SUCCEEDED"
    assert wait_done(client, demo_job)["status"] == "SUCCEEDED"
    fault = fault_of(client.call, "XDemo", "fetchSimulateResponse", {"id": tour_job})
    assert fault.type == "InvalidFetchTypeFault" and fault.fields["jobId"] == tour_job
    fault = fault_of(client.call, "XTour", "fetchToursResponse", {"id": demo_job})
    assert fault.type == "InvalidFetchTypeFault" and fault.fields["jobId"] == demo_job
    # each job is still there for its own fetch
    assert (
        plain(client.call("XTour", "fetchToursResponse", {"id": tour_job}))["totalDistance"] == 4000
    )
    assert client.call("XDemo", "fetchSimulateResponse", {"id": demo_job})["stepsDone"] == 1


def test_runtime_information_lists_xtour(server):
    info = make_client("json", server.base).call("XRuntime", "getRuntimeInformation", {})
    xtour = next(s for s in info["services"] if s["name"] == "XTour")
    assert set(xtour["operations"]) >= {"startPlanTours", "fetchToursResponse", "planTours"}


def test_wsdl_declares_the_fault_and_the_progress(server):
    """XTour's WSDL declares its fault on its operations, and the schema it imports
    (schemas/XTour.xsd) the fault's element and the progress type."""
    wsdl = server.session.get(f"{server.base}/services/ws/XTour?wsdl").text
    assert 'wsdl:fault name="NoFeasibleSolutionFault"' in wsdl
    schema = server.session.get(f"{server.base}/services/ws/schemas/XTour.xsd").text
    assert '<xs:element name="NoFeasibleSolutionFault"' in schema
    assert '<xs:complexType name="TourPlanProgress">' in schema

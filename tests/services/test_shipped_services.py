"""The shipped services, tested as their authors would test an outside one: with
``xruntime.testing``'s fixtures (a real node finding them by their entry points, and a
client per binding), each test once per binding."""

import pytest

from xruntime.testing import Fault, run_job


def test_xdemo_simulates_and_reports_progress(xruntime_client):
    job, response = run_job(
        xruntime_client, "XDemo", "simulate", {"steps": 3, "durationMs": 30, "resultSize": 5}
    )
    assert job["status"] == "SUCCEEDED"
    progress = {"$type": "BulkProgress", "remaining": 0, "successful": 3, "failed": 0}
    assert job["progress"] == progress
    assert response["stepsDone"] == 3 and response["payload"] == "xrunt"


def test_xdemo_fails_with_its_typed_fault(xruntime_client):
    with pytest.raises(Fault) as raised:
        run_job(xruntime_client, "XDemo", "simulate", {"steps": 2, "failAtStep": 2})
    assert raised.value.type == "ProcessingFault"
    assert "step 2" in raised.value.message


def test_xdima_computes_a_matrix(xruntime_client):
    here = {"longitude": 8.4, "latitude": 49.0}
    there = {"longitude": 8.5, "latitude": 49.0}
    job, response = run_job(
        xruntime_client, "XDima", "createDistanceMatrix", {"startLocations": [here, there]}
    )
    assert job["status"] == "SUCCEEDED"
    rows = response["rows"]
    assert [row["distances"][i] for i, row in enumerate(rows)] == [0, 0]
    assert 7_000 < rows[0]["distances"][1] == rows[1]["distances"][0] < 12_000


def test_xtour_plans_a_tour(xruntime_client):
    request = {
        "depot": {"location": {"lon": 8.4, "lat": 49.0}},
        "orders": [
            {"id": "a", "location": {"lon": 8.41, "lat": 49.0}, "demand": [1]},
            {"id": "b", "location": {"lon": 8.42, "lat": 49.01}, "demand": [1]},
        ],
        "fleet": {"count": 1, "capacities": [10]},
        "profile": {"averageSpeedKmh": 50},
        "options": {"maxIterations": 50},
    }
    job, response = run_job(xruntime_client, "XTour", "planTours", request)
    assert job["status"] == "SUCCEEDED"
    assert response["plannedOrders"] == 2
    assert sorted(s["orderId"] for s in response["tours"][0]["stops"]) == ["a", "b"]

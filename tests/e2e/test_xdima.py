"""XDima end to end: a real node (tests/harness.py), over JSON, SOAP (zeep) and JSON-RPC."""

import math
import os
import random
import time

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client
from tests.harness import Server

MAX_CELLS = 250_000  # lowered for this node: [services.XDima] max_cells


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(
        str(tmp_path_factory.mktemp("xdima")),
        extra=f"\n[services.XDima]\nmax_cells = {MAX_CELLS}\n",
    ).start()
    yield srv
    srv.stop()


@pytest.fixture(params=BINDINGS)
def client(request, server):
    return make_client(request.param, server.base)


def locations(points):
    return [{"longitude": x, "latitude": y} for x, y in points]


def plain(data):
    """An answer without "$type" (SOAP marks every object), for comparing bindings."""
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items() if k != "$type"}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data


def haversine(lon1, lat1, lon2, lat2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    h = (
        math.sin((p2 - p1) / 2) ** 2
        + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    )
    return 2 * 6_371_000 * math.asin(math.sqrt(h))


# Hand-computed on a sphere of R = 6 371 000 m: one degree of a great circle is
# R·π/180 = 111 194.93 m, a quarter circle R·π/2 = 10 007 543.40 m; from (1°E, 0°) to
# (0°, 1°N) the central angle is acos(cos²1°) = 0.024682 rad, 157 249.4 m; from (1°E, 0°)
# to (90°E, 0°) it is 89°, 9 896 348.5 m.
STARTS = [(0, 0), (1, 0)]
DESTINATIONS = [(0, 0), (0, 1), (90, 0)]
DISTANCES = [[0, 111_195, 10_007_543], [111_195, 157_249, 9_896_348]]
TIMES = [[0, 11_119, 1_000_754], [11_119, 15_725, 989_635]]  # at 10 m/s, from the unrounded metres


def test_matrix_matches_hand_computed_great_circles(client):
    result = client.call(
        "XDima",
        "createDistanceMatrix",
        {
            "startLocations": locations(STARTS),
            "destinationLocations": locations(DESTINATIONS),
            "profile": {"averageSpeedKmh": 36.0, "detourFactor": 1.0},
        },
    )
    assert [row["distances"] for row in result["rows"]] == DISTANCES
    assert [row["travelTimes"] for row in result["rows"]] == TIMES
    summary = plain(result["summary"])
    assert summary["numberOfStartLocations"] == 2 and summary["numberOfDestinationLocations"] == 3
    assert summary["numberOfRowsComputed"] == 2
    assert (summary["minimumDistance"], summary["maximumDistance"]) == (0, 10_007_543)
    assert "resultLimitations" not in result


def test_detour_factor_and_default_destinations(client):
    result = client.call(
        "XDima",
        "createDistanceMatrix",
        {
            "startLocations": locations([(0, 0), (0, 1)]),
            "profile": {"averageSpeedKmh": 72.0, "detourFactor": 1.5},
        },
    )
    assert [row["distances"] for row in result["rows"]] == [[0, 166_792], [166_792, 0]]
    assert result["rows"][0]["travelTimes"] == [0, 8_340]  # 166 792.4 m at 20 m/s


def test_start_watch_fetch_over_every_binding_agree(server):
    rng = random.Random(3)
    points = [(rng.uniform(6, 15), rng.uniform(47, 55)) for _ in range(300)]
    job = server.call("XDima", "startCreateDistanceMatrix", {"startLocations": locations(points)})
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    answers = [
        plain(
            make_client(b, server.base).call(
                "XDima", "fetchDistanceMatrixResponse", {"id": job["id"]}
            )
        )
        for b in BINDINGS
    ]
    assert answers[0] == answers[1] == answers[2]
    rows = answers[0]["rows"]
    assert len(rows) == 300 and all(len(r["distances"]) == 300 for r in rows)
    for i, j in ((0, 1), (17, 250), (299, 3)):
        assert rows[i]["distances"][j] == round(haversine(*points[i], *points[j]) * 1.3)
        assert rows[i]["travelTimes"][j] == round(
            haversine(*points[i], *points[j]) * 1.3 / (50 / 3.6)
        )


def _slow_request(starts=1000):
    return {
        "startLocations": locations([(i / 100, 0) for i in range(starts)]),
        "destinationLocations": locations([(0, 0), (1, 1)]),
        "blockPauseMs": 300,
    }


def test_progress_is_seen_while_running(server):
    job = server.call("XDima", "startCreateDistanceMatrix", _slow_request())
    seen = []
    while True:
        answer = server.watch(job["id"], progressUpdatePeriod=100, maximumPollingPeriod=2000)
        if "progress" in answer:
            seen.append(
                (
                    answer["status"],
                    answer["progress"]["status"],
                    answer["progress"]["calculationProgress"],
                )
            )
            assert answer["progress"]["$type"] == "DistanceMatrixProgress"
        if answer["status"] in ("SUCCEEDED", "FAILED"):
            break
    assert answer["status"] == "SUCCEEDED"
    # the last block's 100 % may be seen before the outcome is written
    running = [p for s, st, p in seen if s == "RUNNING" and st == "CALCULATING_MATRIX"]
    assert running and all(0 < p <= 100 for p in running) and running == sorted(running), seen
    assert seen[-1][1:] == ("DONE", 100)


@pytest.mark.parametrize("binding", ("json", "soap"))
def test_stop_answers_the_rows_so_far(server, binding):
    job = server.call("XDima", "startCreateDistanceMatrix", _slow_request())
    while True:
        answer = server.watch(job["id"], progressUpdatePeriod=100, maximumPollingPeriod=2000)
        if answer.get("progress", {}).get("status") == "CALCULATING_MATRIX":
            break
        assert answer["status"] in ("QUEUING", "RUNNING"), answer
    assert server.call("XRuntime", "stopJob", {"id": job["id"]})["status"] == "STOPPING"
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    result = make_client(binding, server.base).call(
        "XDima", "fetchDistanceMatrixResponse", {"id": job["id"]}
    )
    done = result["summary"]["numberOfRowsComputed"]
    assert 0 < done < 1000 and len(result["rows"]) == done
    assert result["rows"][1]["distances"] == [
        round(haversine(0.01, 0, x, y) * 1.3) for x, y in ((0, 0), (1, 1))
    ]
    (limitation,) = result["resultLimitations"]
    assert limitation["$type"] == "IntermediateResponseLimitation"
    assert limitation["reason"] == "REQUEST_STOPPED"


@pytest.mark.parametrize(
    "request_, fault_type, parameter",
    [
        ({}, "MissingParameterFault", "startLocations"),
        ({"startLocations": []}, "MissingParameterFault", "startLocations"),
        (
            {"startLocations": locations([(0, 0), (200, 0)])},
            "InvalidValueFault",
            "startLocations[1].longitude",
        ),
        (
            {"startLocations": [{"longitude": 1.0}]},
            "MissingParameterFault",
            "startLocations[0].latitude",
        ),
        (
            {"startLocations": locations([(0, 0)]), "profile": {"detourFactor": 0.5}},
            "InvalidValueFault",
            "profile.detourFactor",
        ),
        (
            {"startLocations": locations([(0, 0)]), "profile": {"averageSpeedKmh": 0.0}},
            "InvalidValueFault",
            "profile.averageSpeedKmh",
        ),
        (
            {
                "startLocations": locations([(0, 0)] * 501),
                "destinationLocations": locations([(1, 1)] * 500),
            },
            "InvalidValueFault",
            "destinationLocations",
        ),
        ({"startLocations": locations([(0, 0)] * 501)}, "InvalidValueFault", "startLocations"),
    ],
)
@pytest.mark.parametrize("operation", ("startCreateDistanceMatrix", "createDistanceMatrix"))
def test_invalid_input_is_refused_at_once(client, request_, fault_type, parameter, operation):
    if client.name == "soap" and parameter.endswith(".latitude"):
        pytest.skip("zeep refuses a missing required element itself, before sending")
    with pytest.raises(RemoteFault) as fault:
        client.call("XDima", operation, request_)
    assert fault.value.type == fault_type
    assert fault.value.fields["parameter"] == parameter
    if client.name == "json":
        assert fault.value.status == 400


def test_the_largest_allowed_matrix_is_accepted(server):
    job = server.call(
        "XDima", "startCreateDistanceMatrix", {"startLocations": locations([(0, 0)] * 500)}
    )  # 500 × 500 = MAX_CELLS
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"


def test_fetching_with_another_services_fetch_is_refused(client, server):
    dima = server.call("XDima", "startCreateDistanceMatrix", {"startLocations": locations(STARTS)})
    demo = server.call("XDemo", "startSimulate", {"steps": 1})
    for job in (dima, demo):
        assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    for service, operation, job in (
        ("XDemo", "fetchSimulateResponse", dima),
        ("XDima", "fetchDistanceMatrixResponse", demo),
    ):
        with pytest.raises(RemoteFault) as fault:
            client.call(service, operation, {"id": job["id"]})
        assert fault.value.type == "InvalidFetchTypeFault"
        assert fault.value.fields["jobId"] == job["id"]
    assert client.call("XDima", "fetchDistanceMatrixResponse", {"id": dima["id"]})["rows"]


def _grid(rows, columns):
    rng = random.Random(rows * 1000 + columns)
    return (
        locations([(rng.uniform(6, 15), rng.uniform(47, 55)) for _ in range(rows)]),
        locations([(rng.uniform(6, 15), rng.uniform(47, 55)) for _ in range(columns)]),
    )


def _without_time(result):
    result = dict(result, summary=dict(result["summary"]))
    del result["summary"]["computationTimeMs"]
    return result


@pytest.mark.parametrize("parallelism", (2, 3, 7))
def test_parallelism_answers_the_same_matrix_as_one_job(server, parallelism):
    """Row blocks computed as child jobs, joined in the store's form: the same answer
    (but the computing time), whatever the blocks, over every binding."""
    starts, destinations = _grid(401, 130)
    request = {"startLocations": starts, "destinationLocations": destinations}
    single = server.call("XDima", "createDistanceMatrix", request)
    job = server.call("XDima", "startCreateDistanceMatrix", dict(request, parallelism=parallelism))
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert len(server.call("XRuntime", "listJobs", {"parentId": job["id"]})["jobs"]) == parallelism
    for binding in BINDINGS:
        result = make_client(binding, server.base).call(
            "XDima", "fetchDistanceMatrixResponse", {"id": job["id"]}
        )
        assert plain(_without_time(result)) == plain(_without_time(single))


def test_a_stopped_parallel_matrix_answers_the_rows_of_the_blocks_done(server):
    starts, destinations = _grid(900, 2)  # 2 children of 450 rows: blocks of 250 and 200
    job = server.call(
        "XDima",
        "startCreateDistanceMatrix",
        {
            "startLocations": starts,
            "destinationLocations": destinations,
            "parallelism": 2,
            # the stop ends the pause at once: a long one costs nothing, and the stop has
            # 10 s to arrive before a child's second block (1 s was once not enough on a
            # loaded CI machine: both children ended whole)
            "blockPauseMs": 10_000,
        },
    )
    server.wait_status(job["id"], "RUNNING")
    while not any(
        c["status"] == "RUNNING"
        for c in server.call("XRuntime", "listJobs", {"parentId": job["id"]}).get("jobs", [])
    ):
        pass
    assert server.call("XRuntime", "stopJob", {"id": job["id"]})["status"] == "STOPPING"
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    result = server.call("XDima", "fetchDistanceMatrixResponse", {"id": job["id"]})
    done = result["summary"]["numberOfRowsComputed"]
    assert 0 < done < 900 and len(result["rows"]) == done
    assert [x["reason"] for x in result["resultLimitations"]] == ["REQUEST_STOPPED"]
    whole = server.call(
        "XDima",
        "createDistanceMatrix",
        {"startLocations": starts[:done], "destinationLocations": destinations},
    )
    assert result["rows"] == whole["rows"]  # the first rows, in order


def test_a_parallel_matrix_refers_to_its_childrens_result_files_without_copying_them(tmp_path):
    """Blocks whose results are result files (SQLite, each over a piece of the stored
    form): the parent's result is the head and tail of its form in a small file of its
    own and its children's pieces where they are (store/result_files.py, spans).  It
    answers what one job does, over every binding; a backup copies every file it needs;
    once the parent (and so its children) is deleted, no file is left."""
    from xruntime.store import backup, result_files

    node = Server(str(tmp_path), extra="\n[services.XDima]\nmax_cells = 1000000\n").start()
    try:
        starts, destinations = _grid(800, 800)  # children of 400 × 800 × 8 B: 2.56 MB each
        request = {"startLocations": starts, "destinationLocations": destinations}
        single = node.call("XDima", "startCreateDistanceMatrix", request)
        job = node.call("XDima", "startCreateDistanceMatrix", dict(request, parallelism=2))
        for started in (single, job):
            assert node.wait_done(started["id"])["status"] == "SUCCEEDED"
        (database,) = [str(p) for p in tmp_path.rglob("xruntime.db")]
        folder = result_files.folder_of(database)
        sizes = {
            name: os.path.getsize(os.path.join(folder, name))
            for name in os.listdir(folder)
            if name.endswith(".result")
        }
        (own,) = [size for name, size in sizes.items() if name.startswith(job["id"])]
        assert own < 64 * 1024 and len(sizes) == 4  # one job's, two children's, the parent's
        expected = node.call("XDima", "fetchDistanceMatrixResponse", {"id": single["id"]})
        for binding in BINDINGS:
            result = make_client(binding, node.base).call(
                "XDima", "fetchDistanceMatrixResponse", {"id": job["id"]}
            )
            assert plain(_without_time(result)) == plain(_without_time(expected))
        copy = tmp_path / "backup"
        assert backup.backup(database, str(copy))[1] == 4
        for started in (single, job):
            node.call("XRuntime", "deleteJob", {"id": started["id"]})
        deadline = time.monotonic() + 60  # swept every RESULT_SWEEP_PERIOD (10 s)
        while any(name.endswith(".result") for name in os.listdir(folder)):
            assert time.monotonic() < deadline, os.listdir(folder)
            time.sleep(0.1)
    finally:
        node.stop()

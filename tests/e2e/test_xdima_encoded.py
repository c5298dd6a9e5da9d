"""XDima's encoded form (contentsFormat ENCODED_ARRAYS, docs/xdima-encoded.md) end to
end: a real node, every binding (JSON, JSON-RPC, SOAP through zeep), parallelism 1 and
N; the encoded arrays decode to exactly the plain form's rows."""

import base64
import random
import struct

import pytest

from tests.clients import BINDINGS, RemoteFault, make_client
from tests.harness import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("xdima-encoded"))).start()
    yield srv
    srv.stop()


def locations(count, seed):
    rng = random.Random(seed)
    return [
        {"longitude": rng.uniform(6, 15), "latitude": rng.uniform(47, 55)} for _ in range(count)
    ]


def decoded(text, columns):
    """base64 of little-endian int32, row-major → rows of ``columns`` ints."""
    raw = base64.b64decode(text, validate=True)
    assert len(raw) % (4 * columns) == 0
    values = struct.unpack(f"<{len(raw) // 4}i", raw)
    return [list(values[i : i + columns]) for i in range(0, len(values), columns)]


def summary_of(result):
    summary = {k: v for k, v in result["summary"].items() if k != "$type"}
    del summary["computationTimeMs"]
    return summary


def fetched(binding, server, request):
    """The answer of a started, finished and fetched job, through ``binding``."""
    client = make_client(binding, server.base)
    job = client.call("XDima", "startCreateDistanceMatrix", request)
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    return client.call("XDima", "fetchDistanceMatrixResponse", {"id": job["id"]})


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(
    "starts, destinations, parallelism",
    [(3, 3, 1), (61, 47, 1), (61, 47, 3), (250, 33, 4)],
)
def test_encoded_arrays_decode_to_the_plain_rows(
    server, binding, starts, destinations, parallelism
):
    request = {
        "startLocations": locations(starts, starts),
        "destinationLocations": locations(destinations, destinations + 1),
        "parallelism": parallelism,
    }
    plain = fetched(binding, server, dict(request, contentsFormat="ARRAYS"))
    encoded = fetched(binding, server, dict(request, contentsFormat="ENCODED_ARRAYS"))
    assert not encoded.get("rows")
    contents = encoded["encodedContents"]
    assert decoded(contents["distances"], destinations) == [r["distances"] for r in plain["rows"]]
    assert decoded(contents["travelTimes"], destinations) == [
        r["travelTimes"] for r in plain["rows"]
    ]
    assert len(plain["rows"]) == starts
    assert summary_of(encoded) == summary_of(plain)
    assert not plain.get("encodedContents")


def test_every_binding_answers_the_same_encoded_text(server):
    request = {"startLocations": locations(120, 5), "contentsFormat": "ENCODED_ARRAYS"}
    job = server.call("XDima", "startCreateDistanceMatrix", request)
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    texts = {
        binding: make_client(binding, server.base).call(
            "XDima", "fetchDistanceMatrixResponse", {"id": job["id"]}
        )["encodedContents"]["distances"]
        for binding in BINDINGS
    }
    assert len(set(texts.values())) == 1, {b: t[:40] for b, t in texts.items()}
    assert len(base64.b64decode(texts["json"])) == 120 * 120 * 4


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_speed_whose_travel_times_pass_int32_is_refused_for_the_encoded_form(server, binding):
    client = make_client(binding, server.base)
    before = server.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs", [])
    request = {
        "startLocations": locations(2, 1),
        "profile": {"averageSpeedKmh": 0.01},  # 2.3 · 10⁹ s around the Earth
        "contentsFormat": "ENCODED_ARRAYS",
    }
    with pytest.raises(RemoteFault) as refused:
        client.call("XDima", "startCreateDistanceMatrix", request)
    assert refused.value.type == "InvalidValueFault"
    assert refused.value.fields.get("parameter") == "profile.averageSpeedKmh"
    assert server.call("XRuntime", "listJobs", {"limit": 1000}).get("jobs", []) == before
    # the plain form holds them (int64)
    plain = fetched(binding, server, dict(request, contentsFormat="ARRAYS"))
    assert len(plain["rows"]) == 2


def test_a_stopped_encoded_matrix_holds_the_rows_done(server):
    request = {
        "startLocations": locations(5000, 9),  # 20 blocks, 0.3 s apart
        "destinationLocations": locations(40, 10),
        "blockPauseMs": 300,
        "contentsFormat": "ENCODED_ARRAYS",
    }
    job = server.call("XDima", "startCreateDistanceMatrix", request)
    while "progress" not in (answer := server.watch(job["id"], maximumPollingPeriod=2000)):
        assert answer["status"] in ("QUEUING", "RUNNING"), answer
    server.call("XRuntime", "stopJob", {"id": job["id"]})
    assert server.wait_done(job["id"])["status"] == "SUCCEEDED"
    result = server.call("XDima", "fetchDistanceMatrixResponse", {"id": job["id"]})
    done = result["summary"]["numberOfRowsComputed"]
    assert 0 < done < 5000
    assert len(decoded(result["encodedContents"]["travelTimes"], 40)) == done
    whole = server.call(
        "XDima",
        "createDistanceMatrix",
        {
            "startLocations": request["startLocations"][:done],
            "destinationLocations": locations(40, 10),
        },
    )
    assert decoded(result["encodedContents"]["distances"], 40) == [
        r["distances"] for r in whole["rows"]
    ]

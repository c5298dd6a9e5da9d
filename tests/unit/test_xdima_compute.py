"""XDima's arithmetic and its function, without a server; and the compact stored form
its large results rely on (xruntime/payload/form.py)."""

import json
import math
import random

import numpy as np
import pytest

from xruntime.author.registry import setting_keys
from xruntime.author.tables import Table, encoded, table
from xruntime.payload.arrays import stored_table
from xruntime.payload.form import MAGIC, pack, unpack
from xruntime.payload.list_join import encoded_members, join_lists, without_list
from xruntime.protocol import codec
from xruntime.protocol.faults import InvalidValueFault, MissingParameterFault, RequestStoppedFault
from xruntime.settings import config
from xruntime_services import xdima
from xruntime_services.xdima import compute
from xruntime_services.xdima.types import CreateDistanceMatrixRequest

QUARTER = 10_007_543  # a quarter of a great circle of R = 6 371 km, in metres
ONE_DEGREE = 111_195  # one degree of it


def haversine(lon1, lat1, lon2, lat2):
    """The textbook formula, one pair at a time, for comparison."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6_371_000 * math.asin(math.sqrt(h))


def test_hand_computed_great_circles():
    points = [(0, 0), (1, 0), (0, 1), (90, 0), (0, 90), (180, 0)]
    lon, lat = compute.to_radians(points)
    d = compute.great_circle(lon, lat, lon, lat)
    assert d.shape == (6, 6)
    assert np.allclose(np.diag(d), 0)
    assert round(d[0, 1]) == ONE_DEGREE and round(d[0, 2]) == ONE_DEGREE
    assert round(d[0, 3]) == QUARTER and round(d[0, 4]) == QUARTER
    assert round(d[0, 5]) == 20_015_087  # π R
    assert np.allclose(d, d.T)


def test_block_applies_detour_speed_and_rounding():
    lon, lat = compute.to_radians([(0, 0), (1, 0)])
    metres, seconds = compute.block((lon, lat), (lon, lat), 1.5, 36.0)
    assert metres.dtype == np.int32 and seconds.dtype == np.int32
    assert metres[0, 1] == round(ONE_DEGREE * 1.5 - 0.07)  # 111194.93 × 1.5 = 166792.4
    assert seconds[0, 1] == round(111194.93 * 1.5 / 10)  # 36 km/h = 10 m/s
    assert metres[0, 0] == 0 and seconds[1, 1] == 0


def test_random_points_match_the_textbook_formula():
    rng = random.Random(5)
    pts = [(rng.uniform(-180, 180), rng.uniform(-90, 90)) for _ in range(40)]
    lon, lat = compute.to_radians(pts)
    d = compute.great_circle(lon, lat, lon, lat)
    for i in range(40):
        for j in range(40):
            assert d[i, j] == pytest.approx(haversine(*pts[i], *pts[j]), abs=1e-3)


def test_int32_holds_every_distance_and_the_travel_times_above_a_third_of_a_km_h():
    antipodes = compute.to_radians([(0, 0), (180, 0)])
    metres, seconds = compute.block(antipodes, antipodes, 10.0, 0.34)  # the longest, slowest
    assert metres.dtype == np.int32 and metres[0, 1] == 200_150_868  # 10 π R < 2³¹ − 1
    assert seconds.dtype == np.int32 and seconds[0, 1] == 2_119_244_484
    metres, seconds = compute.block(antipodes, antipodes, 10.0, 0.33)
    assert seconds.dtype == np.int64 and seconds[0, 1] == round(200_150_867.96 / (0.33 / 3.6))
    with pytest.raises(FloatingPointError):
        compute.matrix_dtype(10.0, 1e-12)


def test_block_rows_stay_within_bounds():
    assert compute.block_rows(2000) == 125
    assert compute.block_rows(1) == 250
    assert compute.block_rows(10_000_000) == 1


class FakeJob:
    def __init__(self, stop_after_reports=None, threads=1):
        self.progress = []
        self.stop_after = stop_after_reports
        self.settings = {"max_cells": 4_000_000, "threads": threads}
        self.cores = 2

    def report_progress(self, progress):
        self.progress.append(codec.encode(progress))

    @property
    def stop_requested(self):
        return self.stop_after is not None and len(self.progress) >= self.stop_after

    def wait(self, seconds):
        return self.stop_requested

    def stop_fault(self):
        return RequestStoppedFault("stopped")

    table = staticmethod(table)
    encoded = staticmethod(encoded)


def answered(returned: Table) -> xdima.DistanceMatrixResponse:
    """The response a client reads: the stored form of what the function returned,
    decoded (the worker stores a ``Table`` with ``stored_table``)."""
    stored = stored_table(returned, xdima.DistanceMatrixResponse)
    return codec.decode(json.loads(unpack(stored)), xdima.DistanceMatrixResponse)


def request(starts, destinations=None, **more):
    data = {"startLocations": [{"longitude": x, "latitude": y} for x, y in starts]}
    if destinations is not None:
        data["destinationLocations"] = [{"longitude": x, "latitude": y} for x, y in destinations]
    data.update(more)
    return codec.decode(data, CreateDistanceMatrixRequest)


def test_function_answers_rows_summary_and_progress():
    job = FakeJob()
    req = request(
        [(0, 0), (1, 0)],
        [(0, 0), (0, 1), (90, 0)],
        profile={"averageSpeedKmh": 36.0, "detourFactor": 1.0},
    )
    result = answered(xdima.createDistanceMatrix(req, job))
    assert [r.distances for r in result.rows] == [
        [0, ONE_DEGREE, QUARTER],
        [ONE_DEGREE, 157_249, 9_896_348],
    ]
    assert result.rows[0].travelTimes == [0, 11_119, 1_000_754]
    s = result.summary
    assert (s.numberOfStartLocations, s.numberOfDestinationLocations, s.numberOfRowsComputed) == (
        2,
        3,
        2,
    )
    assert (s.minimumDistance, s.maximumDistance, s.maximumTravelTime) == (0, QUARTER, 1_000_754)
    assert [p["status"] for p in job.progress] == ["PREPROCESSING", "CALCULATING_MATRIX", "DONE"]
    assert job.progress[-1]["calculationProgress"] == 100
    assert job.progress[0]["$type"] == "DistanceMatrixProgress"


def test_defaults_destinations_and_profile():
    result = answered(xdima.createDistanceMatrix(request([(0, 0), (1, 0)]), FakeJob()))
    assert result.rows[0].distances == [0, round(111194.93 * 1.3)]
    assert (result.summary.averageSpeedKmh, result.summary.detourFactor) == (50.0, 1.3)


def test_stop_between_blocks_answers_the_rows_so_far():
    starts = [(i / 100, 0) for i in range(600)]  # 3 blocks of 250 rows... (600 → 250, 250, 100)
    job = FakeJob(stop_after_reports=2)  # PREPROCESSING + first block
    result = answered(xdima.createDistanceMatrix(request(starts, [(0, 0)] * 2), job))
    assert len(result.rows) == 250 and result.summary.numberOfRowsComputed == 250
    assert [p["status"] for p in job.progress] == ["PREPROCESSING", "CALCULATING_MATRIX"]
    assert job.progress[-1]["calculationProgress"] == 41


def test_threads_compute_the_same_matrix_a_round_of_blocks_at_a_time():
    """``threads`` blocks at once (the last round partial): the matrix of one thread,
    progress after each round, and a stop between rounds answers whole rounds."""
    rng = random.Random(7)
    starts = [(rng.uniform(5, 15), rng.uniform(45, 55)) for _ in range(1100)]
    destinations = starts[:200]  # blocks of 250 rows: 5 (250 × 4 + 100)

    def cells(result):
        return [(row.distances, row.travelTimes) for row in result.rows]

    one = cells(answered(xdima.createDistanceMatrix(request(starts, destinations), FakeJob())))
    job = FakeJob(threads=3)
    three = cells(answered(xdima.createDistanceMatrix(request(starts, destinations), job)))
    assert three == one and len(three) == 1100 and len(three[0][0]) == 200
    assert [p["calculationProgress"] for p in job.progress] == [0, 68, 100, 100]
    stopped = FakeJob(stop_after_reports=2, threads=2)  # PREPROCESSING + the first round
    result = answered(xdima.createDistanceMatrix(request(starts, destinations), stopped))
    assert result.summary.numberOfRowsComputed == 500 and cells(result) == one[:500]


def test_stop_before_the_first_block_raises_the_stop_fault():
    with pytest.raises(RequestStoppedFault):
        xdima.createDistanceMatrix(request([(0, 0)]), FakeJob(stop_after_reports=1))


def test_check_refuses_empty_and_too_large():
    with pytest.raises(MissingParameterFault):
        xdima.check(request([]), {"max_cells": 6})
    xdima.check(request([(0, 0), (1, 1)], [(0, 0)] * 3), {"max_cells": 6})
    with pytest.raises(InvalidValueFault) as fault:
        xdima.check(request([(0, 0), (1, 1)], [(0, 0)] * 4), {"max_cells": 6})
    assert fault.value.parameter == "destinationLocations" and fault.value.value == "8"


def test_max_cells_is_a_setting_of_xdima_with_its_default_and_the_files_value():
    assert xdima.service.settings_in_force(config.Settings()) == {
        "max_cells": 4_000_000,
        "threads": 0,
    }
    written = config.parse(
        "[services.XDima]\nmax_cells = 6\nthreads = 2\n", service_keys=setting_keys()
    )
    assert xdima.service.settings_in_force(written) == {"max_cells": 6, "threads": 2}


def test_out_of_range_coordinates_are_refused_with_their_path():
    with pytest.raises(InvalidValueFault) as fault:
        request([(0, 0), (200, 0)])
    assert fault.value.parameter == "startLocations[1].longitude"


# ----------------------------------------------------------------- the compact stored form


def test_a_matrix_result_is_stored_compactly_and_round_trips_exactly():
    job = FakeJob()
    rng = random.Random(1)
    pts = [(rng.uniform(5, 15), rng.uniform(45, 55)) for _ in range(300)]
    result = answered(xdima.createDistanceMatrix(request(pts), job))
    text = json.dumps(
        codec.encode(result, xdima.DistanceMatrixResponse),
        separators=(",", ":"),
        ensure_ascii=False,
    )
    blob = pack(text)
    assert blob.startswith(MAGIC)
    assert len(blob) <= 300 * 300 * 2 * 4 + 16_384  # 4 bytes a number: no decimal text
    assert unpack(blob) == text


@pytest.mark.parametrize(
    "text",
    [
        '{"a":[' + ",".join(str(i * 7919 - 10**6) for i in range(500)) + "]}",
        '{"big":['
        + ",".join([str(2**63 + 1)] * 100)
        + '],"wide":['
        + ",".join([str(2**40)] * 100)
        + "]}",
        '{"f":['
        + ",".join(repr(i / 7) for i in range(500))
        + '],"mixed":['
        + ",".join(["1", "2.5"] * 50)
        + "]}",
        '{"s":"[' + ",".join(["1"] * 2000) + ']","neg0":[' + ",".join(["-0"] * 100) + "]}",
        '{"spaced": [' + ", ".join(["1"] * 2000) + '], "é\\"[1]": "x"}',
    ],
)
def test_round_trip_is_exact_whatever_the_arrays(text):
    assert unpack(pack(text)) == text


def test_small_and_plain_payloads_keep_their_old_forms():
    assert pack("{}") == b"{}"
    big = json.dumps({"payload": "x" * 100_000})
    assert pack(big)[:1] == b"x" and unpack(pack(big)) == big
    assert pack(None) is None and unpack(None) is None


# ------------------------------------------------- a result stored from its arrays (Table)


def encoded_text(response):
    return codec.dumps(codec.encode(response, xdima.DistanceMatrixResponse))


def as_objects(metres, seconds, summary):
    return xdima.DistanceMatrixResponse(
        rows=[
            xdima.DistanceMatrixRow(distances=d, travelTimes=t)
            for d, t in zip(metres.tolist(), seconds.tolist(), strict=True)
        ],
        summary=summary,
    )


def random_matrix(rows, columns, seed, high=20_000_000, dtype=np.int32):
    rng = np.random.default_rng(seed)
    return rng.integers(0, high, (rows, columns)).astype(dtype), rng.integers(
        0, high, (rows, columns)
    ).astype(dtype)


SUMMARY = {"numberOfStartLocations": 9, "averageSpeedKmh": 50.0, "minimumDistance": 0}


@pytest.mark.parametrize(
    "rows, columns", [(1, 1), (3, 31), (3, 32), (4, 33), (40, 300), (300, 300), (7, 3000)]
)
def test_a_table_is_stored_byte_for_byte_as_its_spyne_objects_would_be(rows, columns):
    metres, seconds = random_matrix(rows, columns, rows * columns)
    summary = codec.decode(SUMMARY, xdima.DistanceMatrixSummary)
    expected = pack(encoded_text(as_objects(metres, seconds, summary)))
    returned = table(
        xdima.DistanceMatrixResponse(summary=summary), "rows", distances=metres, travelTimes=seconds
    )
    assert stored_table(returned, xdima.DistanceMatrixResponse) == expected


def test_rows_beyond_int32_are_stored_as_int64_as_the_text_form_packs_them():
    metres, seconds = random_matrix(6, 50, 3, dtype=np.int64)
    seconds[2, 7] = 2**31  # this row's travel times need int64, the others' do not
    metres[4] += 2**40
    summary = codec.decode(SUMMARY, xdima.DistanceMatrixSummary)
    expected = pack(encoded_text(as_objects(metres, seconds, summary)))
    returned = table(
        xdima.DistanceMatrixResponse(summary=summary), "rows", distances=metres, travelTimes=seconds
    )
    assert stored_table(returned, xdima.DistanceMatrixResponse) == expected


@pytest.mark.parametrize("parts", [1, 2, 5])
def test_children_tables_joined_read_back_as_the_whole_matrix(parts):
    """``parallelism`` N: each child stores its rows as a table, the parent joins them
    (list_join), and the client reads what one job computing every row would answer."""
    metres, seconds = random_matrix(250, 400, parts)
    summary = codec.decode(SUMMARY, xdima.DistanceMatrixSummary)
    size = -(-250 // parts)
    children = [
        stored_table(
            table(
                xdima.DistanceMatrixResponse(summary=summary),
                "rows",
                distances=metres[low : low + size],
                travelTimes=seconds[low : low + size],
            ),
            xdima.DistanceMatrixResponse,
        )
        for low in range(0, 250, size)
    ]
    outer = encoded_text(xdima.DistanceMatrixResponse(rows=[], summary=summary))
    joined = join_lists(outer, "rows", children)
    assert unpack(joined) == encoded_text(as_objects(metres, seconds, summary))


def test_a_table_refuses_what_is_not_rows_of_integers():
    response = xdima.DistanceMatrixResponse()
    with pytest.raises(TypeError):
        table(response, "rows", distances=np.zeros((2, 40)))
    with pytest.raises(TypeError):
        table(response, "rows", distances=np.zeros((2, 40), np.uint64))
    with pytest.raises(ValueError):
        table(
            response,
            "rows",
            distances=np.zeros((2, 40), np.int32),
            travelTimes=np.zeros((3, 40), np.int32),
        )
    with pytest.raises(ValueError):
        table(response, "rows", speeds=np.zeros((2, 40), np.int32))
    with pytest.raises(ValueError):
        table(response, "summary", distances=np.zeros((2, 40), np.int32))


def test_the_encoded_form_stores_int32_bytes_and_reads_back_as_base64_of_the_rows():
    """What a client reads of an encoded matrix: each string the base64 of the plain
    form's rows as little-endian int32; stored as those bytes (no base64, no decimal
    text), which a parent reads back by member (encoded_members), and a summary read
    without them (without_list)."""
    import base64

    rng = random.Random(4)
    pts = [(rng.uniform(5, 15), rng.uniform(45, 55)) for _ in range(120)]
    dests = pts[:77]
    plain = answered(xdima.createDistanceMatrix(request(pts, dests), FakeJob()))
    returned = xdima.createDistanceMatrix(
        request(pts, dests, contentsFormat="ENCODED_ARRAYS"), FakeJob()
    )
    stored = stored_table(returned, xdima.DistanceMatrixResponse)
    assert stored.startswith(MAGIC) and b"encodedContents" not in stored[:8]
    assert len(stored) < 120 * 77 * 4 * 2 * 1.05  # the int32 bytes, not base64 (4/3 of them)
    result = codec.decode(json.loads(unpack(stored)), xdima.DistanceMatrixResponse)
    assert not result.rows
    for name in ("distances", "travelTimes"):
        raw = base64.b64decode(getattr(result.encodedContents, name))
        values = np.frombuffer(raw, "<i4").reshape(120, 77)
        assert values.tolist() == [getattr(r, name) for r in plain.rows]
        assert encoded_members(stored, "encodedContents")[name] == raw
    summary = json.loads(without_list(stored, "encodedContents"))
    assert summary["encodedContents"] == {}
    assert summary["summary"]["numberOfRowsComputed"] == 120


@pytest.mark.parametrize(
    "columns, error",
    [
        ({"distances": np.array([[2**31]])}, ValueError),  # beyond int32
        ({"distances": np.array([[1.5]])}, TypeError),
        ({"summary": np.array([[1]])}, ValueError),  # no string member of that name
        ({}, ValueError),
    ],
)
def test_encoded_refuses_what_the_form_cannot_hold(columns, error):
    with pytest.raises(error):
        encoded(xdima.DistanceMatrixResponse(), "encodedContents", **columns)


def test_the_encoded_form_is_refused_at_the_start_when_travel_times_could_pass_int32():
    slow = request([(0, 0)], contentsFormat="ENCODED_ARRAYS", profile={"averageSpeedKmh": 0.04})
    with pytest.raises(InvalidValueFault) as refused:
        xdima.check(slow, {"max_cells": 10})
    assert refused.value.parameter == "profile.averageSpeedKmh"
    xdima.check(request([(0, 0)], profile={"averageSpeedKmh": 0.04}), {"max_cells": 10})
    xdima.check(
        request([(0, 0)], contentsFormat="ENCODED_ARRAYS", profile={"averageSpeedKmh": 0.05}),
        {"max_cells": 10},
    )

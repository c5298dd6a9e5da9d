"""The JSON codec (docs/protocol.md §2, §6, §7): ``$type`` on polymorphic values, round trips,
and the faults a wrong request gets, each naming the field by its path."""

import json

import pytest
from lxml import etree
from spyne import Double, Unicode

from xruntime.bindings import xml_codec
from xruntime.protocol import codec
from xruntime.protocol.faults import (
    AccessDeniedFault,
    InternalErrorFault,
    InvalidFetchTypeFault,
    InvalidRequestFault,
    InvalidValueFault,
    JobStateFault,
    MissingParameterFault,
    ProcessingFault,
    QueueOverflowFault,
    RequestStoppedFault,
    RequestTimedOutFault,
    ServiceNotConfiguredFault,
    UnknownJobFault,
    XServerFault,
)
from xruntime.protocol.types import (
    BulkProgress,
    IntermediateResponseLimitation,
    Job,
    JobProgress,
    JobRequest,
    ResultLimitation,
    Timeouts,
    WatchRequest,
    XModel,
    repeated,
    required,
)
from xruntime_services.xdemo.types import SimulateRequest, SimulateResponse
from xruntime_services.xdima.types import CreateDistanceMatrixRequest


class CodecTestFault(ProcessingFault):
    """A service's own fault subtype with a field of its own."""

    detail = Unicode


def roundtrip(value, cls):
    """Encode, go through JSON text (as the bindings and the store do), decode."""
    return codec.decode(json.loads(json.dumps(codec.encode(value, cls))), cls)


# --------------------------------------------------------------------------- encode / $type


def test_job_progress_carries_its_type():
    job = Job(
        id="j1",
        status="RUNNING",
        elapsedTime=1200,
        progress=BulkProgress(remaining=3, successful=2, failed=1),
    )
    data = codec.encode(job, Job)
    assert data["id"] == "j1" and data["status"] == "RUNNING" and data["elapsedTime"] == 1200
    assert data["progress"] == {
        "$type": "BulkProgress",
        "remaining": 3,
        "successful": 2,
        "failed": 1,
    }


def test_job_without_progress_has_no_progress_member():
    data = codec.encode(Job(id="j1", status="QUEUING", elapsedTime=0), Job)
    assert "progress" not in data
    assert data == {"id": "j1", "status": "QUEUING", "elapsedTime": 0}


def test_result_limitations_carry_their_type():
    response = SimulateResponse(
        stepsDone=2,
        payload="ab",
        resultLimitations=[
            IntermediateResponseLimitation(
                message="stopped after 2 steps", reason="REQUEST_STOPPED"
            )
        ],
    )
    data = codec.encode(response, SimulateResponse)
    assert data["resultLimitations"] == [
        {
            "$type": "IntermediateResponseLimitation",
            "message": "stopped after 2 steps",
            "reason": "REQUEST_STOPPED",
        }
    ]
    assert data["stepsDone"] == 2 and data["payload"] == "ab"


def test_declared_monomorphic_values_need_no_type():
    request = SimulateRequest(steps=3, timeouts=Timeouts(computationTimeout=500))
    data = codec.encode(request, SimulateRequest)
    assert data == {"timeouts": {"computationTimeout": 500}, "steps": 3}


def test_job_round_trip_keeps_the_progress_subtype():
    job = Job(
        id="j1",
        status="STOPPING",
        elapsedTime=5,
        progress=BulkProgress(remaining=0, successful=7, failed=2),
    )
    back = roundtrip(job, Job)
    assert isinstance(back.progress, BulkProgress)
    assert (back.progress.remaining, back.progress.successful, back.progress.failed) == (0, 7, 2)
    assert (back.id, back.status, back.elapsedTime) == ("j1", "STOPPING", 5)


def test_response_round_trip():
    response = SimulateResponse(
        stepsDone=4,
        payload="xyz",
        resultLimitations=[
            IntermediateResponseLimitation(message="m", reason="REQUEST_TIMED_OUT"),
            ResultLimitation(message="plain"),
        ],
    )
    back = roundtrip(response, SimulateResponse)
    assert back.stepsDone == 4 and back.payload == "xyz"
    first, second = back.resultLimitations
    assert type(first) is IntermediateResponseLimitation and first.reason == "REQUEST_TIMED_OUT"
    assert type(second) is ResultLimitation and second.message == "plain"
    assert codec.encode(back, SimulateResponse) == codec.encode(response, SimulateResponse)


def test_request_round_trip():
    data = {
        "timeouts": {"queueingTimeout": 1000, "computationTimeout": 2000},
        "durationMs": 1500,
        "steps": 3,
        "failAtStep": 2,
        "resultSize": 10,
        "busy": True,
    }
    request = codec.decode(data, SimulateRequest)
    assert request.timeouts.queueingTimeout == 1000
    assert request.timeouts.computationTimeout == 2000
    assert (
        request.durationMs,
        request.steps,
        request.failAtStep,
        request.resultSize,
        request.busy,
    ) == (1500, 3, 2, 10, True)
    assert codec.encode(request, SimulateRequest) == data


def test_decode_with_explicit_type_of_the_declared_class():
    request = codec.decode({"$type": "SimulateRequest", "steps": 2}, SimulateRequest)
    assert type(request) is SimulateRequest and request.steps == 2


def test_decode_picks_the_subtype_named_by_type():
    progress = codec.decode({"$type": "BulkProgress", "remaining": 1}, JobProgress)
    assert type(progress) is BulkProgress and progress.remaining == 1


def test_missing_optional_fields_are_none():
    request = codec.decode({}, SimulateRequest)
    assert request.steps is None and request.timeouts is None and request.busy is None


def test_integral_float_is_an_integer():
    assert codec.decode({"steps": 3.0}, SimulateRequest).steps == 3


# --------------------------------------------------------------------------- decode errors


def invalid(data, cls):
    with pytest.raises(InvalidValueFault) as excinfo:
        codec.decode(data, cls)
    fault = excinfo.value
    assert type(fault) is InvalidValueFault
    assert isinstance(fault, InvalidRequestFault)
    return fault


@pytest.mark.parametrize(
    "data, parameter",
    [
        ({"timeouts": {"computationTimeout": "soon"}}, "timeouts.computationTimeout"),
        ({"timeouts": {"queueingTimeout": 1.5}}, "timeouts.queueingTimeout"),
        ({"timeouts": {"computationTimeout": [1]}}, "timeouts.computationTimeout"),
        ({"timeouts": 5}, "timeouts"),
        ({"steps": "3"}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"durationMs": {"ms": 1}}, "durationMs"),
        ({"busy": 1}, "busy"),
        ({"busy": "true"}, "busy"),
    ],
)
def test_wrong_type_names_the_field_by_its_path(data, parameter):
    fault = invalid(data, SimulateRequest)
    assert fault.parameter == parameter
    assert fault.message


@pytest.mark.parametrize("field", ["steps", "durationMs", "failAtStep", "resultSize"])
@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_integers(field, value):
    assert invalid({field: value}, SimulateRequest).parameter == field


def test_booleans_are_not_integers_in_nested_values():
    assert (
        invalid({"timeouts": {"computationTimeout": True}}, SimulateRequest).parameter
        == "timeouts.computationTimeout"
    )


@pytest.mark.parametrize(
    "data, parameter",
    [
        ({"steps": 0}, "steps"),
        ({"steps": -3}, "steps"),
        ({"durationMs": -1}, "durationMs"),
        ({"failAtStep": 0}, "failAtStep"),
        ({"resultSize": -1}, "resultSize"),
        ({"resultSize": 100 * 1024 * 1024 + 1}, "resultSize"),
    ],
)
def test_out_of_range_values_are_invalid(data, parameter):
    fault = invalid(data, SimulateRequest)
    assert fault.parameter == parameter
    assert fault.value == str(data[parameter])


@pytest.mark.parametrize(
    "data, parameter",
    [
        ({"durationMs": 2**63}, "durationMs"),
        ({"timeouts": {"computationTimeout": 2**70}}, "timeouts.computationTimeout"),
        ({"timeouts": {"queueingTimeout": -(2**63) - 1}}, "timeouts.queueingTimeout"),
        ({"durationMs": 1e300}, "durationMs"),
    ],
)
def test_integers_beyond_64_bits_are_invalid(data, parameter):
    """Long is xs:long (64 bits): a larger number must be refused as the request's
    mistake, not reach the store and fail there as an internal error."""
    assert invalid(data, SimulateRequest).parameter == parameter


def test_within_range_values_are_accepted():
    request = codec.decode(
        {
            "steps": 1,
            "durationMs": 0,
            "failAtStep": 1,
            "resultSize": 100 * 1024 * 1024,
            "timeouts": {"computationTimeout": 2**63 - 1},
        },
        SimulateRequest,
    )
    assert request.resultSize == 100 * 1024 * 1024


@pytest.mark.parametrize(
    "data, parameter",
    [
        ({"stepz": 3}, "stepz"),
        ({"timeouts": {"computationTimeOut": 5}}, "timeouts.computationTimeOut"),
    ],
)
def test_unknown_field_is_invalid(data, parameter):
    assert invalid(data, SimulateRequest).parameter == parameter


def test_unknown_field_inside_a_polymorphic_value():
    fault = invalid(
        {
            "id": "j",
            "status": "RUNNING",
            "elapsedTime": 1,
            "progress": {"$type": "BulkProgress", "percent": 5},
        },
        Job,
    )
    assert fault.parameter == "progress.percent"


@pytest.mark.parametrize(
    "data, parameter",
    [
        (
            {
                "id": "j",
                "status": "RUNNING",
                "elapsedTime": 1,
                "progress": {"$type": "NoSuchProgress"},
            },
            "progress.$type",
        ),
        (
            {"id": "j", "status": "RUNNING", "elapsedTime": 1, "progress": {"$type": "Timeouts"}},
            "progress.$type",
        ),  # a known type, but not a JobProgress
    ],
)
def test_unknown_type_is_invalid(data, parameter):
    fault = invalid(data, Job)
    assert fault.parameter == parameter
    assert fault.value == data["progress"]["$type"]


def test_unknown_type_in_a_list_names_the_index():
    fault = invalid({"resultLimitations": [{"message": "ok"}, {"$type": "Nope"}]}, SimulateResponse)
    assert fault.parameter == "resultLimitations[1].$type"


def test_wrong_enum_value_names_the_field():
    fault = invalid(
        {"resultLimitations": [{"$type": "IntermediateResponseLimitation", "reason": "BORED"}]},
        SimulateResponse,
    )
    assert fault.parameter == "resultLimitations[0].reason"
    assert invalid({"id": "j", "status": "DONE", "elapsedTime": 1}, Job).parameter == "status"


def test_list_expected():
    assert (
        invalid({"resultLimitations": {"message": "x"}}, SimulateResponse).parameter
        == "resultLimitations"
    )


def test_request_that_is_not_an_object_is_invalid():
    for data in ([], "x", 3, None):
        with pytest.raises(InvalidValueFault):
            codec.decode(data, SimulateRequest)


@pytest.mark.parametrize(
    "cls, data, parameter",
    [
        (JobRequest, {}, "id"),
        (JobRequest, {"id": None}, "id"),
        (WatchRequest, {"progressUpdatePeriod": 1000}, "id"),
        (Job, {"id": "j", "elapsedTime": 0}, "status"),
        (Job, {"id": "j", "status": "RUNNING"}, "elapsedTime"),
    ],
)
def test_missing_required_is_missing_parameter(cls, data, parameter):
    with pytest.raises(MissingParameterFault) as excinfo:
        codec.decode(data, cls)
    assert type(excinfo.value) is MissingParameterFault
    assert excinfo.value.parameter == parameter


def test_long_values_are_shortened_in_the_fault():
    fault = invalid({"steps": "9" * 1000}, SimulateRequest)
    assert len(fault.value) < 300


# --------------------------------------------------------------------------- the value as sent


def read_xml(fields, cls):
    """``fields`` (XML text) in an operation's element, as the SOAP binding reads them:
    (data, sent)."""
    return xml_codec.read(
        etree.fromstring(f'<x:op xmlns:x="{cls.get_namespace()}">{fields}</x:op>'), cls
    )


@pytest.mark.parametrize("text", ["95", "95.50", "9.5e1", " 95 ", "+95"])
def test_out_of_range_value_is_named_as_sent_in_xml(text):
    data, sent = read_xml(
        f"<startLocations><longitude>0</longitude><latitude>{text}</latitude></startLocations>",
        CreateDistanceMatrixRequest,
    )
    assert data == {"startLocations": [{"longitude": 0.0, "latitude": float(text)}]}
    with pytest.raises(InvalidValueFault) as excinfo:
        codec.decode(data, CreateDistanceMatrixRequest, sent=sent)
    assert excinfo.value.parameter == "startLocations[0].latitude"
    assert excinfo.value.value == text.strip()


def test_xml_keeps_only_the_texts_a_value_would_not_show():
    """ "1.5" reads as 1.5 and "2" as the integer 2: both show as sent; 0 as a double
    shows "0.0", so its text is kept."""
    _, sent = read_xml(
        "<startLocations><longitude>1.5</longitude><latitude>0</latitude>"
        "</startLocations><startLocations><longitude>2</longitude>"
        "<latitude>0.0</latitude></startLocations>",
        CreateDistanceMatrixRequest,
    )
    assert sent == {"startLocations[0].latitude": "0", "startLocations[1].longitude": "2"}


def test_json_value_is_named_as_sent():
    fault = invalid(
        {"startLocations": [{"longitude": 0, "latitude": 95}]}, CreateDistanceMatrixRequest
    )
    assert (fault.parameter, fault.value) == ("startLocations[0].latitude", "95")


# --------------------------------------------------------------------------- faults

FAULTS = [
    InvalidValueFault("bad steps", parameter="steps", value="0"),
    MissingParameterFault("no id", parameter="id"),
    InvalidFetchTypeFault("wrong fetch", jobId="j-1"),
    UnknownJobFault("unknown", jobId="j-2"),
    JobStateFault("not yet", jobId="j-3", status="RUNNING"),
    AccessDeniedFault("no"),
    QueueOverflowFault("full"),
    RequestTimedOutFault("too slow"),
    RequestStoppedFault("stopped"),
    ServiceNotConfiguredFault("off", service="XDemo"),
    ProcessingFault("failed at step 2", hint="send it without failAtStep"),
    CodecTestFault("own fault", detail="d"),
    InternalErrorFault("a bug"),
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: type(f).__name__)
def test_fault_round_trip_keeps_type_and_fields(fault):
    data = json.loads(json.dumps(codec.encode_fault(fault)))
    back = codec.decode_fault(data)
    assert type(back) is type(fault)
    assert back.message == fault.message
    assert back.fields() == fault.fields()
    assert back.hint == fault.hint


def test_fault_json_form():
    fault = InvalidValueFault("invalid value for steps", parameter="steps", value="0")
    assert codec.encode_fault(fault) == {
        "message": "invalid value for steps",
        "faultInfo": {
            "$type": "InvalidValueFault",
            "hint": fault.hint,
            "parameter": "steps",
            "value": "0",
        },
    }
    assert fault.hint, "every fault type of the protocol tells the caller what to do"


def test_job_state_fault_json_form():
    data = codec.encode_fault(JobStateFault("m", jobId="j", status="QUEUING"))
    assert data["faultInfo"]["$type"] == "JobStateFault"
    assert data["faultInfo"]["jobId"] == "j"
    assert data["faultInfo"]["status"] == "QUEUING"


def test_faults_are_xserver_faults():
    """What the codec decodes a stored fault as is always a protocol fault: each of
    FAULTS as its own type, and a ``$type`` no service declares, or none at all, as
    InternalErrorFault with the message kept and the fields it does not have dropped."""
    for fault in FAULTS:
        back = codec.decode_fault(codec.encode_fault(fault))
        assert isinstance(back, XServerFault)
        assert back.get_type_name() == fault.get_type_name()
    for info in ({"$type": "NoSuchFault", "parameter": "x"}, {"parameter": "x"}, None):
        back = codec.decode_fault({"message": "m", "faultInfo": info})
        assert type(back) is InternalErrorFault and isinstance(back, XServerFault), info
        assert back.message == "m" and "parameter" not in back.fields(), info


LOCATIONS = [
    {"longitude": 6.5, "latitude": 50.25},
    {"longitude": 7, "latitude": 50.5},  # an int: decode's own path
    {"latitude": 51.0},  # a required field missing
    {"longitude": 181.0, "latitude": 50.0},  # out of its bounds
    {"longitude": 6.5, "latitude": 50.0, "altitude": 3},  # no such field
    {"$type": "Location", "longitude": 6.5, "latitude": 50.0},
    {"longitude": "6.5", "latitude": 50.0},
    {"longitude": True, "latitude": 50.0},
    [6.5, 50.0],
    None,
]


@pytest.mark.parametrize("location", LOCATIONS)
def test_a_list_of_number_objects_decodes_as_each_item_alone_would(monkeypatch, location):
    """The loop for lists of objects of number fields (codec._decode_numbers_objects)
    answers what decoding each item through ``decode`` answers: the same values, or the
    same fault naming the same path."""
    data = {"startLocations": [{"longitude": 8.0, "latitude": 49.0}, location]}

    def outcome():
        try:
            request = codec.decode(data, CreateDistanceMatrixRequest)
        except Exception as exc:  # the fault, compared as the client would read it
            return type(exc).__name__, str(exc), getattr(exc, "fields", lambda: {})()
        return codec.encode(request, CreateDistanceMatrixRequest)

    fast = outcome()
    monkeypatch.setattr(codec, "_numbers_plan", lambda cls: None)
    assert fast == outcome()


class Reading(XModel):
    """Number fields of every kind the loops are written for: optional, bounded each way."""

    __namespace__ = "urn:test:codec"
    level = Double(gt=0, lt=10)
    weight = required(Double, ge=-1.5)
    spread = Double


class Readings(XModel):
    __namespace__ = "urn:test:codec"
    readings = repeated(Reading)


READINGS = [
    {"level": 5.0, "weight": 0.0, "spread": -1e300},
    {"weight": 2.0},  # the optional ones left out
    {"level": None, "weight": 2.0, "spread": None},  # sent as null
    {"level": 0.0, "weight": 2.0},  # not above its bound
    {"level": 10.0, "weight": 2.0},  # not below its bound
    {"level": 9.5, "weight": -1.5000001},  # past its bound
    {"level": 1.0},  # the required one left out
    {"weight": 2.0, "other": 1.0},  # no such field
    {"weight": 2.0, "other": 1.0, "more": 2.0},  # as many unknown as optional ones left out
    {"weight": float("nan")},
    {"weight": 2.0, "spread": float("inf")},
    {"weight": 2},
    {},
]


@pytest.mark.parametrize("reading", READINGS)
def test_a_list_of_optional_and_bounded_numbers_decodes_and_encodes_as_each_alone(
    monkeypatch, reading
):
    """The loops written for a class (codec._numbers_loops) answer what ``decode`` and
    ``encode`` answer item by item, for optional fields and every kind of bound too."""
    data = {"readings": [{"weight": 1.0}, reading, {"level": 2.5, "weight": 3.0}]}

    def outcome():
        try:
            decoded = codec.decode(data, Readings)
        except Exception as exc:  # the fault, compared as the client would read it
            return type(exc).__name__, str(exc), getattr(exc, "fields", lambda: {})()
        values = [(r.level, r.weight, r.spread) for r in decoded.readings]
        return values, codec.dumps(codec.encode(decoded, Readings))

    fast = outcome()
    monkeypatch.setattr(codec, "_numbers_plan", lambda cls: None)
    assert fast == outcome()


def test_a_list_of_number_objects_encodes_as_each_item_alone_would(monkeypatch):
    from xruntime_services.xdima.types import Location

    request = CreateDistanceMatrixRequest(
        startLocations=[Location(longitude=6.5, latitude=50), Location(longitude=7)],
        destinationLocations=[Location(longitude=-1, latitude=1e-7)],
    )
    fast = codec.dumps(codec.encode(request, CreateDistanceMatrixRequest))
    monkeypatch.setattr(codec, "_numbers_plan", lambda cls: None)
    assert fast == codec.dumps(codec.encode(request, CreateDistanceMatrixRequest))
    assert '{"longitude":7.0}' in fast


def test_requests_that_share_a_list_encode_as_each_alone_would():
    """A parent's children share lists (XDima's: the destinations): encoded together
    (``lists``), a shared list is encoded once, and each request's text is the one it
    has alone."""
    from xruntime_services.xdima.types import Location

    shared = [Location(longitude=6.5, latitude=50), Location(longitude=7)]
    first = CreateDistanceMatrixRequest(startLocations=shared[:1], destinationLocations=shared)
    second = CreateDistanceMatrixRequest(startLocations=shared, destinationLocations=shared)
    lists: dict = {}
    together = [codec.encode(r, CreateDistanceMatrixRequest, lists) for r in (first, second)]
    alone = [codec.encode(r, CreateDistanceMatrixRequest) for r in (first, second)]
    assert [codec.dumps(e) for e in together] == [codec.dumps(e) for e in alone]
    assert together[0]["destinationLocations"] is together[1]["destinationLocations"]
    assert together[1]["startLocations"] is not together[0]["startLocations"]


@pytest.mark.parametrize(
    "data",
    [
        {"a": [1.5, -0.0, 0.1, 2.0, 1e15, 1e16, 1e-7, 0.0001, True, False, None, 5, -7]},
        {"s": "".join(chr(i) for i in range(0x100)) + "\u2028\U0001f600", "k\n": {"x": []}},
        {"big": 2**70, "nan": float("nan"), "inf": [float("inf"), -float("inf")]},
        {"lone": "\ud800", 3: "an int key"},
        [{"longitude": 6.123456789, "latitude": 50.5}] * 50,
    ],
)
def test_dumps_writes_what_json_dumps_writes(data):
    assert codec.dumps(data) == json.dumps(data, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    "text",
    [
        '{"a":[1.5,-0.0,0.1,2.0,1e+16,1e-07,0.0001,true,false,null,5,-7,-0]}',
        '{"big":1180591620717411303424,"neg":-9223372036854775809,"edge":18446744073709551615}',
        '{"x":123456789012345678901.5,"s":"1234567890123456789012"}',
        '{"nan":NaN,"inf":[Infinity,-Infinity],"over":1e400}',
        '{"lone":"\\ud800","pair":"\\ud83d\\ude00","nul":"\\u0000","dup":1,"dup":2}',
        '[{"longitude":6.123456789,"latitude":50.5}]',
        '{"a": [1, 2] }',
        "not JSON",
    ],
)
def test_loads_reads_what_json_loads_reads(text):
    """orjson where its answer cannot differ, json.loads otherwise: the same values
    (an integer past 64 bits stays an int, NaN and lone surrogates are read) and the
    same refusal."""

    def read(loads):
        try:
            return repr(loads(text))
        except ValueError as exc:
            return type(exc).__name__

    assert read(codec.loads) == read(json.loads)
    assert read(lambda t: codec.loads(t.encode())) == read(json.loads)


def test_loads_reads_every_float_as_json_loads_does():
    """A request's coordinates (floats as ``dumps`` writes them, and with more digits
    than a double holds) are the very doubles ``json.loads`` reads."""
    import random
    import struct

    rng = random.Random(36)
    floats = [
        struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(5000)
    ]
    floats = [f for f in floats if f == f and abs(f) != float("inf")]
    floats += [rng.uniform(-180, 180) for _ in range(5000)]
    texts = [json.dumps(floats), "[" + ",".join(f"{f:.25e}" for f in floats[:3000]) + "]"]
    for text in texts:
        assert [struct.pack("<d", f) for f in codec.loads(text)] == [
            struct.pack("<d", f) for f in json.loads(text)
        ]

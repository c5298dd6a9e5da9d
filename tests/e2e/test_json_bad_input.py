"""Bad input gets a clear JSON fault, changes nothing stored, and the server stays up."""

import pytest


def jobs_stored(server):
    info = server.call("XRuntime", "getRuntimeInformation", {})
    return {c["status"]: c["count"] for c in info["jobs"]}


@pytest.mark.parametrize(
    "body, status, fault, parameter",
    [
        (b"{not json", 400, "InvalidRequestFault", None),
        (b"[1, 2]", 400, "InvalidValueFault", None),
        (b'{"steps": "many"}', 400, "InvalidValueFault", "steps"),
        (b'{"steps": 0}', 400, "InvalidValueFault", "steps"),
        (b'{"durationMs": -5}', 400, "InvalidValueFault", "durationMs"),
        (b'{"steps": 1000001}', 400, "InvalidValueFault", "steps"),  # XDemo's bounds
        (b'{"steps": 2147483648}', 400, "InvalidValueFault", "steps"),
        (b'{"durationMs": 604800001}', 400, "InvalidValueFault", "durationMs"),
        (b'{"failAtStep": 0}', 400, "InvalidValueFault", "failAtStep"),
        (b'{"busy": "yes"}', 400, "InvalidValueFault", "busy"),
        (b'{"steps": 2.5}', 400, "InvalidValueFault", "steps"),
        (b'{"stepz": 2}', 400, "InvalidValueFault", "stepz"),
        (
            b'{"timeouts": {"computationTimeout": "soon"}}',
            400,
            "InvalidValueFault",
            "timeouts.computationTimeout",
        ),
        # lone surrogates: text that is no text
        (rb'{"steps": "\ud800"}', 400, "InvalidRequestFault", None),
        (rb'{"\udfff": 1}', 400, "InvalidRequestFault", None),
        (rb'{"timeouts": {"queueingTimeout": ["\udc00x"]}}', 400, "InvalidRequestFault", None),
        # ... and encoded as bytes, not as an escape (found by the fuzz: echoed, they broke
        # the answer)
        (b'"\xed\xa0\x80"', 400, "InvalidRequestFault", None),
        ('{"stepz": "\ud800"}'.encode("utf-16", "surrogatepass"), 400, "InvalidRequestFault", None),
        # numbers JSON does not have
        (b'{"steps": NaN}', 400, "InvalidRequestFault", None),
        (b'{"steps": -Infinity}', 400, "InvalidRequestFault", None),
        (b'{"durationMs": 1e400}', 400, "InvalidRequestFault", None),
        # "$type" that is no type name
        (b'{"$type": {}}', 400, "InvalidValueFault", "$type"),
        (b'{"$type": [1]}', 400, "InvalidValueFault", "$type"),
        (b'{"timeouts": {"$type": {"a": 1}}}', 400, "InvalidValueFault", "timeouts.$type"),
    ],
)
def test_bad_start_requests(server, body, status, fault, parameter):
    before = jobs_stored(server)
    r = server.session.post(
        server.url("XDemo", "startSimulate"),
        data=body,
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == status, r.text
    info = r.json()["faultInfo"]
    assert info["$type"] == fault and r.json()["message"]
    if parameter:
        assert info["parameter"] == parameter
    assert "Traceback" not in r.text
    assert jobs_stored(server) == before


@pytest.mark.parametrize(
    "body, fault, parameter",
    [
        ({}, "MissingParameterFault", "id"),
        ({"id": "x", "progressUpdatePeriod": 2.5}, "InvalidValueFault", "progressUpdatePeriod"),
        ({"id": "x", "maximumPollingPeriod": "long"}, "InvalidValueFault", "maximumPollingPeriod"),
        ({"id": 17}, "InvalidValueFault", "id"),
        ('{"id": "\\ud800"}', "InvalidRequestFault", None),  # a lone surrogate in a field
        ('{"id": "x", "$type": []}', "InvalidValueFault", "$type"),
    ],
)
def test_bad_watch_requests(server, body, fault, parameter):
    if isinstance(body, str):  # raw JSON text, as a client may send it
        r = server.session.post(
            server.url("XRuntime", "watchJob"),
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
    else:
        r = server.post("XRuntime", "watchJob", body)
    assert r.status_code == 400, r.text
    assert r.json()["faultInfo"]["$type"] == fault
    assert r.json()["faultInfo"].get("parameter") == parameter
    assert "Traceback" not in r.text


def test_a_paired_surrogate_is_a_character(server):
    job = server.call("XRuntime", "watchJob", {"id": "\U0001f600"})  # 😀, sent paired
    assert job["status"] == "UNKNOWN" and job["id"] == "\U0001f600"


def test_negative_periods_are_clamped_not_refused(server):
    assert (
        server.watch("nope", progressUpdatePeriod=-5, maximumPollingPeriod=-9)["status"]
        == "UNKNOWN"
    )


def test_unknown_service_or_operation(server):
    for service, op in (("XNothing", "watchJob"), ("XRuntime", "fly")):
        r = server.post(service, op, {})
        assert r.status_code == 400 and r.json()["faultInfo"]["$type"] == "InvalidRequestFault"
    r = server.session.get(server.url("XRuntime", "watchJob"))
    assert r.status_code == 400 and "POST" in r.json()["message"]
    r = server.session.post(server.base + "/elsewhere", json={})
    assert r.status_code == 400 and r.json()["faultInfo"]["$type"] == "InvalidRequestFault"


def test_a_path_with_the_prefix_twice_is_shown_as_it_came(server):
    """What ``xruntime jobs --url http://host:port/services/rs`` sent: the fault showed
    the path without its first prefix, a path that exists (issue 33)."""
    path = "/services/rs/services/rs/XRuntime/listJobs"
    r = server.session.post(server.base + path, json={})
    assert r.status_code == 400 and r.json()["faultInfo"]["$type"] == "InvalidRequestFault"
    assert f"no operation at {path};" in r.json()["message"]
    assert "/services/rs is in the path twice" in r.json()["faultInfo"]["hint"]
    r = server.session.post(server.base + "/services/rs/XRuntime", json={})
    assert "no operation at /services/rs/XRuntime;" in r.json()["message"]
    assert "twice" not in r.json()["faultInfo"]["hint"]


def test_body_over_the_limit_is_refused(server):
    r = server.session.post(
        server.url("XDemo", "startSimulate"),
        data=b" " * (11 * 1024 * 1024),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code in (400, 413)
    assert server.call("XRuntime", "getRuntimeInformation", {})["version"]


def test_wrong_content_type(server):
    r = server.session.post(
        server.url("XDemo", "startSimulate"), data=b"<a/>", headers={"Content-Type": "text/xml"}
    )
    assert r.status_code == 400 and "content type" in r.json()["message"]

"""OGC API – Processes – Part 1: Core at /ogcapi (docs/ogcapi.md), through real HTTP to
real nodes: the landing page, conformance and the API document; processes and their
descriptions; execute, asynchronous (201) and synchronous (raw byte for byte as the JSON
binding's fetch, or the results document); every exception type as an RFC 7807
document carrying the xServer fault; the status mapping, progress and times; the job
list's filters and next links; dismiss stopping a running job's work; one job in every
binding; accounts (another user's job is 404); a subscriber's signed callback; and
OWSLib, a client the standard's users run.

The module's main node runs on PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set, on
SQLite otherwise; the node with accounts and callbacks on SQLite.  Every wait is for a
condition, with bounds far above what a loaded machine needs."""

import json
import os
import time
import uuid
from urllib.parse import parse_qs, urlsplit

import jsonschema
import pytest
import requests
import standardwebhooks
from openapi_spec_validator import validate

from tests.clients import make_client
from tests.conftest import _database_of_worker
from tests.harness import Server, write_config
from tests.receiver import Receiver
from xruntime.operations.accounts import new_token, token_sha256

PG_URL = os.environ.get("XRUNTIME_TEST_DATABASE_URL")
OGC = "http://www.opengis.net/def/rel/ogc/1.0/"
EXCEPTIONS = "http://www.opengis.net/def/exceptions/ogcapi-processes-1/1.0/"
CONF = "http://www.opengis.net/spec/ogcapi-processes-1/1.0/conf/"
OPENAPI_TYPE = "application/vnd.oai.openapi+json;version=3.0"
TYPES = "http://xruntime.org/xserver/types#"
SIMULATE = "XDemo.simulate"
TOKENS = {name: new_token() for name in ("alice", "bob", "root")}
SECRETS = {
    "alice": "whsec_" + "YWxpY2Uta2V5LWFsaWNlLWtleS1hbGljZS1rZXktISE=",
    "bob": "whsec_" + "Ym9iLWtleS1ib2Ita2V5LWJvYi1rZXktYm9iLWtleSE=",
    "root": "whsec_" + "cm9vdC1rZXktcm9vdC1rZXktcm9vdC1rZXktcm9vdCE=",
}
TIMEOUT = 60  # s: the most any wait below takes on a loaded machine, by far
#: The accounts node's [server] public_url: a proxy's address, under which links are made.
PUBLIC_URL = "https://xr.example.org/base"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """The module's node: PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set, in a
    database of its own (``<the worker's>_ogc``): the module's node runs through all
    its tests, and no other test's node, nor any it left behind, may claim its jobs."""
    url = _database_of_worker(PG_URL, "ogc") if PG_URL else None
    if url:
        from sqlalchemy import create_engine, text

        from xruntime.store.schema import metadata

        engine = create_engine(url)
        metadata.drop_all(engine)
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
        engine.dispose()
    srv = Server(str(tmp_path_factory.mktemp("ogc")), database_url=url).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def accounts(tmp_path_factory):
    """A node with accounts (alice, bob, root the admin), each with a callback secret,
    and callbacks allowed to 127.0.0.1."""
    srv = Server(
        str(tmp_path_factory.mktemp("ogc-accounts")),
        extra=accounts_toml(),
        auth=("alice", TOKENS["alice"]),
        server_keys={"public_url": PUBLIC_URL},
    ).start()
    yield srv
    srv.stop()


def accounts_toml():
    """The accounts node's tables: [auth], the users, [callbacks]."""
    text = "\n[auth]\nrequired = true\n"
    for name, token in TOKENS.items():
        text += (
            f'\n[users.{name}]\ntoken_sha256 = "{token_sha256(token)}"\n'
            f'callback_secret = "{SECRETS[name]}"\n' + ("admin = true\n" if name == "root" else "")
        )
    return text + '\n[callbacks]\nallowed = ["127.0.0.1"]\nretry_delay = "200ms"\n'


def creds(user):
    return (user, TOKENS[user])


def ogc(srv, path=""):
    return f"{srv.base}/ogcapi{path}"


def get(srv, path, auth=None, **kwargs):
    return requests.get(ogc(srv, path), auth=auth, timeout=TIMEOUT, **kwargs)


def execute(srv, process, inputs=None, asynchronous=True, auth=None, prefer=None, **body):
    headers = {}
    if prefer is not None:
        headers["Prefer"] = prefer
    elif asynchronous:
        headers["Prefer"] = "respond-async"
    return requests.post(
        ogc(srv, f"/processes/{process}/execution"),
        json={"inputs": inputs or {}, **body},
        headers=headers,
        auth=auth,
        timeout=TIMEOUT,
    )


def started(srv, auth=None, **inputs):
    """Execute XDemo.simulate asynchronously; its statusInfo."""
    r = execute(srv, SIMULATE, inputs, auth=auth)
    assert r.status_code == 201, r.text
    return r.json()


def status(srv, job_id, auth=None):
    r = get(srv, f"/jobs/{job_id}", auth)
    assert r.status_code == 200, r.text
    return r.json()


def until(predicate, what, timeout=TIMEOUT, every=0.05):
    """Poll ``predicate()`` until it answers something true; that answer."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(every)


def until_status(srv, job_id, wanted, auth=None):
    return until(
        lambda: (info := status(srv, job_id, auth))["status"] in wanted and info,
        f"job {job_id} {wanted}",
    )


def until_gone(srv, job_id, auth=None):
    until(lambda: get(srv, f"/jobs/{job_id}", auth).status_code == 404, f"job {job_id} gone")


def problem_of(r, status, ogc_type=None, fault=None):
    """The problem document of an answer, checked: its status, media type and type."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["Content-Type"] == "application/problem+json", r.headers
    doc = r.json()
    assert doc["status"] == status
    assert doc["detail"] == doc["message"] and doc["title"]
    if ogc_type is not None:
        assert doc["type"] == EXCEPTIONS + ogc_type
    if fault is not None:
        assert doc["faultInfo"]["$type"] == fault
        if ogc_type is None:
            assert doc["type"] == TYPES + fault
    return doc


def json_fault(r):
    """The JSON binding's fault document of an answer."""
    assert r.status_code != 200, r.text
    return r.json()


def links(doc, rel):
    return [link for link in doc["links"] if link["rel"] == rel]


def json_result(srv, job_id, auth=None):
    """The JSON binding's fetch of an XDemo job, as the bytes it answers."""
    r = srv.session.post(
        srv.url("XDemo", "fetchSimulateResponse"), json={"id": job_id}, auth=auth, timeout=TIMEOUT
    )
    assert r.status_code == 200, r.text
    return r.content


def occupy_workers(srv, auth=None):
    """Two long jobs, running: both of the node's workers busy (their ids)."""
    ids = [started(srv, auth, durationMs=600_000, steps=600)["jobID"] for _ in range(2)]
    for job_id in ids:
        until_status(srv, job_id, ("running",), auth)
    return ids


# --------------------------------------------------------------------------- capabilities


def test_the_landing_page_links_every_resource_absolutely(node):
    for path in ("", "/"):
        r = get(node, path)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
        page = r.json()
        want = {
            "self": "/",
            "service-desc": "/api",
            OGC + "conformance": "/conformance",
            OGC + "processes": "/processes",
            OGC + "job-list": "/jobs",
        }
        for rel, tail in want.items():
            (link,) = links(page, rel)
            assert link["href"] == ogc(node, tail)
        assert links(page, "service-desc")[0]["type"] == OPENAPI_TYPE


def test_links_follow_the_host_asked_for(node):
    r = requests.get(ogc(node), headers={"Host": f"localhost:{node.port}"}, timeout=TIMEOUT)
    assert links(r.json(), "self")[0]["href"] == f"http://localhost:{node.port}/ogcapi/"


def test_conformance_lists_the_seven_classes(node):
    r = get(node, "/conformance")
    assert r.status_code == 200
    assert set(r.json()["conformsTo"]) == {
        CONF + name
        for name in (
            "core",
            "ogc-process-description",
            "json",
            "oas30",
            "job-list",
            "dismiss",
            "callback",
        )
    }


def test_the_api_document_is_valid_openapi_30_of_every_process(node):
    r = get(node, "/api")
    assert r.status_code == 200 and r.headers["Content-Type"] == OPENAPI_TYPE
    document = r.json()
    validate(document)
    assert document["openapi"].startswith("3.0")
    assert document["servers"] == [{"url": "/ogcapi"}]
    for process in (SIMULATE, "XTour.planTours", "XDima.createDistanceMatrix", "XCrashy.crash"):
        assert f"/processes/{process}/execution" in document["paths"]
    ops = {op["operationId"] for path in document["paths"].values() for op in path.values()}
    assert {"getLandingPage", "getProcesses", "getJobs", "getStatus", "dismiss"} <= ops
    assert "stopJob" in document["info"]["description"]  # our extension, said so
    inputs = document["components"]["schemas"]["XDemo_simulate_Inputs"]["properties"]
    assert "callback" not in inputs and inputs["steps"]["maximum"] == 1_000_000
    # what `xruntime wsdl --out` writes: api_document of the same services
    from tests.fixtures.crashy import service as crashy
    from xruntime.bindings.ogcapi.document import api_document
    from xruntime.operations.runtime_service import served_services
    from xruntime.settings.model import Settings

    served = {**served_services(), crashy.name: crashy}.values()
    assert document == json.loads(json.dumps(api_document(served, Settings())))


#: The standard's schemas (OGC API - Processes - Part 1: Core 1.0, core/openapi/schemas/ of
#: opengeospatial/ogcapi-processes, branch 1.0.0-maintenance, as the executable test suite
#: ets-ogcapi-processes10 validates with them), as JSON Schema; a process input's and
#: output's ``schema`` (schema.yaml: OpenAPI's schema object) only as an object.
LINK = {
    "type": "object",
    "required": ["href"],
    "properties": {k: {"type": "string"} for k in ("href", "rel", "type", "hreflang", "title")},
}
DESCRIPTION_TYPE = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "description": {"type": "string"},
        "keywords": {"type": "array", "items": {"type": "string"}},
        "metadata": {"type": "array", "items": {"type": "object"}},
    },
}
PROCESS_SUMMARY = {
    "allOf": [
        DESCRIPTION_TYPE,
        {
            "type": "object",
            "required": ["id", "version"],
            "properties": {
                "id": {"type": "string"},
                "version": {"type": "string"},
                "jobControlOptions": {
                    "type": "array",
                    "items": {"enum": ["sync-execute", "async-execute", "dismiss"]},
                },
                "outputTransmission": {
                    "type": "array",
                    "items": {"enum": ["value", "reference"]},
                },
                "links": {"type": "array", "items": LINK},
            },
        },
    ]
}
STATUS_INFO = {
    "type": "object",
    "required": ["jobID", "status", "type", "processID"],  # processID: the job-list class
    "properties": {
        "processID": {"type": "string"},
        "type": {"enum": ["process"]},
        "jobID": {"type": "string"},
        "status": {"enum": ["accepted", "running", "successful", "failed", "dismissed"]},
        "message": {"type": "string"},
        **{k: {"type": "string", "format": "date-time"} for k in ("created", "started")},
        **{k: {"type": "string", "format": "date-time"} for k in ("finished", "updated")},
        "progress": {"type": "integer", "minimum": 0, "maximum": 100},
        "links": {"type": "array", "items": LINK},
    },
}
STANDARD = {
    "landingPage": {
        "type": "object",
        "required": ["links"],
        "properties": {
            "title": {"type": "string"},
            "description": {"type": "string"},
            "links": {"type": "array", "items": LINK},
        },
    },
    "confClasses": {
        "type": "object",
        "required": ["conformsTo"],
        "properties": {"conformsTo": {"type": "array", "items": {"type": "string"}}},
    },
    "processList": {
        "type": "object",
        "required": ["processes", "links"],
        "properties": {
            "processes": {"type": "array", "items": PROCESS_SUMMARY},
            "links": {"type": "array", "items": LINK},
        },
    },
    "process": {
        "allOf": [
            PROCESS_SUMMARY,
            {
                "type": "object",
                "properties": {
                    "inputs": {
                        "type": "object",
                        "additionalProperties": {
                            "allOf": [
                                DESCRIPTION_TYPE,
                                {
                                    "type": "object",
                                    "required": ["schema"],
                                    "properties": {
                                        "minOccurs": {"type": "integer"},
                                        "maxOccurs": {
                                            "oneOf": [{"type": "integer"}, {"enum": ["unbounded"]}]
                                        },
                                        "schema": {"type": "object"},
                                    },
                                },
                            ]
                        },
                    },
                    "outputs": {
                        "type": "object",
                        "additionalProperties": {
                            "allOf": [
                                DESCRIPTION_TYPE,
                                {
                                    "type": "object",
                                    "required": ["schema"],
                                    "properties": {"schema": {"type": "object"}},
                                },
                            ]
                        },
                    },
                },
            },
        ]
    },
    "statusInfo": STATUS_INFO,
    "jobList": {
        "type": "object",
        "required": ["jobs", "links"],
        "properties": {
            "jobs": {"type": "array", "items": STATUS_INFO},
            "links": {"type": "array", "items": LINK},
        },
    },
    "exception": {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "instance": {"type": "string"},
        },
    },
    # results.yaml: output id → inlineOrRefData; ours are qualified values ({"value": …})
    "results": {
        "type": "object",
        "additionalProperties": {"type": "object", "required": ["value"]},
    },
}


def conforms(document, name):
    jsonschema.validate(
        document, STANDARD[name], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return document


def test_every_document_validates_against_the_standard_s_schemas(node):
    conforms(get(node, "").json(), "landingPage")
    conforms(get(node, "/conformance").json(), "confClasses")
    processes = conforms(get(node, "/processes").json(), "processList")["processes"]
    for p in processes:
        conforms(get(node, f"/processes/{p['id']}").json(), "process")
    r = execute(node, SIMULATE, {"steps": 2, "durationMs": 100})
    conforms(r.json(), "statusInfo")
    done = conforms(until_status(node, r.json()["jobID"], ("successful",)), "statusInfo")
    conforms(get(node, f"/jobs/{done['jobID']}/results").json(), "results")
    conforms(get(node, "/jobs").json(), "jobList")
    conforms(get(node, f"/jobs/{uuid.uuid4()}").json(), "exception")
    conforms(get(node, "/processes/nothing").json(), "exception")
    conforms(
        requests.delete(ogc(node, f"/jobs/{done['jobID']}"), timeout=TIMEOUT).json(), "statusInfo"
    )


# --------------------------------------------------------------------------- processes


def test_every_long_operation_is_a_process_and_the_list_pages(node):
    r = get(node, "/processes")
    assert r.status_code == 200
    processes = r.json()["processes"]
    ids = [p["id"] for p in processes]
    assert {SIMULATE, "XTour.planTours", "XDima.createDistanceMatrix", "XCrashy.crash"} <= set(ids)
    assert not [i for i in ids if i.startswith("XRuntime.")]  # no long operation there
    for p in processes:
        assert p["jobControlOptions"] == ["async-execute", "sync-execute", "dismiss"]
        assert p["outputTransmission"] == ["value"]
        assert p["version"]
        (execute_link,) = links(p, OGC + "execute")
        assert execute_link["href"] == ogc(node, f"/processes/{p['id']}/execution")
    # a page of one, and its next links, walk the whole list once
    walked, url = [], ogc(node, "/processes?limit=1")
    while url:
        page = requests.get(url, timeout=TIMEOUT).json()
        assert len(page["processes"]) == 1
        walked += [p["id"] for p in page["processes"]]
        following = links(page, "next")
        url = following[0]["href"] if following else None
    assert walked == ids


def test_a_process_description_has_an_input_per_request_field_with_its_bounds(node):
    r = get(node, f"/processes/{SIMULATE}")
    assert r.status_code == 200
    process = r.json()
    inputs = process["inputs"]
    assert "callback" not in inputs  # the subscriber is its OGC form
    assert set(inputs) == {
        "timeouts",
        "durationMs",
        "steps",
        "failAtStep",
        "resultSize",
        "busy",
        "transientFailures",
        "retryLaterMs",
    }
    assert inputs["steps"]["schema"] == {
        "type": "integer",
        "format": "int64",
        "minimum": 1,
        "maximum": 1_000_000,
    }
    assert inputs["steps"]["minOccurs"] == 0 and inputs["steps"]["maxOccurs"] == 1
    timeouts = inputs["timeouts"]["schema"]
    assert timeouts["properties"]["computationTimeout"]["minimum"] == 0
    assert "$ref" not in json.dumps(process)  # every schema stands alone
    (output,) = process["outputs"].values()
    assert list(process["outputs"]) == ["result"]
    assert set(output["schema"]["properties"]) == {"stepsDone", "payload", "resultLimitations"}
    tour = get(node, "/processes/XTour.planTours").json()["inputs"]
    assert tour["depot"]["minOccurs"] == 1 and tour["fleet"]["minOccurs"] == 1


def test_no_such_process_is_404(node):
    for r in (
        get(node, "/processes/XDemo.nothing"),
        get(node, "/processes/XRuntime.watchJob"),  # not a long operation
        execute(node, "XNothing.simulate"),
        execute(node, "XDemo.nothing", asynchronous=False),
    ):
        problem_of(r, 404, "no-such-process", "InvalidRequestFault")


# --------------------------------------------------------------------------- execute


def test_execute_asynchronously_answers_201_with_the_job(node):
    for prefer in (
        "respond-async",
        "Respond-Async ",
        "return=minimal, respond-async; wait=10",
        'handling=lenient; x="a, b; c", RESPOND-ASYNC',
    ):
        r = execute(node, SIMULATE, {"steps": 1}, prefer=prefer)
        assert r.status_code == 201, (prefer, r.text)
        info = r.json()
        assert r.headers["Preference-Applied"] == "respond-async"
        assert r.headers["Location"] == ogc(node, f"/jobs/{info['jobID']}")
        assert info["type"] == "process" and info["processID"] == SIMULATE
        assert info["status"] in ("accepted", "running", "successful")
        assert uuid.UUID(info["jobID"]).version == 4
        until_status(node, info["jobID"], ("successful",))
    # another preference, or none: synchronous
    for prefer in ("respond-sync", "wait=5", "respond-asynchronously"):
        r = execute(node, SIMULATE, {"steps": 1}, prefer=prefer)
        assert r.status_code == 200 and "Preference-Applied" not in r.headers, prefer
        assert r.json() == {"stepsDone": 1, "payload": ""}


@pytest.mark.parametrize("size", [40, 300_000])  # the second streamed by the JSON fetch
def test_synchronous_raw_is_the_json_fetch_byte_for_byte(node, size):
    request = {"durationMs": 200, "steps": 2, "resultSize": size}
    job = node.start_job(**request)
    assert node.wait_done(job["id"])["status"] == "SUCCEEDED"
    fetched = json_result(node, job["id"])
    r = execute(node, SIMULATE, request, asynchronous=False)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    assert r.content == fetched
    r = execute(node, SIMULATE, request, asynchronous=False, response="raw")
    assert r.content == fetched
    # the document form wraps the same bytes
    r = execute(node, SIMULATE, request, asynchronous=False, response="document")
    assert r.status_code == 200
    assert r.content == b'{"result":{"value":' + fetched + b"}}"
    # so do an asynchronous job's results, streamed for the large one
    info = started(node, **request)
    until_status(node, info["jobID"], ("successful",))
    r = get(node, f"/jobs/{info['jobID']}/results")
    assert r.status_code == 200
    assert r.content == b'{"result":{"value":' + json_result(node, info["jobID"]) + b"}}"
    assert r.json()["result"]["value"]["payload"] == json.loads(fetched)["payload"]


def test_the_synchronous_form_leaves_no_job(node):
    before = {j["jobID"] for j in get(node, "/jobs?limit=1000").json()["jobs"]}
    r = execute(node, SIMULATE, {"steps": 1}, asynchronous=False)
    assert r.status_code == 200
    after = {j["jobID"] for j in get(node, "/jobs?limit=1000").json()["jobs"]}
    assert after - before == set()  # nothing new: the synchronous form erased its job


@pytest.mark.parametrize(
    "process, inputs",
    [
        (SIMULATE, {"steps": "x"}),
        (SIMULATE, {"steps": 0}),
        (SIMULATE, {"durationMs": 10**12}),
        (SIMULATE, {"nonsense": 1}),
        (SIMULATE, {"timeouts": {"queueingTimeout": -1}}),
        (SIMULATE, {"timeouts": {"what": 1}}),
        ("XTour.planTours", {}),  # depot and fleet are required
    ],
)
def test_invalid_inputs_are_the_json_binding_s_fault_in_a_problem(node, process, inputs):
    service, operation = process.split(".")
    start = "start" + operation[:1].upper() + operation[1:]
    expected = json_fault(node.post(service, start, inputs))
    for asynchronous in (True, False):
        r = execute(node, process, inputs, asynchronous=asynchronous)
        doc = problem_of(r, 400, fault=expected["faultInfo"]["$type"])
        assert {"message": doc["message"], "faultInfo": doc["faultInfo"]} == expected
        assert doc["instance"] == f"/ogcapi/processes/{process}/execution"
    # a qualified value is its value: refused the same way
    qualified = {name: {"value": value} for name, value in inputs.items()}
    doc = problem_of(execute(node, process, qualified), 400)
    assert doc["faultInfo"] == expected["faultInfo"]


@pytest.mark.parametrize(
    "body, parameter",
    [
        ({"inputs": {}, "mode": "async"}, "mode"),
        ({"inputs": []}, "inputs"),
        ({"inputs": {"callback": {"url": "http://127.0.0.1/"}}}, "inputs.callback"),
        ({"inputs": {"steps": {"href": "http://example.org/steps"}}}, "inputs.steps"),
        ({"inputs": {}, "response": "everything"}, "response"),
        ({"inputs": {}, "outputs": {"other": {}}}, "outputs.other"),
        (
            {"inputs": {}, "outputs": {"result": {"transmissionMode": "reference"}}},
            "outputs.result.transmissionMode",
        ),
        (
            {"inputs": {}, "outputs": {"result": {"format": {"mediaType": "text/xml"}}}},
            "outputs.result.format.mediaType",
        ),
        ({"inputs": {}, "subscriber": "http://127.0.0.1/"}, "subscriber"),
    ],
)
def test_an_execute_request_that_cannot_be_honoured_is_400(node, body, parameter):
    r = requests.post(
        ogc(node, f"/processes/{SIMULATE}/execution"),
        json=body,
        headers={"Prefer": "respond-async"},
        timeout=TIMEOUT,
    )
    doc = problem_of(r, 400, fault="InvalidValueFault")
    assert doc["faultInfo"]["parameter"] == parameter


def test_a_body_that_is_no_json_object_is_400_never_500(node):
    url = ogc(node, f"/processes/{SIMULATE}/execution")
    for data, ctype in (
        (b"{", "application/json"),
        (b"[1, 2]", "application/json"),
        (b'"text"', "application/json"),
        (b'{"inputs": {}}', "text/plain"),
        (b"[" * 5000, "application/json"),
        (b'{"inputs": {"steps": NaN}}', "application/json"),
    ):
        r = requests.post(url, data=data, headers={"Content-Type": ctype}, timeout=TIMEOUT)
        problem_of(r, 400, fault="InvalidRequestFault")
    # an empty body is no inputs: the defaults
    r = requests.post(url, data=b"", timeout=TIMEOUT)
    assert r.status_code == 200 and r.json() == {"stepsDone": 1, "payload": ""}


def test_head_is_get_without_a_body(node):
    for path in ("", "/processes", f"/processes/{SIMULATE}", "/jobs"):
        r = requests.head(ogc(node, path), timeout=TIMEOUT)
        assert r.status_code == 200 and r.content == b"", path
        assert r.headers["Content-Type"].startswith("application/json")


def test_paths_and_methods_not_served(node):
    for path in ("/nothing", "/jobs/a/b/c", "/processes/x/y"):
        problem_of(get(node, path), 404, fault="InvalidRequestFault")
    for method, path in (
        ("PUT", "/jobs"),
        ("POST", "/processes"),
        ("GET", f"/processes/{SIMULATE}/execution"),
        ("POST", "/jobs/x"),
    ):
        r = requests.request(method, ogc(node, path), timeout=TIMEOUT)
        problem_of(r, 405, fault="InvalidRequestFault")
        assert r.headers["Allow"]
    for path, parameter in (
        ("/processes?limit=0", "limit"),
        ("/processes?limit=many", "limit"),
        ("/processes?cursor=%00", "cursor"),
        ("/processes?what=1", "what"),
        ("/processes?f=html", "f"),
    ):
        doc = problem_of(get(node, path), 400, fault="InvalidValueFault")
        assert doc["faultInfo"]["parameter"] == parameter


# --------------------------------------------------------------------------- jobs


def test_a_job_s_status_through_its_life(node):
    info = started(node, durationMs=200_000, steps=100, resultSize=10)  # stopped below
    job_id = info["jobID"]
    assert info["status"] in ("accepted", "running")
    assert info["created"].endswith("Z")
    running = until(
        lambda: (s := status(node, job_id)).get("progress", 0) > 0 and s,
        "progress reported",
    )
    assert running["status"] == "running" and running["xserver:status"] == "RUNNING"
    assert 0 < running["progress"] < 100
    progress = running["xserver:progress"]
    assert progress["$type"] == "BulkProgress"
    assert running["progress"] == progress["successful"] * 100 // 100
    assert running["started"] >= running["created"] and "finished" not in running
    assert links(running, "self")[0]["href"] == ogc(node, f"/jobs/{job_id}")
    assert not links(running, OGC + "results")
    doc = problem_of(get(node, f"/jobs/{job_id}/results"), 404, "result-not-ready", "JobStateFault")
    assert doc["faultInfo"]["status"] == "RUNNING"
    # stopped over JSON: successful, with what it had done
    assert node.call("XRuntime", "stopJob", {"id": job_id})["status"] == "STOPPING"
    stopped = until_status(node, job_id, ("successful",))
    assert 0 < stopped["progress"] < 100
    # a job that runs to its end
    info = started(node, durationMs=100, steps=4)
    done = until_status(node, info["jobID"], ("successful",))
    assert done["progress"] == 100 and done["xserver:status"] == "SUCCEEDED"
    assert done["created"] <= done["started"] <= done["finished"] == done["updated"]
    (results,) = links(done, OGC + "results")
    assert results["href"] == ogc(node, f"/jobs/{info['jobID']}/results")
    # the JSON binding's own view of the same job
    watched = node.watch(info["jobID"])
    assert watched["status"] == "SUCCEEDED" and watched["progress"] == done["xserver:progress"]


def test_a_queued_job_is_accepted_and_its_results_not_ready(node):
    blockers = occupy_workers(node)
    try:
        info = started(node, steps=1)
        assert info["status"] == "accepted" and info["xserver:status"] == "QUEUING"
        assert "started" not in info and "progress" not in info
        assert status(node, info["jobID"])["status"] == "accepted"
        doc = problem_of(
            get(node, f"/jobs/{info['jobID']}/results"), 404, "result-not-ready", "JobStateFault"
        )
        assert doc["faultInfo"]["status"] == "QUEUING"
    finally:
        for job_id in blockers:
            requests.delete(ogc(node, f"/jobs/{job_id}"), timeout=TIMEOUT)
    until_status(node, info["jobID"], ("successful",))


def test_a_stopping_job_is_running_and_a_dismissed_one_dismissed(node):
    r = execute(node, "XCrashy.crash", {"mode": "ignore_stop", "seconds": 60})
    job_id = r.json()["jobID"]
    until_status(node, job_id, ("running",))
    assert node.call("XRuntime", "stopJob", {"id": job_id})["status"] == "STOPPING"
    stopping = status(node, job_id)
    assert stopping["status"] == "running" and stopping["xserver:status"] == "STOPPING"
    dismissed = requests.delete(ogc(node, f"/jobs/{job_id}"), timeout=TIMEOUT)
    assert dismissed.status_code == 200
    assert dismissed.json()["status"] == "dismissed"
    assert dismissed.json()["xserver:status"] == "DELETED"
    until_gone(node, job_id)  # its worker, deaf to the stop, was killed


def test_unknown_jobs_are_404_no_such_job(node):
    job_id = str(uuid.uuid4())
    for r in (
        get(node, f"/jobs/{job_id}"),
        get(node, f"/jobs/{job_id}/results"),
        requests.delete(ogc(node, f"/jobs/{job_id}"), timeout=TIMEOUT),
        get(node, "/jobs/not-even-a-uuid"),
    ):
        doc = problem_of(r, 404, "no-such-job", "UnknownJobFault")
        assert doc["faultInfo"]["jobId"] in (job_id, "not-even-a-uuid")


def test_ids_no_job_can_have_are_404_and_match_nothing(node):
    for weird in ("%00", "a%0Ab", "%E2%80%AE", "x" * 5000):
        for r in (
            get(node, f"/jobs/{weird}"),
            get(node, f"/jobs/{weird}/results"),
            requests.delete(ogc(node, f"/jobs/{weird}"), timeout=TIMEOUT),
        ):
            problem_of(r, 404, "no-such-job", "UnknownJobFault")
        r = get(node, f"/jobs?processID={weird}.{weird}&status=successful")
        assert r.status_code == 200 and r.json()["jobs"] == []
        problem_of(get(node, f"/processes/{weird}"), 404, "no-such-process")


def test_a_failed_job_s_results_are_its_fault_with_the_json_status(node):
    info = started(node, steps=3, failAtStep=2)
    failed = until_status(node, info["jobID"], ("failed",))
    assert failed["xserver:status"] == "FAILED"
    (exceptions,) = links(failed, OGC + "exceptions")
    assert exceptions["href"] == ogc(node, f"/jobs/{info['jobID']}/results")
    expected = node.post("XDemo", "fetchSimulateResponse", {"id": info["jobID"]})
    assert expected.status_code == 500
    doc = problem_of(get(node, f"/jobs/{info['jobID']}/results"), 500, fault="ProcessingFault")
    assert {"message": doc["message"], "faultInfo": doc["faultInfo"]} == expected.json()
    # a synchronous run that fails answers the same
    r = execute(node, SIMULATE, {"steps": 3, "failAtStep": 2}, asynchronous=False)
    doc = problem_of(r, 500, fault="ProcessingFault")
    assert doc["faultInfo"] == expected.json()["faultInfo"]
    # a timed-out job's fault keeps its own status
    info = started(node, durationMs=60_000, timeouts={"computationTimeout": 1})
    until_status(node, info["jobID"], ("failed",))
    problem_of(get(node, f"/jobs/{info['jobID']}/results"), 504, fault="RequestTimedOutFault")


def test_the_job_list_filters_and_pages(node):
    short = started(node, steps=1)
    failed = started(node, steps=2, failAtStep=1)
    long = started(node, durationMs=3100, steps=1)
    crash = execute(node, "XCrashy.crash", {"mode": "sleep", "seconds": 0}).json()
    mine = [short, failed, long, crash]
    done = {i["jobID"]: until_status(node, i["jobID"], ("successful", "failed")) for i in mine}
    earliest = min(d["created"] for d in done.values())
    latest = max(d["created"] for d in done.values())
    window = {"datetime": f"{earliest}/{latest}"}

    def listed(**params):
        r = get(node, "/jobs", params={**window, **params})
        assert r.status_code == 200, r.text
        page = r.json()
        assert links(page, "self")[0]["href"].startswith(ogc(node, "/jobs?"))
        return [j["jobID"] for j in page["jobs"]]

    newest_first = [i["jobID"] for i in reversed(mine)]
    assert listed() == newest_first
    assert listed(processID=SIMULATE) == newest_first[1:]
    assert listed(processID=f"XCrashy.crash,{SIMULATE}") == newest_first
    assert listed(processID=["XCrashy.crash", "XTour.planTours"]) == [crash["jobID"]]
    assert listed(processID="XNothing.nothing") == []
    assert listed(status="failed") == [failed["jobID"]]
    assert listed(status=["failed", "successful"]) == newest_first
    assert listed(status="running,accepted,dismissed") == []
    assert listed(type="process") == newest_first
    assert listed(type="other") == []
    assert listed(minDuration=3) == [long["jobID"]]
    assert long["jobID"] not in listed(maxDuration=2)
    assert short["jobID"] in listed(maxDuration=2)
    assert listed(minDuration=0, maxDuration=100_000) == newest_first
    # an instant is the jobs created in that millisecond; open ends
    assert short["jobID"] in listed(datetime=done[short["jobID"]]["created"])
    assert listed(datetime=f"{earliest}/..")[-4:] == newest_first
    assert listed(datetime=f"../{latest}")[:4] == newest_first
    assert listed(datetime=f"/{earliest}")[:1] == [short["jobID"]]
    # pages of one, by their next links: each job once, newest first
    walked, url = [], ogc(node, f"/jobs?limit=1&datetime={earliest}/{latest}")
    while url:
        page = requests.get(url, timeout=TIMEOUT).json()
        walked += [j["jobID"] for j in page["jobs"]]
        following = links(page, "next")
        url = following[0]["href"] if following else None
        if url:
            query = parse_qs(urlsplit(url).query)
            assert query["limit"] == ["1"] and query["datetime"] == [f"{earliest}/{latest}"]
    assert walked == newest_first


@pytest.mark.parametrize(
    "query, parameter",
    [
        ("limit=0", "limit"),
        ("limit=-3", "limit"),
        ("limit=1.5", "limit"),
        ("status=finished", "status"),
        ("datetime=yesterday", "datetime"),
        ("datetime=2026-01-01", "datetime"),
        ("datetime=2026-01-02T00:00:00Z/2026-01-01T00:00:00Z", "datetime"),
        ("minDuration=-1", "minDuration"),
        ("maxDuration=soon", "maxDuration"),
        ("maxDuration=1&maxDuration=2", "maxDuration"),
        ("cursor=garbage", "cursor"),
        ("processId=XDemo.simulate", "processId"),
        ("f=html", "f"),
    ],
)
def test_a_bad_job_list_parameter_is_400_naming_it(node, query, parameter):
    doc = problem_of(get(node, f"/jobs?{query}"), 400, fault="InvalidValueFault")
    assert doc["faultInfo"]["parameter"] == parameter


def test_a_larger_limit_is_answered_with_the_most_a_page_holds(node):
    r = get(node, "/jobs?limit=100000")
    assert r.status_code == 200 and len(r.json()["jobs"]) <= 1000


def test_dismissing_a_running_job_stops_its_work(node):
    ids = occupy_workers(node)
    doc = problem_of(get(node, f"/jobs/{ids[0]}/results"), 404, "result-not-ready")
    assert doc["faultInfo"]["status"] == "RUNNING"
    for job_id in ids:
        r = requests.delete(ogc(node, f"/jobs/{job_id}"), timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        info = r.json()
        assert info["status"] == "dismissed" and info["jobID"] == job_id
        assert info["processID"] == SIMULATE
    for job_id in ids:
        until_gone(node, job_id)  # erased once its worker let go
        assert f"job {job_id} DELETED (was RUNNING); its computation is aborted" in node.log()
        problem_of(
            requests.delete(ogc(node, f"/jobs/{job_id}"), timeout=TIMEOUT), 404, "no-such-job"
        )
    # both workers are free again: a job runs at once
    quick = started(node, steps=1)
    until_status(node, quick["jobID"], ("successful",))


def test_dismissing_a_finished_job_erases_it(node):
    info = started(node, steps=1)
    until_status(node, info["jobID"], ("successful",))
    r = requests.delete(ogc(node, f"/jobs/{info['jobID']}"), timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["status"] == "dismissed"
    assert "finished" in r.json()
    problem_of(get(node, f"/jobs/{info['jobID']}"), 404, "no-such-job")
    assert node.watch(info["jobID"])["status"] == "UNKNOWN"


# --------------------------------------------------------------------------- one job, every binding


def test_a_job_started_over_json_or_soap_shows_here(node):
    job = node.start_job(durationMs=100, steps=2)
    soap = make_client("soap", node.base).call("XDemo", "startSimulate", {"steps": 1})
    for job_id in (job["id"], soap["id"]):
        info = until_status(node, job_id, ("successful",))
        assert info["processID"] == SIMULATE and info["jobID"] == job_id
        r = get(node, f"/jobs/{job_id}/results")
        assert r.content == b'{"result":{"value":' + json_result(node, job_id) + b"}}"


def test_a_job_started_here_is_watched_stopped_and_fetched_over_json(node):
    info = started(node, durationMs=200_000, steps=100)  # stopped below
    job_id = info["jobID"]
    watched = node.watch(job_id)
    assert watched["id"] == job_id and watched["status"] in ("QUEUING", "RUNNING")
    until(
        lambda: node.watch(job_id, progressUpdatePeriod=250).get("progress", {}).get("successful"),
        "a step done",
    )
    assert node.call("XRuntime", "stopJob", {"id": job_id})["status"] == "STOPPING"
    assert node.wait_done(job_id)["status"] == "SUCCEEDED"
    fetched = json.loads(json_result(node, job_id))
    assert 1 <= fetched["stepsDone"] < 100
    assert fetched["resultLimitations"][0]["reason"] == "REQUEST_STOPPED"
    done = status(node, job_id)
    assert done["status"] == "successful" and done["progress"] < 100
    assert get(node, f"/jobs/{job_id}/results").json() == {"result": {"value": fetched}}
    assert node.call("XRuntime", "deleteJob", {"id": job_id})["status"] == "DELETED"
    problem_of(get(node, f"/jobs/{job_id}"), 404, "no-such-job")


# --------------------------------------------------------------------------- accounts


def test_public_resources_answer_without_credentials_jobs_do_not(accounts):
    for path in ("", "/conformance", "/api", "/processes", f"/processes/{SIMULATE}"):
        assert get(accounts, path).status_code == 200, path
    for r in (
        get(accounts, "/jobs"),
        get(accounts, f"/jobs/{uuid.uuid4()}"),
        execute(accounts, SIMULATE, {"steps": 1}),
        get(accounts, "/jobs", auth=("alice", TOKENS["bob"])),
    ):
        doc = problem_of(r, 401, fault="AccessDeniedFault")
        assert r.headers["WWW-Authenticate"] == 'Basic realm="xruntime"'
        assert doc["status"] == 401


def test_links_are_under_the_public_url(accounts):
    page = get(accounts, "").json()
    assert {link["href"] for link in page["links"]} == {
        f"{PUBLIC_URL}/ogcapi{tail}"
        for tail in ("/", "/api", "/conformance", "/processes", "/jobs")
    }
    r = execute(accounts, SIMULATE, {"steps": 1}, auth=creds("alice"))
    assert r.headers["Location"] == f"{PUBLIC_URL}/ogcapi/jobs/{r.json()['jobID']}"
    assert links(r.json(), "self")[0]["href"] == r.headers["Location"]


def test_another_user_s_job_is_no_such_job(accounts):
    alice, bob, root = creds("alice"), creds("bob"), creds("root")
    info = started(accounts, alice, steps=1)
    job_id = info["jobID"]
    until_status(accounts, job_id, ("successful",), alice)
    for r in (
        get(accounts, f"/jobs/{job_id}", bob),
        get(accounts, f"/jobs/{job_id}/results", bob),
        requests.delete(ogc(accounts, f"/jobs/{job_id}"), auth=bob, timeout=TIMEOUT),
    ):
        problem_of(r, 404, "no-such-job", "UnknownJobFault")
    assert job_id not in [j["jobID"] for j in get(accounts, "/jobs", bob).json()["jobs"]]
    assert job_id in [j["jobID"] for j in get(accounts, "/jobs", alice).json()["jobs"]]
    assert job_id in [j["jobID"] for j in get(accounts, "/jobs", root).json()["jobs"]]
    assert status(accounts, job_id, root)["status"] == "successful"  # an admin sees it
    assert status(accounts, job_id, alice)["status"] == "successful"  # still there


# --------------------------------------------------------------------------- subscriber


def test_a_subscriber_gets_the_job_signed_through_the_callback(accounts):
    alice = creds("alice")
    receiver = Receiver()
    try:
        url = receiver.url
        done = started(accounts, alice, steps=1)  # none: no callback
        r = execute(accounts, SIMULATE, {"steps": 1}, auth=alice, subscriber={"successUri": url})
        assert r.status_code == 201, r.text
        plain = r.json()["jobID"]
        r = execute(
            accounts,
            SIMULATE,
            {"durationMs": 600_000, "steps": 600},  # stopped once its progress arrived
            auth=alice,
            subscriber={"successUri": url, "failedUri": url, "inProgressUri": url},
        )
        with_progress = r.json()["jobID"]
        receiver.wait_for(
            lambda rs: any(
                d.data["id"] == with_progress and d.data["type"] == "job.progress" for d in rs
            )
        )
        stop = accounts.post("XRuntime", "stopJob", {"id": with_progress})
        assert stop.status_code == 200 and stop.json()["status"] == "STOPPING"
        r = execute(
            accounts,
            SIMULATE,
            {"steps": 2, "failAtStep": 1},
            auth=alice,
            subscriber={"successUri": url, "failedUri": url},
        )
        failing = r.json()["jobID"]
        receiver.wait_for(
            lambda rs: (
                {d.data["id"] for d in rs if d.data["type"] == "job.finished"}
                >= {plain, with_progress, failing}
            )
        )
        verifier = standardwebhooks.Webhook(SECRETS["alice"])
        for delivery in receiver.received:
            data = verifier.verify(delivery.body, delivery.headers)
            assert data["id"] in (plain, with_progress, failing)
        ends = {
            d.data["id"]: d.data["status"]
            for d in receiver.received
            if "job.finished" in d.data["type"]
        }
        assert ends == {plain: "SUCCEEDED", with_progress: "SUCCEEDED", failing: "FAILED"}
        kinds = {d.data["id"]: set() for d in receiver.received}
        for d in receiver.received:
            kinds[d.data["id"]].add(d.data["type"])
        assert kinds[plain] == {"job.finished"}
        assert kinds[with_progress] == {"job.finished", "job.progress"}
        assert done["jobID"] not in kinds
    finally:
        receiver.stop()


@pytest.mark.parametrize(
    "subscriber, parameter, fault",
    [
        ({"successUri": "http://192.0.2.1/hook"}, "subscriber.successUri", "InvalidValueFault"),
        ({"successUri": "ftp://127.0.0.1/hook"}, "subscriber.successUri", "InvalidValueFault"),
        (
            {"successUri": "http://127.0.0.1:9/a", "failedUri": "http://127.0.0.1:9/b"},
            "subscriber.failedUri",
            "InvalidValueFault",
        ),
        (
            {"successUri": "http://127.0.0.1:9/a", "inProgressUri": "http://127.0.0.1:9/b"},
            "subscriber.inProgressUri",
            "InvalidValueFault",
        ),
        ({"failedUri": "http://127.0.0.1:9/a"}, "subscriber.successUri", "MissingParameterFault"),
        ({"successUri": 5}, "subscriber.successUri", "InvalidValueFault"),
        ({"successUri": "http://127.0.0.1:9/a", "x": 1}, "subscriber.x", "InvalidValueFault"),
    ],
)
def test_a_subscriber_that_cannot_be_honoured_is_refused(accounts, subscriber, parameter, fault):
    r = execute(accounts, SIMULATE, {"steps": 1}, auth=creds("bob"), subscriber=subscriber)
    doc = problem_of(r, 400, fault=fault)
    assert doc["faultInfo"]["parameter"] == parameter
    assert "callback.url" not in doc["message"]
    assert not [
        j for j in get(accounts, "/jobs", creds("bob")).json()["jobs"] if j["status"] == "accepted"
    ]


# --------------------------------------------------------------------------- OWSLib


def owslib(srv, auth=None):
    from owslib.ogcapi.processes import Processes
    from owslib.util import Authentication

    return Processes(ogc(srv), auth=Authentication(*auth) if auth else None)


def follow(client, job_id, wanted=("successful", "failed", "dismissed")):
    return until(
        lambda: (s := client._request(path=f"jobs/{job_id}"))["status"] in wanted and s,
        f"job {job_id} {wanted} (OWSLib)",
    )


def test_owslib_lists_describes_and_executes_asynchronously(node):
    client = owslib(node)
    assert SIMULATE in [p["id"] for p in client.processes()]
    described = client.process(SIMULATE)
    assert described["inputs"]["steps"]["schema"]["maximum"] == 1_000_000
    assert client.conformance()["conformsTo"]
    assert client.api()["openapi"].startswith("3.0")
    info = client.execute(SIMULATE, {"steps": 3, "durationMs": 300, "resultSize": 20}, async_=True)
    assert info["status"] in ("accepted", "running", "successful")
    assert client.response_headers["Location"].endswith(f"/jobs/{info['jobID']}")
    done = follow(client, info["jobID"])
    assert done["status"] == "successful"
    results = client._request(path=f"jobs/{info['jobID']}/results")
    assert results == {"result": {"value": json.loads(json_result(node, info["jobID"]))}}
    # synchronous, in OWSLib's default form (document)
    answer = client.execute(SIMULATE, {"steps": 3, "durationMs": 0, "resultSize": 20})
    assert answer == results


def test_owslib_sees_a_failing_run_s_fault(node):
    client = owslib(node)
    info = client.execute(SIMULATE, {"steps": 3, "failAtStep": 1}, async_=True)
    assert follow(client, info["jobID"])["status"] == "failed"
    with pytest.raises(RuntimeError) as raised:
        client._request(path=f"jobs/{info['jobID']}/results")
    doc = json.loads(str(raised.value))
    assert doc["faultInfo"]["$type"] == "ProcessingFault" and doc["status"] == 500
    with pytest.raises(RuntimeError) as raised:  # and so does a synchronous one
        client.execute(SIMULATE, {"steps": 3, "failAtStep": 1})
    assert json.loads(str(raised.value))["faultInfo"]["$type"] == "ProcessingFault"


def test_owslib_dismisses_a_running_job_and_its_work_stops(node):
    client = owslib(node)
    ids = [
        client.execute(SIMULATE, {"steps": 600, "durationMs": 600_000}, async_=True)["jobID"]
        for _ in range(2)
    ]
    for job_id in ids:
        follow(client, job_id, ("running",))
    for job_id in ids:
        assert client._request(method="DELETE", path=f"jobs/{job_id}")["status"] == "dismissed"
    for job_id in ids:
        until_gone(node, job_id)
        assert f"job {job_id} DELETED (was RUNNING); its computation is aborted" in node.log()
    quick = client.execute(SIMULATE, {"steps": 1}, async_=True)
    assert follow(client, quick["jobID"])["status"] == "successful"


def test_owslib_with_credentials(accounts):
    client = owslib(accounts, creds("bob"))
    info = client.execute(SIMULATE, {"steps": 1}, async_=True)
    assert follow(client, info["jobID"])["status"] == "successful"
    assert info["jobID"] in [j["jobID"] for j in client._request(path="jobs")["jobs"]]
    problem_of(get(accounts, f"/jobs/{info['jobID']}", creds("alice")), 404, "no-such-job")


# --------------------------------------------------------------------------- a live edit (last)


def test_a_live_edit_shows_in_the_processes_and_the_api_document(accounts):
    """XTour switched off and [jobs] max_request_timeout shortened in the file: within
    seconds, XTour has no processes and the timeouts' bound follows, in the descriptions
    and in /api (each made once per set of what it states)."""
    path = write_config(
        os.path.join(accounts.folder, "edit"),
        accounts.port,
        workers=accounts.workers,
        server_keys={"public_url": PUBLIC_URL},
        extra=accounts_toml()
        + '\n[jobs]\nmax_request_timeout = "1h"\n\n[services.XTour]\nenabled = false\n',
    )
    os.replace(path, accounts.config)

    def processes():
        return [p["id"] for p in get(accounts, "/processes").json()["processes"]]

    until(lambda: "XTour.planTours" not in processes(), "XTour switched off")
    inputs = get(accounts, f"/processes/{SIMULATE}").json()["inputs"]
    bound = inputs["timeouts"]["schema"]["properties"]["queueingTimeout"]["maximum"]
    assert bound == 3_600_000
    problem_of(get(accounts, "/processes/XTour.planTours"), 404, "no-such-process")
    r = execute(accounts, "XTour.planTours", {}, auth=creds("alice"))
    problem_of(r, 404, "no-such-process")
    document = get(accounts, "/api").json()
    validate(document)
    assert "/processes/XTour.planTours/execution" not in document["paths"]
    timeouts = document["components"]["schemas"]["Timeouts"]["properties"]
    assert timeouts["computationTimeout"]["maximum"] == 3_600_000

"""The SOAP clients people use drive the whole job life from the served WSDLs, with plain
keys and no workaround: zeep and suds-community (Python), npm ``soap`` and
``strong-soap`` (node.js, installed into tests/node by this module, as pinned by its
package-lock.json; required, not skipped, with XRUNTIME_TEST_REQUIRE_NODE=1 as in .ci/run).

For XDemo, XTour and XDima each client starts a job (sending ``timeouts``), watches it
until typed progress comes back, is refused a fetch while it runs (JobStateFault),
stops it, fetches the intermediate result with its limitation, deletes it, gets
UnknownJobFault for an unknown id, InvalidValueFault (``value`` as sent) for a bad
request and the service's ProcessingFault for a job that fails; and every envelope it
sent is valid against the schemas of the WSDL it was built from.
"""

import os
import shutil
import subprocess
import time
import uuid

import pytest
import requests
from lxml import etree

from tests.clients import (
    NODE_DIR,
    NodeSoapClient,
    RemoteFault,
    SoapClient,
    SudsClient,
    wsdl_documents,
)
from tests.fixtures.instances import random_instance
from xruntime.bindings.xml_codec import plan
from xruntime.protocol.typeinfo import OBJ

CLIENTS = ("zeep", "suds", "soap", "strong-soap")
SERVICES = ("XDemo", "XTour", "XDima")
STEPS = (
    "start",
    "watch",
    "fetch-running",
    "stop",
    "fetch",
    "delete",
    "unknown",
    "invalid",
    "failing",
    "schema",
)
TIMEOUTS = {"queueingTimeout": 60000, "computationTimeout": 60000}
WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"


def in_schema_order(data, cls):
    """``data`` (a request in the JSON form) with its keys in the order the schema's
    sequences declare them, as a client author following the WSDL writes them."""
    ordered = {}
    for name, field, _ in plan(cls):
        if name in data:
            value = data[name]
            if field.kind == OBJ:
                value = (
                    [in_schema_order(v, field.type) for v in value]
                    if field.many
                    else in_schema_order(value, field.type)
                )
            ordered[name] = value
    assert set(ordered) == set(data), set(data) - set(ordered)
    return ordered


def square(capacity):
    """Three orders on the corners of a 1 km square, the depot on the fourth."""
    d = [[0, 1000, 1414, 1000], [1000, 0, 1000, 1414], [1414, 1000, 0, 1000], [1000, 1414, 1000, 0]]
    here = {"lon": 0, "lat": 0}
    return {
        "depot": {"id": "D", "location": here},
        "orders": [{"id": name, "location": here, "demand": [1]} for name in "ABC"],
        "fleet": {"count": 1, "capacities": [capacity]},
        "matrix": {"rows": [{"distances": row, "durations": row} for row in d]},
        "options": {"maxComputationTimeMs": 2000},
    }


def scenario():
    """Per service: its operations, and the requests of each step."""
    from xruntime_services.xdemo.types import SimulateRequest
    from xruntime_services.xdima.types import CreateDistanceMatrixRequest
    from xruntime_services.xtour.types import PlanToursRequest

    tour = random_instance(n=60, maxComputationTimeMs=60000, maxIterationsWithoutImprovement=10**9)
    out_of_range = square(10)
    out_of_range["orders"][0]["location"] = {"lon": 0, "lat": 95}
    return {
        "XDemo": dict(
            start="startSimulate",
            fetch="fetchSimulateResponse",
            type=SimulateRequest,
            request={"timeouts": TIMEOUTS, "durationMs": 30000, "steps": 60},
            progress=("BulkProgress", "successful"),
            invalid=({"steps": 0}, "steps", "0"),
            failing=({"steps": 2, "failAtStep": 1}, "ProcessingFault", {}),
        ),
        "XTour": dict(
            start="startPlanTours",
            fetch="fetchToursResponse",
            type=PlanToursRequest,
            request={"timeouts": TIMEOUTS, **tour},
            progress=("TourPlanProgress", "bestCost"),
            invalid=(out_of_range, "orders[0].location.lat", "95"),
            failing=(square(0), "NoFeasibleSolutionFault", {"orders": 3}),
        ),
        "XDima": dict(
            start="startCreateDistanceMatrix",
            fetch="fetchDistanceMatrixResponse",
            type=CreateDistanceMatrixRequest,
            request={
                "timeouts": TIMEOUTS,
                "startLocations": [{"longitude": i / 100, "latitude": 0} for i in range(1000)],
                "destinationLocations": [
                    {"longitude": 0, "latitude": 0},
                    {"longitude": 1, "latitude": 1},
                ],
                "blockPauseMs": 2000,
            },
            progress=("DistanceMatrixProgress", "calculationProgress"),
            invalid=(
                {"startLocations": [{"longitude": 0, "latitude": 95}]},
                "startLocations[0].latitude",
                "95",
            ),
            # DistanceMatrixCalculationFault comes only from a server out of memory
            failing=None,
        ),
    }


# --------------------------------------------------------------------------- the life


class Life:
    """One client's life of one service: each step's outcome, "ok" or why not."""

    def __init__(self, client, service, wsdl_schemas):
        self.client, self.service = client, service
        self.case = scenario()[service]
        self.schemas = wsdl_schemas
        self.outcome = {}
        self.job = None
        self.out_of_schema = range(0)  # what the client sent in step "invalid"

    def start(self, request):
        return self.client.call(
            self.service, self.case["start"], in_schema_order(request, self.case["type"])
        )

    def fetch(self, job_id):
        return self.client.call(self.service, self.case["fetch"], {"id": job_id})

    def watch(self, job_id):
        return self.client.call(
            "XRuntime",
            "watchJob",
            {"id": job_id, "progressUpdatePeriod": 250, "maximumPollingPeriod": 2000},
        )

    def wait_done(self, job_id, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.watch(job_id)
            if job["status"] in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"):
                return job
        raise AssertionError(f"job {job_id} never ended")

    def run(self):
        sent_before = len(self.client.sent)
        for name in STEPS:
            try:
                self.outcome[name] = (
                    getattr(self, "step_" + name.replace("-", "_"))(sent_before) or "ok"
                )
            except Exception as exc:  # the table says which step failed and why
                text = (
                    f"{type(exc).__name__}: {exc}"
                    if not isinstance(exc, AssertionError)
                    else str(exc)
                )
                self.outcome[name] = text.splitlines()[0][:240] if text else type(exc).__name__
        return self.outcome

    def need_job(self):
        if self.job is None:
            raise AssertionError("no job")
        return self.job

    # ------------------------------------------------------------------ steps

    def step_start(self, _):
        try:
            job = self.start(self.case["request"])
        except Exception:
            # the other steps are measured on a job started over JSON
            self.job = requests.post(
                f"{self.client.base}/services/rs/{self.service}/{self.case['start']}",
                json=self.case["request"],
                timeout=30,
            ).json()["id"]
            raise
        assert job["status"] in ("QUEUING", "RUNNING") and job["id"], job
        self.job = job["id"]

    def step_watch(self, _):
        job_id, (type_name, field) = self.need_job(), self.case["progress"]
        deadline, job = time.time() + 30, None
        while time.time() < deadline:
            job = self.watch(job_id)
            assert job["status"] in ("QUEUING", "RUNNING"), job
            progress = job.get("progress")
            if progress and float(progress.get(field) or 0) > 0:
                assert progress.get("$type") == type_name, f"progress without its type: {progress}"
                return
        raise AssertionError(f"no {type_name} with {field} > 0: {job}")

    def step_fetch_running(self, _):
        job_id = self.need_job()
        expect_fault("JobStateFault", self.fetch, job_id, jobId=job_id, status="RUNNING")

    def step_stop(self, _):
        job_id = self.need_job()
        assert self.client.call("XRuntime", "stopJob", {"id": job_id})["status"] in (
            "STOPPING",
            "SUCCEEDED",
        )
        assert self.wait_done(job_id)["status"] == "SUCCEEDED"

    def step_fetch(self, _):
        result = self.fetch(self.need_job())
        limitations = result.get("resultLimitations")
        assert isinstance(limitations, list) and len(limitations) == 1, (
            f"resultLimitations: {limitations!r}"
        )
        [limitation] = limitations
        assert limitation.get("$type") == "IntermediateResponseLimitation", limitation
        assert limitation["reason"] == "REQUEST_STOPPED" and limitation["message"], limitation

    def step_delete(self, _):
        job_id = self.need_job()
        assert self.client.call("XRuntime", "deleteJob", {"id": job_id})["status"] == "DELETED"

    def step_unknown(self, _):
        unknown = str(uuid.uuid4())
        expect_fault("UnknownJobFault", self.fetch, unknown, jobId=unknown)
        expect_fault(
            "UnknownJobFault",
            self.client.call,
            "XRuntime",
            "stopJob",
            {"id": unknown},
            jobId=unknown,
        )

    def step_invalid(self, _):
        request, parameter, value = self.case["invalid"]
        before = len(self.client.sent)
        try:
            expect_fault("InvalidValueFault", self.start, request, parameter=parameter, value=value)
        finally:
            self.out_of_schema = range(before, len(self.client.sent))

    def step_failing(self, _):
        if self.case["failing"] is None:
            return "n/a"
        request, fault_type, fields = self.case["failing"]
        job_id = self.start(request)["id"]
        assert self.wait_done(job_id)["status"] == "FAILED"
        expect_fault(fault_type, self.fetch, job_id, **fields)
        self.client.call("XRuntime", "deleteJob", {"id": job_id})

    def step_schema(self, sent_before):
        sent = [
            m
            for i, m in enumerate(self.client.sent)
            if i >= sent_before and i not in self.out_of_schema
        ]
        assert sent, "the client sent nothing"
        for service, envelope in sent:
            problem = invalid_against(self.schemas(service), envelope)
            assert problem is None, f"{service} request not valid: {problem}"


def expect_fault(expected, call, *args, **fields):
    try:
        answer = call(*args)
    except RemoteFault as fault:
        assert fault.type == expected, f"{fault.type} ({fault.message}) instead of {expected}"
        assert fault.fields.get("hint"), f"{expected} without its hint: {fault.fields}"
        for name, value in fields.items():
            assert str(fault.fields.get(name)) == str(value), (
                f"{expected}.{name} = {fault.fields.get(name)!r}, not {value!r}"
            )
        return
    raise AssertionError(f"{expected} expected, got an answer: {answer}")


# --------------------------------------------------------------------------- schemas


class Schemas:
    """The XML Schema of each service's served WSDL (libxml2, as xmllint uses it)."""

    def __init__(self, base, folder):
        self.base, self.folder, self.cache = base, folder, {}

    def __call__(self, service):
        if service not in self.cache:
            self.cache[service] = schema_of(
                f"{self.base}/services/ws/{service}?wsdl", os.path.join(self.folder, service)
            )
        return self.cache[service]


def schema_of(wsdl_url: str, folder: str) -> etree.XMLSchema:
    """The schema documents a WSDL imports, as files importing one another, and one
    schema that imports them all."""
    os.makedirs(folder, exist_ok=True)
    schemas = [d for d in wsdl_documents(wsdl_url).values() if etree.QName(d).localname == "schema"]
    files = {s.get("targetNamespace"): f"schema{i}.xsd" for i, s in enumerate(schemas)}
    for schema in schemas:
        for imported in schema.findall(f"{{{XSD_NS}}}import"):
            imported.set("schemaLocation", files[imported.get("namespace")])
        with open(os.path.join(folder, files[schema.get("targetNamespace")]), "wb") as f:
            f.write(etree.tostring(schema))
    main = etree.Element(f"{{{XSD_NS}}}schema", nsmap={"xs": XSD_NS})
    for namespace, name in files.items():
        etree.SubElement(
            main,
            f"{{{XSD_NS}}}import",
            namespace=namespace,
            schemaLocation=os.path.join(folder, name),
        )
    return etree.XMLSchema(main)


def invalid_against(schema: etree.XMLSchema, envelope: bytes):
    """None if the operation element in the envelope's body is valid, else why not."""
    body = etree.fromstring(envelope).find(f"{{{SOAP_ENV}}}Body")
    [payload] = [child for child in body if isinstance(child.tag, str)]
    if schema.validate(payload):
        return None
    return "; ".join(f"{e.message}" for e in schema.error_log)[:300]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def node_packages():
    """npm ``soap`` and ``strong-soap`` in tests/node/node_modules, as package-lock.json
    pins them (``npm ci``; nothing is fetched when they are there already).  Without
    node.js or npm the node clients' tests skip, unless XRUNTIME_TEST_REQUIRE_NODE=1 (as
    .ci/run sets after installing them), where their absence fails them."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if not missing:
        version = subprocess.run(
            ["node", "--version"], capture_output=True, text=True, timeout=60
        ).stdout.strip()
        if tuple(int(part) for part in version.lstrip("v").split(".")[:2]) < (20, 19):
            missing = [f"node >= 20.19 (package-lock.json's soap asks for it; {version} found)"]
    if missing:
        why = f"missing {', '.join(missing)}: the node SOAP clients cannot run"
        if os.environ.get("XRUNTIME_TEST_REQUIRE_NODE") == "1":
            pytest.fail(why + "; XRUNTIME_TEST_REQUIRE_NODE=1 requires them")
        pytest.skip(why)
    lock = os.path.join(NODE_DIR, "package-lock.json")
    installed = os.path.join(NODE_DIR, "node_modules", ".package-lock.json")
    if not os.path.exists(installed) or os.path.getmtime(installed) < os.path.getmtime(lock):
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def clients(server, request):
    made = {}

    def get(name):
        if name not in made:
            if name in ("soap", "strong-soap"):
                request.getfixturevalue("node_packages")
                made[name] = NodeSoapClient(server.base, name)
            else:
                made[name] = {"zeep": SoapClient, "suds": SudsClient}[name](server.base)
        return made[name]

    yield get
    for client in made.values():
        if isinstance(client, NodeSoapClient):
            client.close()


@pytest.fixture(scope="module")
def schemas(server, tmp_path_factory):
    return Schemas(server.base, str(tmp_path_factory.mktemp("schemas")))


@pytest.mark.parametrize("service", SERVICES)
@pytest.mark.parametrize("name", CLIENTS)
def test_life(clients, schemas, name, service):
    outcome = Life(clients(name), service, schemas).run()
    failed = {step: why for step, why in outcome.items() if why not in ("ok", "n/a")}
    assert not failed, "\n".join(
        f"{name} × {service} × {step}: {why}" for step, why in failed.items()
    )

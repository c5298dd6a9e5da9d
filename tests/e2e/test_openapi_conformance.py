"""schemathesis against a live node's JSON binding (issue 34): XRuntime's and XDemo's
operations, called with data generated from ``/services/rs/openapi.json``, answer no 5xx
and every answer conforms to the document (status, content type, headers, schema).

schemathesis 4's command line runs as a subprocess on a node of the module's own, in
every phase (coverage, fuzzing, stateful: a job started, then watched, stopped,
fetched), bounded: a fixed seed, a few examples per operation, a timeout on each
request and on the whole run. ``tests/schemathesis_hooks.py`` keeps XDemo's jobs short
and successful (a request that asks for a failure is answered 500 by design).

The checks claimed are the ones the node and the document agree on. Not claimed:

- ``negative_data_rejection``: the codec takes more than the document says, on purpose
  (docs/json-binding.md): ``null`` for an absent field, ``5.0`` for the integer 5.
- ``positive_data_acceptance``: values the document cannot tell apart are refused:
  a ``cursor`` this node did not give out, a ``callback.url`` outside ``[callbacks]
  allowed``, a service's validation beyond its types.
- ``unsupported_method``: a method other than POST is ``InvalidRequestFault`` (400,
  docs/protocol.md §6), not 405.
- the stateful resource checks (``use_after_free``, ``ensure_resource_availability``):
  every operation is a POST; no path names a resource.
"""

import os
import subprocess
import sys

import pytest

from tests.harness import ROOT, Server

SEED = 34
EXAMPLES = 10
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
)
SERVICES = ("XRuntime", "XDemo")
HOOKS = os.path.join(ROOT, "tests", "schemathesis_hooks.py")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A node serving the shipped services only."""
    srv = Server(
        str(tmp_path_factory.mktemp("conformance")), env={"XRUNTIME_SERVICE_MODULES": ""}
    ).start()
    yield srv
    srv.stop()


def operations_of(node, services):
    r = node.post("XRuntime", "getRuntimeInformation", {"withJobCounts": False})
    assert r.status_code == 200, r.text
    return {
        f"{s['name']}.{op}"
        for s in r.json()["services"]
        if s["name"] in services
        for op in s["operations"]
    }


def test_the_json_binding_conforms_to_its_openapi_document(node, tmp_path):
    operations = operations_of(node, SERVICES)
    command = [
        sys.executable, "-m", "schemathesis.cli", "run",
        f"{node.base}/services/rs/openapi.json",
        *(arg for service in SERVICES for arg in ("--include-tag", service)),
        "--checks", ",".join(CHECKS),
        "--seed", str(SEED),
        "--max-examples", str(EXAMPLES),
        "--workers", "1",
        "--request-timeout", "60",
        "--generation-database", "none",
        "--no-color",
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "SCHEMATHESIS_HOOKS": HOOKS,
        "COLUMNS": "100",  # (the summary's width, whatever the terminal)
    }
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    out = done.stdout + done.stderr
    print(out)  # the summary, under pytest -s or in a failure's report
    assert done.returncode == 0, out
    summary = out[out.index("SUMMARY") :]
    assert f"Selected: {len(operations)}/" in summary and f"Tested: {len(operations)}\n" in summary
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in summary, summary
    assert "Failures:" not in summary and "Errors:" not in summary, summary
    assert f"Seed: {SEED}" in summary
    assert "Traceback" not in node.log()

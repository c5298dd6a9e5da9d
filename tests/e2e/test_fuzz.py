"""Hostile input, generated with hypothesis, on every binding: JSON bodies,
JSON-RPC envelopes, SOAP messages and raw HTTP requests, each on a connection of its
own, against one node.

Every case must pass the properties of ``tests/fuzzing/properties.py``: answered within
2 s (a raw request may be closed instead, never left hanging), in the binding's own
fault form or as a success when the input happened to be valid, never
InternalErrorFault, no traceback, and the connection let go once the client is done.
After the fuzz (the tests of a module run in order): the node still serves a job from
start to fetch, a job finished before the fuzz still answers its result, no connection
is left half open, and the node logged no traceback.

The runs are reproducible: derandomized, without an example database.
``benchmarks/fuzz.py`` sends the same kinds of input by the hundred thousand.
"""

import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import node as fuzzing
from tests.fuzzing.exchange import LET_GO_WITHIN, exchange
from tests.fuzzing.properties import judge
from tests.fuzzing.strategies import CASES

FUZZ = settings(
    max_examples=1000,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """The fuzz node, a job it finished before the fuzz (``kept``, never sent to the
    fuzz) and, per binding, a finished job the fuzz may watch, fetch, stop or delete."""
    server = fuzzing.fuzz_server(str(tmp_path_factory.mktemp("node"))).start()
    yield SimpleNamespace(
        server=server,
        kept=fuzzing.finished_job(server),
        log_offset=len(server.log()),
        known={binding: [fuzzing.finished_job(server)] for binding in CASES},
    )
    server.stop()


@pytest.mark.parametrize("binding", list(CASES))
@FUZZ
@given(data=st.data())
def test_fuzz(node, binding, data):
    case = data.draw(CASES[binding](node.known[binding]), label="case")
    problems, _ = judge(case, exchange(node.server.port, case))
    assert not problems, problems


def test_the_node_still_serves(node):
    assert fuzzing.serves_a_job(node.server)["stepsDone"] == 2


def test_a_job_finished_before_the_fuzz_still_answers_its_result(node):
    assert fuzzing.result_of(node.server, node.kept)["stepsDone"] == 2


def test_no_connection_is_left_half_open(node):
    deadline = time.monotonic() + LET_GO_WITHIN
    while fuzzing.half_open(node.server.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not fuzzing.half_open(node.server.port)


def test_the_node_logged_no_traceback(node):
    assert not fuzzing.tracebacks_logged(node.server, node.log_offset)

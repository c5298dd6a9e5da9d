import os

import pytest

from tests.cluster.net import Cluster, missing

#: The nodes' [jobs]: timeouts that a node judging by its own clock 10 minutes off
#: would enforce at once (ahead) or far too late (behind).
EXTRA = """
[jobs]
queueing_timeout = "2m"
computation_timeout = "1m"
"""
#: One host on time, one 10 minutes ahead, one 10 minutes behind (libfaketime).
OFFSETS = {"xrt-a": None, "xrt-b": "+10m", "xrt-c": "-10m"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three hosts (network namespaces) on one PostgreSQL over a bridge, HAProxy in
    front; removed afterwards (and a crashed run's leftovers before)."""
    ran = os.environ.get("XRUNTIME_TEST_CLUSTER_RAN")
    if ran:  # (CI: hosts, HAProxy and PostgreSQL are the same for every Python)
        pytest.skip(f"the cluster tests ran earlier in this CI run, with Python {ran}")
    lacks = missing(faketime=True)
    if lacks:
        why = "a cluster needs " + ", ".join(lacks)
        if os.environ.get("XRUNTIME_TEST_REQUIRE_CLUSTER") == "1":
            pytest.fail(why + "; XRUNTIME_TEST_REQUIRE_CLUSTER=1 requires it")
        pytest.skip(why)
    cluster = Cluster(str(tmp_path_factory.mktemp("cluster")), offsets=OFFSETS, extra=EXTRA)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()

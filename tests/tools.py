"""The external tools some tests run (JAX-WS, Mono, Java): skipped without them, unless
XRUNTIME_TEST_REQUIRE_SOAP_GENERATORS=1 (as .ci/run sets after installing them), where
their absence fails the test."""

import os
import shutil

import pytest


def require(*tools, install="apt-get install jaxws libjaxws-java mono-devel"):
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        why = f"missing {', '.join(missing)} ({install})"
        if os.environ.get("XRUNTIME_TEST_REQUIRE_SOAP_GENERATORS") == "1":
            pytest.fail(why + "; XRUNTIME_TEST_REQUIRE_SOAP_GENERATORS=1 requires them")
        pytest.skip(why)

"""``xruntime.spyne_compat``: spyne 2.14 imports and builds WSDLs on Python 3.11 to 3.13.

The import of spyne happens once per interpreter, so each check runs in a fresh one.
"""

import subprocess
import sys
import textwrap

import pytest

from tests.harness import ROOT
from xruntime.support import spyne_compat


def run_fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_spyne_imports_and_builds_a_wsdl():
    done = run_fresh("""
        import collections.abc
        import sys

        import xruntime                                   # applies spyne_compat
        from lxml import etree
        from spyne.util.six.moves.collections_abc import MutableSet
        from spyne.util.six.moves.http_cookies import SimpleCookie
        from spyne.util.six.moves.urllib.parse import quote
        import spyne.protocol.soap                        # imports cgi (legacy-cgi on 3.13)

        from xruntime_services.xdemo import service
        from xruntime.bindings.wsdl import build_wsdl

        assert MutableSet is collections.abc.MutableSet and quote("a b") == "a%20b"
        # a moved module keeps its own spec, not the alias's
        assert sys.modules["http.cookies"].__spec__.name == "http.cookies"
        wsdl = etree.fromstring(build_wsdl(service, "http://127.0.0.1:1/services/ws/XDemo"))
        ns = {"w": "http://schemas.xmlsoap.org/wsdl/"}
        print(sorted(op.get("name") for op in wsdl.iterfind("w:portType/w:operation", ns)))
    """)
    assert done.returncode == 0, done.stderr
    assert "'startSimulate'" in done.stdout and "'fetchSimulateResponse'" in done.stdout


@pytest.mark.skipif(sys.version_info < (3, 12), reason="spyne imports as shipped on 3.11")
def test_without_it_spyne_does_not_import():
    """Why the module exists: stock spyne 2.14 fails on 3.12+ (delete the module when
    this test fails, i.e. when spyne imports by itself)."""
    done = run_fresh("import spyne")
    assert done.returncode != 0
    assert "No module named 'spyne.util.six.moves'" in done.stderr


def test_apply_again_is_harmless():
    spyne_compat.apply()
    spyne_compat.apply()
    from spyne.util.six.moves.urllib.parse import unquote

    assert unquote("a%20b") == "a b"
    importer = type(sys.modules[spyne_compat.SIX]._importer)
    assert hasattr(importer, "find_spec") == (sys.version_info >= (3, 12))

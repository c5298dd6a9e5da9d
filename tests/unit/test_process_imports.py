"""What each kind of a node's process imports, checked where a process does without a
part: every module imported stays in its memory for the process's life (a node holds
it once per process).  Each check runs in a fresh interpreter."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_after(statement: str, names: list[str]) -> list[str]:
    """Which of ``names`` are in ``sys.modules`` after ``statement``, in a fresh
    interpreter run from the tree's root."""
    code = textwrap.dedent(
        f"""
        import sys
        {statement}
        print(" ".join(n for n in {names!r} if n in sys.modules))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_the_main_process_does_not_load_the_http_side():
    # (node's health goes to the HTTP processes without /readyz's page and the ASGI layer;
    # the callbacks process, started only once targets are allowed, imports its delivery)
    assert (
        imported_after(
            "import xruntime.cli, xruntime.serving.node",
            [
                "uvicorn",
                "xruntime.web.asgi",
                "xruntime.bindings.json_binding",
                "werkzeug",
                "xruntime.callbacks.delivery",
                "standardwebhooks",
            ],
        )
        == []
    )


def test_a_new_database_is_made_without_alembic(tmp_path):
    # (Alembic, Mako and Pygments would stay in the main process for one row written once)
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert (
        imported_after(
            f"from xruntime.store import open_store; open_store({url!r}).close()",
            ["alembic", "mako", "pygments"],
        )
        == []
    )


WORKER = """
import multiprocessing.connection, xruntime.engine.worker
from xruntime.author.registry import discover
for service in discover().values():
    for module in service.worker_imports:
        __import__(module)
"""

SPYNE_UTIL = """
import xruntime, spyne.util, urllib.request
assert spyne.util.urlopen is not urllib.request.urlopen
assert type(spyne.util.Request("http://127.0.0.1/")) is urllib.request.Request
"""


def test_a_worker_process_loads_no_http_client_nor_openssl():
    # (spyne.util takes two names of urllib.request, which brings http.client, ssl and
    # hashlib's OpenSSL: 6 MB in each worker; support.spyne_compat gives it stand-ins)
    imported = imported_after(
        f"exec({WORKER!r})", ["urllib.request", "http.client", "ssl", "hashlib"]
    )
    assert imported == []


def test_the_command_line_loads_urllib_request_only_to_call_a_server():
    assert imported_after("import xruntime.cli", ["urllib.request", "http.client"]) == []


def test_spyne_util_s_names_of_urllib_request_call_the_real_module():
    assert imported_after(f"exec({SPYNE_UTIL!r})", ["urllib.request"]) == ["urllib.request"]

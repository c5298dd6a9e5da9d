"""A testing kit for service authors: a real node with your service, and a client per
binding.

::

    from xruntime.testing import Node, run_job

    def test_count_words(tmp_path):
        with Node(tmp_path) as node:                   # python -m xruntime serve, SQLite
            for client in node.clients():              # JSON, JSON-RPC, SOAP (zeep)
                job, response = run_job(client, "XWords", "countWords", {"text": "a b a"})
                assert job["status"] == "SUCCEEDED"

With pytest the same comes as fixtures (``xruntime.testing.plugin``, loaded by pytest on
its own once xruntime is installed): ``xruntime_node`` (one node per test module),
``json_client``, ``jsonrpc_client``, ``soap_client`` and ``xruntime_client`` (each test
once per binding).  Every call goes through real HTTP to a real node, which finds your
service as it would in production: by its entry point in the group ``xruntime.services``
(or a module named in ``XRUNTIME_SERVICE_MODULES``).  The clients need ``requests`` and,
for SOAP, ``zeep``: ``pip install 'xruntime[testing]'``.
"""

from .clients import BINDINGS, Fault, JsonClient, JsonRpcClient, SoapClient, client_for
from .jobs import TERMINAL, fetch, run_job, wait_done
from .node import Node, NodeFailed

__all__ = [
    "Node",
    "NodeFailed",
    "BINDINGS",
    "Fault",
    "JsonClient",
    "JsonRpcClient",
    "SoapClient",
    "client_for",
    "TERMINAL",
    "run_job",
    "wait_done",
    "fetch",
]

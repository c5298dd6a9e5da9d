"""watchJob on a finished job: calls per second over SOAP, JSON and JSON-RPC.

Each client process sends the same prepared request on its own keep-alive connection
(the SOAP one is the envelope zeep sends for it), so the figures are the server's cost
per call in each binding, with 1 and with 8 concurrent clients.

    python benchmarks/bindings.py [--seconds 5] [--clients 1 8]

Target: the SOAP overhead over JSON stays within 3x.
"""

import argparse
import http.client
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.parallel import per_second  # noqa: E402
from tests.harness import Server  # noqa: E402

SOAP_WATCH = """<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"
               xmlns:x="http://xruntime.org/xserver/xruntime">
  <soap:Body><x:watchJob><id>{id}</id></x:watchJob></soap:Body>
</soap:Envelope>"""


def requests_for(job_id):
    """(path, body, content type, expected marker) per binding."""
    return {
        "json": (
            "/services/rs/XRuntime/watchJob",
            json.dumps({"id": job_id}),
            "application/json",
            b'"SUCCEEDED"',
        ),
        "soap": (
            "/services/ws/XRuntime",
            SOAP_WATCH.format(id=job_id),
            "text/xml; charset=utf-8",
            b">SUCCEEDED<",
        ),
        "jsonrpc": (
            "/services/rpc/XRuntime",
            json.dumps({"jsonrpc": "2.0", "method": "watchJob", "params": {"id": job_id}, "id": 1}),
            "application/json",
            b'"SUCCEEDED"',
        ),
    }


def watch_step(port, path, body, ctype, marker):
    """One prepared watchJob call on this process's own connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = body.encode()
    headers = {"Content-Type": ctype}

    def step():
        conn.request("POST", path, body, headers)
        answer = conn.getresponse().read()
        if marker not in answer:
            raise RuntimeError(answer[:300])

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = Server(folder).start()
        try:
            job = server.start_job(durationMs=0)
            server.wait_done(job["id"])
            rates = {}
            for n in args.clients:
                for binding, request in requests_for(job["id"]).items():
                    rates[binding, n] = per_second(
                        watch_step, (server.port, *request), n, args.seconds
                    )
                    print(
                        f"watchJob (finished job) over {binding:8s} with {n} client(s): "
                        f"{rates[binding, n]:.0f} calls/s"
                    )
                print(
                    f"SOAP costs {rates['json', n] / rates['soap', n]:.2f}x JSON with {n} client(s)"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()

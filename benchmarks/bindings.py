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
import multiprocessing
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.harness import Server  # noqa: E402

SOAP_WATCH = """<?xml version="1.0" encoding="utf-8"?>
<soap:Envelope xmlns:soap="http://schemas.xmlsoap.org/soap/envelope/"
               xmlns:x="http://xruntime.org/xserver/xruntime" xmlns:t="http://xruntime.org/xserver/types">
  <soap:Body><x:watchJob><t:id>{id}</t:id></x:watchJob></soap:Body>
</soap:Envelope>"""


def requests_for(job_id):
    """(path, body, content type, expected marker) per binding."""
    return {
        "json": ("/services/rs/XRuntime/watchJob", json.dumps({"id": job_id}), "application/json",
                 b'"SUCCEEDED"'),
        "soap": ("/services/ws/XRuntime", SOAP_WATCH.format(id=job_id), "text/xml; charset=utf-8",
                 b">SUCCEEDED<"),
        "jsonrpc": ("/services/rpc/XRuntime", json.dumps({"jsonrpc": "2.0", "method": "watchJob",
                                                          "params": {"id": job_id}, "id": 1}),
                    "application/json", b'"SUCCEEDED"'),
    }


def _client(port, path, body, ctype, marker, seconds, start_at, results):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = body.encode()
    headers = {"Content-Type": ctype}
    while time.time() < start_at:
        time.sleep(0.001)
    done, end = 0, start_at + seconds
    while time.time() < end:
        conn.request("POST", path, body, headers)
        answer = conn.getresponse().read()
        if marker not in answer:
            raise RuntimeError(answer[:300])
        done += 1
    results.put(done)


def calls_per_second(port, request, clients, seconds):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    start_at = time.time() + 1.5
    procs = [ctx.Process(target=_client, args=(port, *request, seconds, start_at, results))
             for _ in range(clients)]
    for p in procs:
        p.start()
    total = sum(results.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


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
                    rates[binding, n] = calls_per_second(server.port, request, n, args.seconds)
                    print(f"watchJob (finished job) over {binding:8s} with {n} client(s): "
                          f"{rates[binding, n]:.0f} calls/s")
                print(f"SOAP costs {rates['json', n] / rates['soap', n]:.2f}x JSON with {n} client(s)")
        finally:
            server.stop()


if __name__ == "__main__":
    main()

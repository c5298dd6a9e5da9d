"""The node a fuzz runs against, and what must still hold after the fuzz.

Now and then the fuzz sends a valid startSimulate, of any size: the node's jobs are
therefore bounded (one worker, a 2 s computation timeout, a 1 s queueing timeout, 50
queued at most, no retries: a ``retryLaterMs`` of days would otherwise keep a job
queued for days) so that whatever the fuzz started is soon over and the node can run a
job of ours again (a 20 ms job of ours: 250 ms cut it short on a machine loaded 4
times over).  Its requests are limited to ``MAX_REQUEST_BYTES``, so that the
fuzz sends bodies over the limit too.
"""

import time

from tests.harness import Server
from tests.processes import tcp_sockets

MAX_REQUEST_BYTES = 65536
JOBS = """
[jobs]
computation_timeout = "2s"
queueing_timeout = "1s"
max_queued = 50
max_retries = 0
"""
CLOSE_WAIT = "08"


def fuzz_server(folder, **kwargs) -> Server:
    return Server(
        folder,
        workers=1,
        extra=JOBS,
        server_keys={"max_request_bytes": MAX_REQUEST_BYTES},
        **kwargs,
    )


def finished_job(server, timeout=30) -> str:
    """The id of a job run to its end (SUCCEEDED, stepsDone 2), not yet fetched.  It
    is started once the jobs a fuzz started are over (queued behind them, it would
    outwait the node's queueing timeout)."""
    deadline = time.monotonic() + timeout
    while busy(server):
        assert time.monotonic() < deadline, (
            f"the jobs the fuzz started are not over: {busy(server)}"
        )
        time.sleep(0.2)
    job_id = server.start_job(steps=2, durationMs=20)["id"]
    job = server.wait_done(job_id)
    assert job["status"] == "SUCCEEDED", job
    return job_id


def result_of(server, job_id) -> dict:
    return server.call("XDemo", "fetchSimulateResponse", {"id": job_id})


def serves_a_job(server) -> dict:
    """startSimulate → watchJob until the end → fetchSimulateResponse, as any client
    does; answers the result (it fails if any step does not work)."""
    return result_of(server, finished_job(server))


def busy(server) -> dict:
    """{status: count} of the jobs queued or running."""
    counts = server.call("XRuntime", "getRuntimeInformation", {})["jobs"]
    return {
        c["status"]: c["count"]
        for c in counts
        if c["status"] in ("QUEUING", "RUNNING", "STOPPING") and c["count"]
    }


def half_open(port) -> list:
    """The server's connections that the client closed and the server did not."""
    return [s for s in tcp_sockets(port) if s[1] == CLOSE_WAIT]


def tracebacks_logged(server, since: int = 0) -> list:
    """Tracebacks the node wrote to its log after offset ``since``: each is a bug,
    whatever the client was answered."""
    text, found = server.log()[since:], []
    at = text.find("Traceback (most recent call last)")
    while at >= 0:
        logged = text.rfind("\n", 0, max(0, at - 1)) + 1  # from the line that logged it
        found.append(text[logged : at + 2000])
        at = text.find("Traceback (most recent call last)", at + 1)
    return found

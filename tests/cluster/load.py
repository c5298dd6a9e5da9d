"""Clients of a cluster, through HAProxy, as client programs would be: each starts an
XDemo job, watches it until it is done and fetches it, again and again.  A call that
got no answer (a connection cut or refused, HAProxy's own 502/503/504) or a "try
again" (TemporarilyUnavailableFault) is made again after a moment; any other answer is
recorded as a fault.  ``served`` holds the time of every answered call, to see whether
the clients were served all along.

And what the tests and the benchmark read from the database directly."""

import threading
import time
from itertools import pairwise

import requests
from sqlalchemy import text

TERMINAL = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")
TRY_AGAIN = "TemporarilyUnavailableFault"


class Load:
    def __init__(self, base, clients, **job):
        self.base, self.job = base, job
        self.ids, self.fetched, self.faults, self.served = [], set(), [], []
        self.retried = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, daemon=True, name=f"client {i}")
            for i in range(clients)
        ]

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self, timeout=120):
        """Each client ends after the job it is on (fetched)."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.1, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "a client is still on its job"

    def max_gap(self, since, until=None) -> float:
        """The longest time between answered calls in [since, until] (monotonic s)."""
        with self._lock:
            times = sorted(t for t in self.served if t >= since and (until is None or t <= until))
        edges = [since] + times + ([until] if until is not None else [])
        return max((b - a for a, b in pairwise(edges)), default=0.0)

    def _call(self, session, service, operation, body):
        """The answer; None after a fault (recorded)."""
        while True:
            try:
                r = session.post(
                    f"{self.base}/services/rs/{service}/{operation}", json=body, timeout=70
                )
            except requests.RequestException:
                r = None  # no answer: cut, refused, reset
            with self._lock:
                if r is not None and r.status_code == 200:
                    self.served.append(time.monotonic())
                    return r.json()
                if (
                    r is None
                    or r.status_code in (502, 503, 504)
                    and _fault_type(r) in (None, TRY_AGAIN)
                ):
                    self.retried += 1
                else:
                    self.faults.append((operation, r.status_code, r.text[:300]))
                    return None
            time.sleep(0.2)

    def _run(self):
        session = requests.Session()
        session.trust_env = False
        while not self._stop.is_set():
            job = self._call(session, "XDemo", "startSimulate", self.job)
            if job is None:
                continue
            with self._lock:
                self.ids.append(job["id"])
            while job is not None and job["status"] not in TERMINAL:
                job = self._call(
                    session, "XRuntime", "watchJob", {"id": job["id"], "maximumPollingPeriod": 5000}
                )
            if job is None:
                continue
            if job["status"] != "SUCCEEDED":
                with self._lock:
                    self.faults.append(("watchJob", job["id"], job["status"]))
                continue
            if self._call(session, "XDemo", "fetchSimulateResponse", {"id": job["id"]}) is not None:
                with self._lock:
                    self.fetched.add(job["id"])


def _fault_type(response):
    try:
        return response.json().get("faultInfo", {}).get("$type")
    except ValueError:
        return None  # HAProxy's own page


# --------------------------------------------------------------------------- the database


def jobs_on(engine, node, statuses=("RUNNING", "STOPPING")) -> set:
    with engine.connect() as conn:
        return {
            row[0]
            for row in conn.execute(
                text("SELECT id FROM jobs WHERE node = :node AND status = ANY(:statuses)"),
                {"node": node, "statuses": list(statuses)},
            )
        }


def states(engine, ids=None) -> dict:
    """id → (status, node, attempts, finished_at, md5 of the result) of the jobs (all, or
    ``ids``)."""
    query = "SELECT id, status, node, attempts, finished_at, md5(result) FROM jobs"
    with engine.connect() as conn:
        rows = conn.execute(
            text(query + (" WHERE id = ANY(:ids)" if ids is not None else "")),
            {"ids": list(ids or ())},
        )
        return {row[0]: tuple(row[1:]) for row in rows}


def run_times(engine, ids) -> dict:
    """id → ms from the start of its last run to its outcome."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, finished_at - started_at FROM jobs WHERE id = ANY(:ids)"),
            {"ids": list(ids)},
        )
        return dict(rows.all())


def runs(engine) -> dict:
    """id → the nodes its runs were on, in order (one per RUNNING event)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT j.id, e.node FROM job_events e JOIN jobs j ON j.seq = e.job_seq "
                "WHERE e.status = 'RUNNING' ORDER BY e.seq"
            )
        )
        found = {}
        for job_id, node in rows:
            found.setdefault(job_id, []).append(node)
        return found


def events(engine, ids) -> dict:
    """id → its events' messages."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT j.id, e.status || ': ' || e.message "
                "FROM job_events e JOIN jobs j ON j.seq = e.job_seq "
                "WHERE j.id = ANY(:ids) ORDER BY e.seq"
            ),
            {"ids": list(ids)},
        )
        found = {}
        for job_id, message in rows:
            found.setdefault(job_id, []).append(message)
        return found


def wait_until(condition, timeout, what, period=0.2):
    """condition()'s first true answer, within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        answer = condition()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(period)

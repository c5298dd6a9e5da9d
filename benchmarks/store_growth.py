"""How request times grow with the number of stored jobs, and what the retention cleaner
costs the requests while it erases a million expired jobs.

A real node (``python -m xruntime serve``, 2 workers, SQLite) is measured over real HTTP
(JSON binding, one keep-alive connection, one request at a time) with 10**3, 10**5 and
10**6 jobs stored (``--sizes``), each size in a store of its own (a folder under one
temporary folder).

Each store is filled once, directly, with SQLAlchemy Core in big transactions (no node
running), with what the node itself would have written (``store/statements.py``
``INSERT_KEYS`` and the columns the later changes write; ``pack``ed payloads): XDemo
jobs, 10 % FAILED (ProcessingFault, fetched), 40 % SUCCEEDED unfetched (stopped: an
intermediate result), 50 % SUCCEEDED fetched, each with 10 rows in ``job_events``
(queued, running, two retries planned after a TransientFault, a hand-back, stop asked
or fetched, ...), and 20 QUEUING jobs waiting for a retry due in an hour (older than
every new job: a claim passes them).  The ``job_queued`` trigger is dropped during the
fill (its events are written explicitly, with the jobs' own times) and installed again
after it.  Stored jobs finished between 29 and 7 days ago; the node keeps them
(``unfetched_retention`` and ``fetched_retention`` "30d", ``cleanup_interval`` "1h", so
that no cleaner pass runs while requests are timed).

The sizes take turns (``--rounds``, default 3: a node start on each store per round,
a warm-up, then a third of the requests), so that a slow spell of the machine (2 cores,
shared with the client and whatever else runs) falls on every size alike.  Per size,
``--requests`` (default 1000) of each:

- watchJob of a random stored finished job (answers at once);
- fetchSimulateResponse of a random stored SUCCEEDED job fetched before (a read), and of
  one never fetched (first fetch: a read and the write that stamps it, with its event;
  at 10**3 there are only about 400 such jobs);
- getJobEvents of a random stored finished job (10 events);
- listJobs, first page (limit 100): no filter; service XDemo; status SUCCEEDED; status
  SUCCEEDED + FAILED; status QUEUING + RUNNING;
- startSimulate (durationMs 0; the node's workers run the jobs meanwhile);
- start → watch → fetch cycles (``--requests`` / 5), and from their events the time from
  queued to RUNNING (the claim, end to end, by the database's clock, in whole ms);
- with the node stopped, in this process: ``JobStore.claim`` of one newly queued job
  (the call itself), the ``create`` before it, a retention cleaner pass with nothing
  expired (``erase_expired``) and a ``create`` made while that pass runs (it waits if
  the pass holds the write lock).

Median (p50), p99 and max per operation and size, and the growth of p50 and p99 from
the smallest size to the largest.  Target: growth <= 1.2x from 10**3 to
10**6 (judged on p50).

Cleanup (``--cleanup``, default 100000 1000000), after the growth figures, on the store
of that size: the node runs with the configuration above; four client threads send,
each on its own connection with 10 ms between requests, watchJob of a recent finished
job, startSimulate, fetchSimulateResponse of a recent fetched job and listJobs (first
page); one 10-minute job runs, holding a lease.  After ``--baseline`` seconds (the
figures without cleanup) the file is edited to ``unfetched_retention`` and
``fetched_retention`` "5d" and ``cleanup_interval`` "1s": the node re-reads it and its
cleaner erases every stored job (10 events each).  Printed: how long the cleanup took,
each loop's p50, p99 and max latency and the requests over 100 ms, with and without
cleanup, queued → RUNNING and RUNNING → SUCCEEDED of the jobs started meanwhile (from
their events), and the lowest remaining lease of the running job.  Target: no
request stalled more than 100 ms by the cleaner erasing 10**6 expired jobs;
with 100 000 expired jobs, no request slower than without cleanup.

    python benchmarks/store_growth.py [--sizes 1000 100000 1000000] [--requests 1000]
                                      [--rounds 3] [--cleanup 100000 1000000]
                                      [--baseline 10] [--database-url URL] [--keep]

The stores take about 1.7 GB of disk (10**6 jobs with 10**7 events: 1.5 GB); the
folder is removed at the end unless ``--keep``.  ``--database-url`` runs on another
database, one size per run; it must be a database of its own (the script adds and
erases millions of rows); only SQLite has been measured.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    case,
    create_engine,
    event,
    func,  # noqa: E402
    insert,
    literal,
    select,
    text,
    union_all,
)
from sqlalchemy.engine import make_url  # noqa: E402

from tests.harness import Server, free_port, write_config  # noqa: E402
from xruntime.payload.form import pack  # noqa: E402
from xruntime.store import JobRecord, now_ms  # noqa: E402
from xruntime.store.events import install_triggers  # noqa: E402
from xruntime.store.schema import job_events, jobs, lane_of  # noqa: E402
from xruntime.store.sql import JobStore  # noqa: E402

DAY_MS = 86_400_000
NODE = "vm:50000"  # the node the stored jobs ran on
QUEUED_WAITING = 20  # stored QUEUING jobs, waiting for a retry
CHUNK = 50_000  # jobs per fill transaction
KEEP = '[jobs]\nunfetched_retention = "30d"\nfetched_retention = "30d"\ncleanup_interval = "1h"\n'
ERASE = '[jobs]\nunfetched_retention = "5d"\nfetched_retention = "5d"\ncleanup_interval = "1s"\n'
STALL_MS = 100.0
T0 = time.time()


def say(text_):
    print(f"[{time.time() - T0:6.1f}s] {text_}", flush=True)


# ---------------------------------------------------------------------- the fill

_RETRIES = [
    (0, "QUEUING", 0, None, "queued"),
    (3, "RUNNING", 1, NODE, "running on worker 0"),
    (
        900,
        "QUEUING",
        1,
        NODE,
        "retry 1 of 3 planned in 30.0 s: TransientFault: the upstream service timed out",
    ),
    (30_900, "RUNNING", 2, NODE, "running on worker 1"),
    (
        31_800,
        "QUEUING",
        2,
        NODE,
        "retry 2 of 3 planned in 60.0 s: TransientFault: the upstream service timed out",
    ),
    (91_800, "RUNNING", 3, NODE, "running on worker 0"),
    (92_400, "QUEUING", 2, NODE, "handed back: its node shut down"),
    (95_000, "RUNNING", 3, NODE, "running on worker 1"),
]
#: Each kind of stored job's events: (ms after queued_at, status, attempt, node, message).
EVENTS = {
    "fetched": _RETRIES
    + [(96_000, "SUCCEEDED", 3, NODE, "succeeded"), (400_000, "SUCCEEDED", 3, NODE, "fetched")],
    "stopped": _RETRIES
    + [(95_500, "STOPPING", 3, NODE, "stop asked"), (96_000, "SUCCEEDED", 3, NODE, "succeeded")],
    "failed": _RETRIES
    + [
        (96_000, "FAILED", 3, NODE, "failed: ProcessingFault"),
        (400_000, "FAILED", 3, NODE, "fetched"),
    ],
    "waiting": _RETRIES[:2]
    + [
        (
            900,
            "QUEUING",
            1,
            NODE,
            "retry 1 of 3 planned in 3600.0 s: TransientFault: the upstream service timed out",
        )
    ],
}
RESULT = '{"stepsDone":%d,"payload":"%s"}'
STOPPED = (
    '{"resultLimitations":[{"$type":"IntermediateResponseLimitation","message":"the job was '
    'stopped; this is an intermediate result","reason":"REQUEST_STOPPED"}],'
    '"stepsDone":%d,"payload":""}'
)
FAULT = (
    '{"message":"the simulation failed at step %d, as the request asked","faultInfo":{"$type":'
    '"ProcessingFault","hint":"Send the request without failAtStep to let it succeed."}}'
)
PROGRESS = '{"$type":"BulkProgress","remaining":%d,"successful":%d,"failed":0}'


def _kind(position: int) -> str:
    if position % 50 == 7 and position < 50 * QUEUED_WAITING:
        return "waiting"
    return {0: "failed", 1: "stopped", 2: "stopped", 3: "stopped", 4: "stopped"}.get(
        position % 10, "fetched"
    )


def job_row(position: int, queued_at: int, not_before_waiting: int, rng) -> dict:
    """One stored job as the node would have written it, by its kind."""
    kind = _kind(position)
    steps = rng.randint(1, 10)
    size = rng.randrange(0, 200)
    request = {
        "durationMs": rng.randrange(0, 60_000, 100),
        "steps": steps,
        "resultSize": size,
        "transientFailures": 2,
    }
    row = dict(
        id=str(uuid.uuid4()),
        service="XDemo",
        operation="simulate",
        fetch_type="SimulateResponse",
        status="SUCCEEDED",
        request=None,
        result=None,
        fault=None,
        progress=None,
        queued_at=queued_at,
        started_at=queued_at + 95_000,
        finished_at=queued_at + 96_000,
        first_fetched_at=queued_at + 400_000,
        attempts=3,
        node=NODE,
        lease_until=None,
        queueing_timeout=None,
        computation_timeout=None,
        owner="",
        lane=lane_of("XDemo", ""),
        not_before=queued_at + 91_800,
        retries=2,
        event_note="fetched",
    )
    if kind == "failed":
        at = rng.randint(1, steps)
        request["failAtStep"] = at
        row.update(
            status="FAILED",
            fault=pack(FAULT % at),
            progress=pack(PROGRESS % (steps - at + 1, at - 1)),
        )
    elif kind == "stopped":
        done = rng.randint(1, steps)
        row.update(
            result=pack(STOPPED % done),
            progress=pack(PROGRESS % (steps - done, done)),
            first_fetched_at=None,
            event_note="succeeded",
        )
    elif kind == "fetched":
        payload = ("xruntime-demo-payload/" * (size // 22 + 1))[:size]
        row.update(result=pack(RESULT % (steps, payload)), progress=pack(PROGRESS % (0, steps)))
    else:  # waiting for its retry
        row.update(
            status="QUEUING",
            started_at=None,
            finished_at=None,
            first_fetched_at=None,
            attempts=1,
            node=None,
            not_before=not_before_waiting,
            retries=1,
            event_note=EVENTS["waiting"][-1][4],
        )
    row["request"] = pack(json.dumps(request, separators=(",", ":")))
    return row


def _kind_of_row():
    return case(
        (jobs.c.status == "QUEUING", literal("waiting")),
        (jobs.c.status == "FAILED", literal("failed")),
        (jobs.c.first_fetched_at.is_(None), literal("stopped")),
        else_=literal("fetched"),
    )


def _template():
    """Every kind's events as a subquery (kind, k, dt, status, attempt, node, message)."""
    rows = [
        select(
            literal(kind, String).label("kind"),
            literal(k, Integer).label("k"),
            literal(dt, BigInteger).label("dt"),
            literal(status, String).label("status"),
            literal(attempt, Integer).label("attempt"),
            literal(node, String).label("node"),
            literal(message, String).label("message"),
        )
        for kind, events in EVENTS.items()
        for k, (dt, status, attempt, node, message) in enumerate(events)
    ]
    return union_all(*rows).subquery("template")


def fill_engine(url):
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection, _record):
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA synchronous=OFF")  # a scratch database: speed over safety
            cur.execute("PRAGMA cache_size=-1000000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    return engine


class Fill:
    """Adds stored jobs (the node stopped); positions number them across fills, so that
    time stamps grow with seq as in a real store."""

    def __init__(self, url, positions_in_all: int):
        self.url = url
        self.position = 0
        now = now_ms()
        self.first_queued = now - 29 * DAY_MS
        self.step_ms = max(1, (22 * DAY_MS) // max(1, positions_in_all))
        self.not_before = now + 3_600_000
        self.rng = random.Random(20261123)

    def count(self, engine) -> int:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(jobs)).scalar()

    def to(self, size: int):
        JobStore(self.url).close()  # the schema, as a node makes it
        engine = fill_engine(self.url)
        sqlite = engine.dialect.name == "sqlite"
        try:
            have = self.count(engine)
            if have >= size:
                return
            say(
                f"filling: {have} → {size} stored jobs "
                f"({size - have} jobs, ~{10 * (size - have)} events)"
            )
            started = time.time()
            with engine.begin() as conn:  # the events are written below, with the jobs' times
                conn.execute(
                    text(
                        "DROP TRIGGER IF EXISTS job_queued"
                        if sqlite
                        else "ALTER TABLE jobs DISABLE TRIGGER job_event"
                    )
                )
            template = _template()
            columns = [c.name for c in jobs.c if c.name != "seq"]
            sql = (
                f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            )
            left, reported = size - have, time.time()
            while left > 0:
                n = min(CHUNK, left)
                rows = [
                    job_row(p, self.first_queued + p * self.step_ms, self.not_before, self.rng)
                    for p in range(self.position, self.position + n)
                ]
                with engine.begin() as conn:
                    last = conn.execute(select(func.coalesce(func.max(jobs.c.seq), 0))).scalar()
                    if sqlite:  # the driver's executemany: 2.5x SQLAlchemy's
                        conn.exec_driver_sql(sql, [tuple(r[c] for c in columns) for r in rows])
                    else:
                        conn.execute(insert(jobs), rows)
                    made = (
                        select(
                            jobs.c.seq,
                            jobs.c.queued_at + template.c.dt,
                            template.c.status,
                            template.c.attempt,
                            template.c.node,
                            template.c.message,
                        )
                        .select_from(jobs.join(template, template.c.kind == _kind_of_row()))
                        .where(jobs.c.seq > last)
                        .order_by(jobs.c.seq, template.c.k)
                    )
                    conn.execute(
                        insert(job_events).from_select(
                            ["job_seq", "time", "status", "attempt", "node", "message"], made
                        )
                    )
                self.position += n
                left -= n
                if time.time() - reported > 15:
                    reported = time.time()
                    say(f"  {size - left} stored jobs")
            with engine.begin() as conn:
                if sqlite:
                    install_triggers(conn, "sqlite")
                else:
                    conn.execute(text("ALTER TABLE jobs ENABLE TRIGGER job_event"))
            if sqlite:
                with engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            with engine.connect() as conn:
                events_ = conn.execute(select(func.count()).select_from(job_events)).scalar()
            disk = ""
            if sqlite:
                disk = f", {os.path.getsize(make_url(self.url).database) / 1e6:.0f} MB on disk"
            say(
                f"filled in {time.time() - started:.1f} s: "
                f"{self.count(engine)} jobs, {events_} events{disk}"
            )
        finally:
            engine.dispose()


def sample_ids(url, count, rng):
    """Random stored jobs: {"finished": ids, "fetched": SUCCEEDED ids fetched before,
    "unfetched": SUCCEEDED ids never fetched}."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            top = conn.execute(select(func.max(jobs.c.seq))).scalar() or 0
            low = conn.execute(select(func.min(jobs.c.seq))).scalar() or 0
            seqs = rng.sample(range(low, top + 1), min(top - low + 1, 6 * count))
            rows = []
            for i in range(0, len(seqs), 500):
                rows += conn.execute(
                    select(jobs.c.id, jobs.c.status, jobs.c.first_fetched_at).where(
                        jobs.c.seq.in_(seqs[i : i + 500])
                    )
                ).all()
    finally:
        engine.dispose()
    rng.shuffle(rows)
    done = [r for r in rows if r.status in ("SUCCEEDED", "FAILED")]
    return {
        "finished": [r.id for r in done][: count * 2],
        "fetched": [r.id for r in done if r.status == "SUCCEEDED" and r.first_fetched_at][
            : count * 2
        ],
        "unfetched": [r.id for r in done if r.status == "SUCCEEDED" and not r.first_fetched_at],
    }


# ---------------------------------------------------------------------- the client


class Client:
    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=70)

    def call(self, service, operation, body):
        """(HTTP status, answer); the connection is made anew after an error."""
        try:
            self.conn.request(
                "POST",
                f"/services/rs/{service}/{operation}",
                json.dumps(body),
                {"Content-Type": "application/json"},
            )
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=70)
            raise
        return response.status, (json.loads(data) if data else None)

    def ok(self, service, operation, body):
        status, answer = self.call(service, operation, body)
        if status != 200:
            raise RuntimeError(f"{operation}: {status} {str(answer)[:300]}")
        return answer


def timed(fn, bodies):
    """Milliseconds of each ``fn(body)``."""
    out = []
    for body in bodies:
        t = time.perf_counter()
        fn(body)
        out.append((time.perf_counter() - t) * 1000)
    return out


def spaced(n: int) -> str:
    return f"{n:,}".replace(",", " ")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(-(-p * len(values) // 100)) - 1))]


LISTS = [
    ("listJobs, first page", {}),
    ("listJobs, service XDemo", {"service": "XDemo"}),
    ("listJobs, status SUCCEEDED", {"status": ["SUCCEEDED"]}),
    ("listJobs, status SUCCEEDED+FAILED", {"status": ["SUCCEEDED", "FAILED"]}),
    ("listJobs, status QUEUING+RUNNING", {"status": ["QUEUING", "RUNNING"]}),
]


def cycle(client):
    job = client.ok("XDemo", "startSimulate", {"durationMs": 0})
    while job["status"] not in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"):
        job = client.ok("XRuntime", "watchJob", {"id": job["id"], "progressUpdatePeriod": 250})
    client.ok("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    return job["id"]


def measure_http(server, ids, n, rng, first_fetches):
    """{operation: [ms]} of ``n`` requests each over HTTP, and the ids of the cycles' jobs.
    The read-only operations take turns in five parts, so that a passing disturbance
    (the machine's 2 cores are shared with the client and anything else running) spreads
    over all of them."""
    c = Client(server.port)
    pick = lambda pool, k: [rng.choice(pool) for _ in range(k)]  # noqa: E731
    warm = max(20, n // 10)
    for body in pick(ids["finished"], warm):  # warm up every path
        c.ok("XRuntime", "watchJob", {"id": body})
        c.ok("XDemo", "fetchSimulateResponse", {"id": rng.choice(ids["fetched"])})
        c.ok("XRuntime", "getJobEvents", {"id": body})
    for _, query in LISTS:
        for _ in range(max(5, warm // 10)):
            c.ok("XRuntime", "listJobs", dict(query, limit=100))
    operations = [
        (
            "watchJob (finished job)",
            lambda i: c.ok("XRuntime", "watchJob", {"id": i}),
            pick(ids["finished"], n),
        ),
        (
            "fetch (fetched before)",
            lambda i: c.ok("XDemo", "fetchSimulateResponse", {"id": i}),
            pick(ids["fetched"], n),
        ),
        (
            "fetch (first fetch)",
            lambda i: c.ok("XDemo", "fetchSimulateResponse", {"id": i}),
            first_fetches,
        ),
        (
            "getJobEvents (10 events)",
            lambda i: c.ok("XRuntime", "getJobEvents", {"id": i}),
            pick(ids["finished"], n),
        ),
    ] + [
        (name, lambda q: c.ok("XRuntime", "listJobs", q), [dict(query, limit=100)] * n)
        for name, query in LISTS
    ]
    found = {name: [] for name, _, _ in operations}
    parts = 5
    for r in range(parts):
        for name, fn, bodies in operations:
            found[name] += timed(
                fn, bodies[len(bodies) * r // parts : len(bodies) * (r + 1) // parts]
            )
    started = []
    found["startSimulate"] = timed(
        lambda b: started.append(c.ok("XDemo", "startSimulate", b)["id"]), [{"durationMs": 0}] * n
    )
    server.wait_done(started[-1])  # the workers ran what was started (first in, first out)
    made = []
    found["cycle start→watch→fetch"] = timed(
        lambda _: made.append(cycle(c)), range(max(10, n // 5))
    )
    return found, made


def queued_to(store, job_ids, status="RUNNING", since="QUEUING"):
    """ms from each job's first ``since`` event to its first ``status`` event."""
    out = []
    for job_id in job_ids:
        events_ = store.events(job_id) or []
        first = {}
        for e in events_:
            first.setdefault(e["status"], e["time"])
        if since in first and status in first:
            out.append(float(first[status] - first[since]))
    return out


def measure_store(url, n):
    """Store-level, the node stopped: create, claim, and a cleaner pass with nothing expired."""
    store = JobStore(url)
    found = {"create (store)": [], "claim (store)": []}
    warm = max(20, n // 10)
    try:
        while True:  # a job the node handed back at its shutdown runs first
            left = store.claim("bench:1", now_ms(), 30_000, None, (), "running on worker 0")
            if left is None:
                break
            store.finish(left.id, "SUCCEEDED", now_ms(), result='{"stepsDone":1,"payload":""}')
        for i in range(warm + n):
            rec = JobRecord(
                id=str(uuid.uuid4()),
                service="XDemo",
                operation="simulate",
                fetch_type="SimulateResponse",
                status="QUEUING",
                request='{"durationMs":0}',
                queued_at=now_ms(),
            )
            t = time.perf_counter()
            store.create(rec, 10000)
            t1 = time.perf_counter()
            got = store.claim("bench:1", now_ms(), 30_000, None, (), "running on worker 0")
            t2 = time.perf_counter()
            if got is None or got.id != rec.id:
                raise RuntimeError(f"claim took {got and got.id}, not the job just queued {rec.id}")
            store.finish(rec.id, "SUCCEEDED", now_ms(), result='{"stepsDone":1,"payload":""}')
            if i >= warm:
                found["create (store)"].append((t1 - t) * 1000)
                found["claim (store)"].append((t2 - t1) * 1000)
        passes, during = [], []
        for _ in range(3):  # and a write meanwhile, as a request would make
            done = threading.Event()

            def clean_pass(done):
                t = time.perf_counter()
                try:
                    if store.erase_expired(now_ms(), 30 * DAY_MS, 30 * DAY_MS, 100):
                        raise RuntimeError("the cleaner pass erased jobs")
                finally:
                    passes.append((time.perf_counter() - t) * 1000)
                    done.set()

            cleaning = threading.Thread(target=clean_pass, args=(done,))
            cleaning.start()
            while not done.is_set():
                rec = JobRecord(
                    id=str(uuid.uuid4()),
                    service="XDemo",
                    operation="simulate",
                    fetch_type="SimulateResponse",
                    status="QUEUING",
                    request='{"durationMs":0}',
                    queued_at=now_ms(),
                )
                t = time.perf_counter()
                store.create(rec, 10000)
                during.append((time.perf_counter() - t) * 1000)
                store.erase(rec.id, ("QUEUING",))
                time.sleep(0.002)
            cleaning.join()
        found["cleaner pass, nothing expired"] = passes
        found["create during that pass"] = during
    finally:
        store.close()
    return found


# ---------------------------------------------------------------------- cleanup


class Loop(threading.Thread):
    """Sends one kind of request, 10 ms apart, until stopped: [(sent, ms, HTTP status)]."""

    def __init__(self, name, port, make_body, service, operation, pause=0.010):
        super().__init__(name=name, daemon=True)
        self.client = Client(port)
        self.make_body, self.service, self.operation, self.pause = (
            make_body,
            service,
            operation,
            pause,
        )
        self.stopped = threading.Event()
        self.samples = []
        self.answers = []

    def run(self):
        while not self.stopped.is_set():
            body = self.make_body()
            sent = time.time()
            t = time.perf_counter()
            try:
                status, answer = self.client.call(self.service, self.operation, body)
            except (OSError, http.client.HTTPException):
                status, answer = 0, None
            self.samples.append((sent, (time.perf_counter() - t) * 1000, status))
            if status == 200 and self.operation.startswith("start"):
                self.answers.append((sent, answer["id"]))
            self.stopped.wait(self.pause)


def log_time(line):
    """The time (epoch s) of a node log line ("2026-11-23 06:50:32,048 INFO ...")."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def cleanup(folder, port, url, database_url, recent, baseline_s, timeout_s):
    """Run the loops, make every stored job expire, wait for the cleaner; print the figures."""
    engine = create_engine(url)
    with engine.connect() as conn:
        before = conn.execute(select(func.count()).select_from(jobs)).scalar()
    say(f"cleanup: {before} stored jobs; node up, retention 30d, loops for {baseline_s:g} s first")
    server = Server(folder, port=port, database_url=database_url, extra=KEEP, workers=2).start()
    offset = server._log_offset
    rng = random.Random(7)
    try:
        warm = Client(server.port)
        for job_id in recent[:50]:
            warm.ok("XRuntime", "watchJob", {"id": job_id})
        long_job = warm.ok("XDemo", "startSimulate", {"durationMs": 600_000})["id"]
        server.wait_status(long_job, "RUNNING")
        loops = [
            Loop(
                "watchJob", server.port, lambda: {"id": rng.choice(recent)}, "XRuntime", "watchJob"
            ),
            Loop("startSimulate", server.port, lambda: {"durationMs": 0}, "XDemo", "startSimulate"),
            Loop(
                "fetch (fetched before)",
                server.port,
                lambda: {"id": rng.choice(recent)},
                "XDemo",
                "fetchSimulateResponse",
            ),
            Loop(
                "listJobs, first page", server.port, lambda: {"limit": 100}, "XRuntime", "listJobs"
            ),
        ]
        for loop in loops:
            loop.start()
        time.sleep(baseline_s + 1)  # the first second is left out below
        base_to = time.time()
        base_from = base_to - baseline_s
        db = (
            sqlite3.connect(make_url(url).database, timeout=30)
            if url.startswith("sqlite")
            else None
        )
        probe = (
            "SELECT (SELECT min(seq) FROM jobs WHERE status = 'FAILED'), "
            "(SELECT min(seq) FROM jobs WHERE status = 'SUCCEEDED')"
        )
        mins = db.execute(probe).fetchone() if db is not None else None
        with tempfile.TemporaryDirectory() as scratch:  # the administrator's edit, in one step
            os.replace(write_config(scratch, server.port, database_url, ERASE, 2), server.config)
        edited = time.time()
        say("cleanup: retention edited to 5d, cleanup_interval 1s")
        lowest_lease, first_drop, erased_line, reported = None, None, None, time.time()
        while time.time() - edited < timeout_s:
            time.sleep(0.25)
            now = now_ms()
            if db is not None:
                lease = db.execute(
                    "SELECT lease_until FROM jobs WHERE id = ?", (long_job,)
                ).fetchone()
                if lease and lease[0] is not None:
                    left = lease[0] - now
                    lowest_lease = left if lowest_lease is None else min(lowest_lease, left)
                seen = db.execute(probe).fetchone()
                if first_drop is None and seen != mins:
                    first_drop = time.time()
                if time.time() - reported > 15:
                    reported = time.time()
                    say(f"  {db.execute('SELECT count(*) FROM jobs').fetchone()[0]} jobs stored")
            log_ = server.log()[offset:]
            found = re.search(r"^(.{23}) .*retention: erased (\d+) expired job", log_, re.M)
            if found:
                erased_line = found
                break
        time.sleep(2)
        for loop in loops:
            loop.stopped.set()
        for loop in loops:
            loop.join()
        Client(server.port).ok(
            "XRuntime", "deleteJob", {"id": long_job}
        )  # warm's connection timed out idle
        log_ = server.log()[offset:]
        server.stop()  # the events are read below by a store of this process
        if erased_line is None:
            say(f"cleanup: no 'retention: erased' line within {timeout_s:g} s")
            return
        reloaded = re.search(r"^(.{23}) .*reloaded;", log_, re.M)
        end = log_time(erased_line.group(1))
        start = log_time(reloaded.group(1)) if reloaded else edited  # the cleaner starts within 1 s
        took = end - (first_drop or start)
        erased = int(erased_line.group(2))
        with engine.connect() as conn:
            after = conn.execute(select(func.count()).select_from(jobs)).scalar()
        say(
            f"cleanup: {erased} jobs erased in {took:.1f} s "
            f"({erased / max(took, 1e-3):.0f} jobs/s; from the first batch seen, 0.25 s polls), "
            f"{after} stored after; the figures below count from the reload"
        )
        print(
            f"\nrequests while the cleaner erased {erased} expired jobs (10 events each), "
            f"against {baseline_s:g} s of the same loops before it:"
        )
        print(
            f"  {'loop':36} {'':9} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
            f"{'>100 ms':>8} {'errors':>7}"
        )
        worst_request = worst_step = 0.0
        for loop in loops:
            for label, lo, hi in (("before", base_from, base_to), ("cleanup", start, end)):
                got = [(ms, st) for sent, ms, st in loop.samples if lo <= sent <= hi]
                if not got:
                    continue
                ms_ = [ms for ms, _ in got]
                if label == "cleanup":
                    worst_request = max(worst_request, max(ms_))
                print(
                    f"  {loop.name:36} {label:9} {len(ms_):6d} "
                    f"{pct(ms_, 50):8.1f} {pct(ms_, 99):8.1f} {max(ms_):8.1f} "
                    f"{sum(m > STALL_MS for m in ms_):8d} {sum(st != 200 for _, st in got):7d}"
                )
        store = JobStore(url)
        try:
            started = loops[1].answers
            for label, lo, hi in (("before", base_from, base_to), ("cleanup", start, end)):
                ids_ = [i for sent, i in started if lo <= sent <= hi]
                for name, (since, to) in (
                    ("queued → RUNNING (events)", ("QUEUING", "RUNNING")),
                    ("RUNNING → SUCCEEDED (events)", ("RUNNING", "SUCCEEDED")),
                ):
                    ms_ = queued_to(store, ids_, to, since)
                    if ms_:
                        if label == "cleanup":
                            worst_step = max(worst_step, max(ms_))
                        print(
                            f"  {name:36} {label:9} {len(ms_):6d} "
                            f"{pct(ms_, 50):8.1f} {pct(ms_, 99):8.1f} {max(ms_):8.1f} "
                            f"{sum(m > STALL_MS for m in ms_):8d}"
                        )
        finally:
            store.close()
        if lowest_lease is not None:
            print(
                f"  lease of the running 10-minute job: lowest {lowest_lease / 1000:.1f} s left "
                f"({'ran out' if lowest_lease < 0 else 'renewed in time'}; "
                "it is renewed every 5 s to 30 s)"
            )
        print(
            f"  slowest request during the cleanup: {worst_request:.1f} ms; slowest job step: "
            f"{worst_step:.1f} ms (target: no request stalled over {STALL_MS:g} ms): "
            f"{'met' if worst_request <= STALL_MS else 'NOT met'}\n",
            flush=True,
        )
    finally:
        server.stop()
        engine.dispose()


# ---------------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    parser.add_argument("--requests", type=int, default=1000, help="per operation and size")
    parser.add_argument(
        "--cleanup",
        type=int,
        nargs="*",
        default=[100_000, 1_000_000],
        help="sizes after which the cleaner erases every stored job (none: no cleanup)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="turns of the sizes (a node start each)"
    )
    parser.add_argument(
        "--baseline", type=float, default=10, help="seconds of the loops before the cleanup"
    )
    parser.add_argument("--cleanup-timeout", type=float, default=1800)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    sizes = sorted(set(args.sizes))
    if args.database_url and len(sizes) > 1:
        parser.error(
            "with --database-url give one size per run: each size needs a database of its own"
        )
    folder = tempfile.mkdtemp(prefix="store_growth-")
    say(
        f"store_growth: {make_url(database_url(args, folder)).get_backend_name()} ({folder}), "
        f"sizes {sizes}, "
        f"{args.requests} requests per operation and size in {args.rounds} rounds, cleanup at "
        f"{args.cleanup or 'none'}; {os.cpu_count()} cores"
    )
    port = free_port()
    rng = random.Random(1)
    stores = {}
    try:
        for size in sizes:  # one store per size, each filled once
            where = os.path.join(folder, str(size))
            url_ = database_url(args, where)
            Fill(url_, size).to(size)
            ids = sample_ids(url_, args.requests, rng)
            stores[size] = dict(folder=where, url=url_, ids=ids, figures={}, made=[])
        for r in range(args.rounds):  # the sizes take turns: a slow spell of the machine
            for size in sizes:  # falls on every size alike
                st = stores[size]
                n = args.requests * (r + 1) // args.rounds - args.requests * r // args.rounds
                unfetched = st["ids"]["unfetched"]
                firsts = unfetched[
                    len(unfetched) * r // args.rounds : len(unfetched) * (r + 1) // args.rounds
                ][:n]
                server = Server(
                    st["folder"], port=port, database_url=args.database_url, extra=KEEP, workers=2
                )
                say(f"round {r + 1} of {args.rounds}, {spaced(size)} stored: node starting")
                server.start(timeout=180)
                try:
                    found, made = measure_http(server, st["ids"], n, rng, firsts)
                finally:
                    server.stop()
                store = JobStore(st["url"])
                try:
                    found["queued → RUNNING (events)"] = queued_to(store, made)
                finally:
                    store.close()
                found.update(measure_store(st["url"], n))
                st["made"] += made
                for name, ms in found.items():
                    st["figures"].setdefault(name, []).extend(ms)
        for size in sizes:
            print(f"\n{spaced(size)} stored jobs")
            print(f"  {'operation':36} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
            for name, ms in stores[size]["figures"].items():
                print(
                    f"  {name:36} {len(ms):6d} {pct(ms, 50):8.2f} {pct(ms, 99):8.2f} {max(ms):8.2f}"
                )
        if len(sizes) > 1:
            lo, hi = stores[sizes[0]]["figures"], stores[sizes[-1]]["figures"]
            print(
                f"\ngrowth from {spaced(sizes[0])} to {spaced(sizes[-1])} stored jobs "
                "(target: at most 1.2x, judged on p50):"
            )
            for name in lo:
                a, b = lo[name], hi.get(name)
                if not a or not b:
                    continue
                floor = 1.0 if "(events)" in name else 1e-6  # the database's clock counts whole ms
                r50 = max(pct(b, 50), floor) / max(pct(a, 50), floor)
                r99 = max(pct(b, 99), floor) / max(pct(a, 99), floor)
                print(
                    f"  {name:36} p50 {r50:6.2f}x   p99 {r99:6.2f}x   "
                    f"{'met' if r50 <= 1.2 else 'NOT met'}"
                )
        print(flush=True)
        for size in sizes:
            if size in args.cleanup:
                st = stores[size]
                cleanup(
                    st["folder"],
                    port,
                    st["url"],
                    args.database_url,
                    st["made"],
                    args.baseline,
                    args.cleanup_timeout,
                )
    finally:
        if args.keep:
            say(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def database_url(args, where):
    return args.database_url or f"sqlite:///{os.path.join(where, 'data', 'xruntime.db')}"


if __name__ == "__main__":
    main()

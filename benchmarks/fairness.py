"""Fair shares (docs/protocol.md §10): each user's share of the workers, and what a fair
claim costs.

Part 1, over real HTTP: a node with ``--workers`` workers and ``[auth] required =
true`` serves ``--users`` users (alice, bob, carol, dave, …), each with a token.  The
arrival is unfair on purpose: alice starts all her ``--jobs`` XDemo jobs first
(``startSimulate``, ``durationMs`` ``--duration-ms``, one step), and only then do the
others start theirs, all at once, each from a thread of its own.  This runs twice,
each time on a fresh node and database: with ``max_running = --max-running`` for every
user (fair claims), and without any ``max_running`` (plain first in, first out) as the
baseline.  The jobs are never fetched, so they stay in the store; when all have
finished, the script reads each one's ``owner``, ``queued_at``, ``started_at`` and
``finished_at`` (ms, node clock) from the store's ``jobs`` table directly: exact, and
nothing the protocol answers (a Job has only its elapsedTime) is needed.  Per user it
prints the jobs, the share of worker time (``finished_at - started_at``) in the
*fair-share window* (the times at which every user had at least one job queued), the
share over the whole run, the queue wait (``started_at - queued_at``) p50 and p99,
and when the user's last job finished (from the first job queued).

Part 2, at the store alone (no HTTP, no node): one ``JobStore.claim`` of bob's one
queued job, timed ``--claims`` times (each time bob's job is queued, claimed, finished
and erased; only the claim is timed), with ``running_limits`` ``(("alice", None, 1),)``:
(a) on an otherwise empty queue, and (b) with ``--queued`` jobs of alice queued while
she runs one, her limit, so every claim has to pass over her lane.  Her jobs are
written in one transaction with the store's own insert statement.  Every claim in (b)
is checked to be bob's, and alice's counts (1 running, all others queued) are checked
after.  (b) is timed twice: as the table is after the insert (PostgreSQL has no
statistics of the flood yet), and after ``ANALYZE jobs`` (what autovacuum does soon
after; the store itself never analyses an SQLite file).  The plain FIFO claim (no
limits) on the empty queue is printed for context, and the claim of a node with
accounts on and no ``max_running`` (fair by default: the first job of the user running
fewest), on the empty queue and past alice's flood while she runs one.

    python benchmarks/fairness.py [--part all|shares|claims] [--users 4] [--jobs 200]
        [--duration-ms 200] [--workers 4] [--max-running 1] [--queued 100000]
        [--claims 2000] [--database-url URL]

Targets: with fair claims each user gets about an equal share of the worker time in
the fair-share window (4 users: 25 % each), however the jobs arrived; with accounts on
and no max_running (fair by default, since issue 32) too, the freed workers going to
the users running fewest; before that, the first user's flood took the workers until
it was done (run this script at an older commit for that baseline).  A fair claim with 100 000
over-quota jobs queued costs at most 1.5x the claim on an empty queue (median),
before and after ANALYZE.

SQLite in a temporary folder by default.  With ``--database-url`` (PostgreSQL), each
run makes a scratch database of its own on that server (``CREATE DATABASE``, so the
role needs CREATEDB) and drops it afterwards; the database the URL names is not
touched.
"""

import argparse
import contextlib
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
import uuid

from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import Server  # noqa: E402
from xruntime.operations.accounts import token_sha256  # noqa: E402
from xruntime.payload.form import pack  # noqa: E402
from xruntime.store import JobRecord, JobStore, now_ms  # noqa: E402
from xruntime.store.schema import jobs, lane_of  # noqa: E402
from xruntime.store.statements import INSERT_KEYS  # noqa: E402

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
TERMINAL = ("SUCCEEDED", "FAILED", "DELETED")


@contextlib.contextmanager
def scratch_database(url, folder):
    """A database URL for one run: SQLite in ``folder``, or with ``url`` (PostgreSQL) a
    scratch database on its server, dropped afterwards."""
    if url is None:
        yield "sqlite:///" + os.path.join(folder, "data", "xruntime.db")
        return
    name = f"xruntime_fairness_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def database_name(url):
    return "SQLite" if url is None else make_url(url).get_backend_name()


# ------------------------------------------------------------------ part 1: shares


def node_config(users, tokens, max_running, max_queued):
    """The [jobs], [auth] and [users.NAME] tables of the node's file."""
    text = f"\n[jobs]\nmax_queued = {max_queued}\n\n[auth]\nrequired = true\n"
    for user in users:
        text += f'\n[users.{user}]\ntoken_sha256 = "{token_sha256(tokens[user])}"\n'
        if max_running:
            text += f"max_running = {max_running}\n"
    return text


def start_jobs(server, user, token, count, duration_ms, ids):
    """``count`` startSimulate calls as ``user`` on one keep-alive connection."""
    import requests

    session = requests.Session()
    session.auth = (user, token)
    url = server.url("XDemo", "startSimulate")
    for _ in range(count):
        r = session.post(url, json={"durationMs": duration_ms, "steps": 1}, timeout=70)
        if r.status_code != 200:
            raise RuntimeError(f"{user}: startSimulate answered {r.status_code} {r.text[:200]}")
        ids.append(r.json()["id"])
    session.close()


def read_jobs(engine, ids):
    """(id, owner, status, queued_at, started_at, finished_at) of the given jobs."""
    rows, ids = [], list(ids)
    with engine.connect() as conn:
        for i in range(0, len(ids), 500):
            rows += conn.execute(
                select(
                    jobs.c.id,
                    jobs.c.owner,
                    jobs.c.status,
                    jobs.c.queued_at,
                    jobs.c.started_at,
                    jobs.c.finished_at,
                ).where(jobs.c.id.in_(ids[i : i + 500]))
            ).all()
    return rows


def shares_run(args, users, max_running, url):
    """Run the unfair arrival on a fresh node; answers the jobs' rows."""
    tokens = {user: secrets.token_urlsafe(24) for user in users}
    extra = node_config(users, tokens, max_running, max(10000, len(users) * args.jobs))
    with tempfile.TemporaryDirectory() as folder, scratch_database(url, folder) as db_url:
        server = Server(
            folder,
            extra=extra,
            workers=args.workers,
            database_url=db_url,
            auth=(users[0], tokens[users[0]]),
        ).start()
        engine = create_engine(db_url)
        try:
            ids = {user: [] for user in users}
            first, others = users[0], users[1:]  # the flood first, then the others at once
            start_jobs(server, first, tokens[first], args.jobs, args.duration_ms, ids[first])
            threads = [
                threading.Thread(
                    target=start_jobs,
                    args=(server, user, tokens[user], args.jobs, args.duration_ms, ids[user]),
                )
                for user in others
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            every = [i for user in users for i in ids[user]]
            if len(every) != len(users) * args.jobs:
                raise RuntimeError("some startSimulate calls failed; see above")
            expected = (
                len(users)
                * args.jobs
                * args.duration_ms
                / 1000
                / min(args.workers, len(users) * (max_running or args.workers))
            )
            deadline = time.time() + 3 * expected + 120
            while True:
                rows = read_jobs(engine, every)
                if len(rows) == len(every) and all(r.status in TERMINAL for r in rows):
                    break
                if time.time() > deadline:
                    raise RuntimeError(f"jobs not finished in time:\n{server.log()[-3000:]}")
                time.sleep(0.5)
        finally:
            engine.dispose()
            server.stop()
    bad = [r for r in rows if r.status != "SUCCEEDED"]
    if bad:
        raise RuntimeError(f"{len(bad)} jobs ended {bad[0].status}")
    return rows


def all_queued_window(rows, users):
    """The intervals [from, to) (ms) during which every user had a job queued."""
    events = sorted(
        (t, delta, owner)
        for r in rows
        for t, delta, owner in ((r.queued_at, 1, r.owner), (r.started_at, -1, r.owner))
    )
    queued = dict.fromkeys(users, 0)
    intervals, opened = [], None
    for t, delta, owner in events:  # at equal times a start (-1) comes first
        queued[owner] += delta
        everyone = all(queued.values())
        if everyone and opened is None:
            opened = t
        elif not everyone and opened is not None:
            if t > opened:
                intervals.append((opened, t))
            opened = None
    return intervals


def overlap(a, b, intervals):
    return sum(max(0, min(b, hi) - max(a, lo)) for lo, hi in intervals)


def report_shares(title, rows, users, workers):
    t0 = min(r.queued_at for r in rows)
    end = max(r.finished_at for r in rows)
    window = all_queued_window(rows, users)
    window_ms = sum(hi - lo for lo, hi in window)
    busy = {u: 0 for u in users}
    busy_window = {u: 0 for u in users}
    for r in rows:
        busy[r.owner] += r.finished_at - r.started_at
        busy_window[r.owner] += overlap(r.started_at, r.finished_at, window)
    total, total_window = sum(busy.values()), sum(busy_window.values())
    print(
        f"{title}: {len(rows)} jobs in {(end - t0) / 1000:.1f} s; every user had jobs queued for "
        f"{window_ms / 1000:.1f} s, "
        f"workers busy {100 * total_window / max(1, workers * window_ms):.0f}% of that"
    )
    print(
        f"  {'user':<8}{'jobs':>5}  {'share while all queued':>22}  {'share of run':>12}  "
        f"{'wait p50':>9}  {'wait p99':>9}  {'last done':>9}"
    )
    for user in users:
        mine = [r for r in rows if r.owner == user]
        waits = [r.started_at - r.queued_at for r in mine]
        share_window = f"{100 * busy_window[user] / total_window:.1f}%" if total_window else "-"
        print(
            f"  {user:<8}{len(mine):>5}  {share_window:>22}  {100 * busy[user] / total:>11.1f}%  "
            f"{statistics.median(waits) / 1000:>7.2f} s  {percentile(waits, 99) / 1000:>7.2f} s  "
            f"{(max(r.finished_at for r in mine) - t0) / 1000:>7.1f} s"
        )


def part_shares(args):
    users = (NAMES + [f"user{i}" for i in range(len(NAMES) + 1, args.users + 1)])[: args.users]
    print(
        f"fair shares: {len(users)} users x {args.jobs} XDemo jobs of {args.duration_ms} ms, "
        f"{args.workers} workers, {database_name(args.database_url)}; {users[0]} starts all hers "
        f"first, then {', '.join(users[1:])} at once"
    )
    for max_running in (args.max_running, 0):
        title = (
            f"max_running = {max_running} (fair claims)"
            if max_running
            else "no max_running (fair by default: the user running fewest first)"
        )
        rows = shares_run(args, users, max_running, args.database_url)
        report_shares(title, rows, users, args.workers)


# ------------------------------------------------------------------ part 2: claim cost


def record(owner):
    return JobRecord(
        id=str(uuid.uuid4()),
        service="XDemo",
        operation="simulate",
        fetch_type="SimulateResponse",
        status="QUEUING",
        request='{"durationMs":0}',
        queued_at=now_ms(),
        owner=owner,
    )


def timed_claims(store, limits, count, between_owners=False):
    """µs of each of ``count`` claims of a freshly queued job of bob's (``between_owners``:
    the claim of a node with accounts on, fair by default)."""
    took = []
    for _ in range(count):
        job = record("bob")
        assert store.create(job, 0)
        t = time.perf_counter_ns()
        got = store.claim("bench", now_ms(), 30_000, None, limits, between_owners=between_owners)
        took.append((time.perf_counter_ns() - t) / 1000)
        assert got is not None and got.id == job.id and got.owner == "bob", got
        assert store.finish(job.id, "SUCCEEDED", now_ms(), result="{}")
        assert store.erase(job.id, ("SUCCEEDED",))
    return took


def queue_many(store, owner, count):
    """``count`` queued jobs of ``owner``, written in one transaction with the store's
    own insert statement (the columns and the packed request ``create`` writes)."""
    p = store._prepared["insert"]
    now = now_ms()
    rows = []
    for i in range(count):
        job = record(owner)
        values = {k: getattr(job, k) for k in INSERT_KEYS if k != "lane"}
        values.update(
            request=pack(job.request), lane=lane_of(job.service, job.owner), queued_at=now + i
        )
        rows.append(p.args(values))
    conn = store.engine.raw_connection()
    try:
        cur = conn.cursor()
        if store.dialect == "sqlite":
            cur.execute("BEGIN IMMEDIATE")
        cur.executemany(p.sql, rows)
        conn.commit()
    finally:
        conn.close()


def part_claims(args):
    limits = (("alice", None, 1),)
    with (
        tempfile.TemporaryDirectory() as folder,
        scratch_database(args.database_url, folder) as url,
    ):
        store = JobStore(url)
        try:
            timed_claims(store, (), 100)  # warm up: statements, pages
            timed_claims(store, limits, 100)
            timed_claims(store, (), 100, between_owners=True)
            fifo = timed_claims(store, (), args.claims)
            empty = timed_claims(store, limits, args.claims)
            by_default_empty = timed_claims(store, (), args.claims, between_owners=True)
            assert store.counts_by_status() == {}, store.counts_by_status()
            first = record("alice")  # alice runs one: her limit
            assert store.create(first, 0)
            assert store.claim("bench", now_ms(), 30_000, None, limits).id == first.id
            t = time.perf_counter()
            queue_many(store, "alice", args.queued)
            written = time.perf_counter() - t
            timed_claims(store, limits, 100)
            loaded = timed_claims(store, limits, args.claims)
            by_default = timed_claims(store, (), args.claims, between_owners=True)
            with store.engine.begin() as conn:  # as PostgreSQL's autovacuum will
                conn.exec_driver_sql("ANALYZE jobs")
            timed_claims(store, limits, 100)
            analysed = timed_claims(store, limits, args.claims)
            by_default_analysed = timed_claims(store, (), args.claims, between_owners=True)
            counts = store.counts_by_status("alice")
            assert counts == {"RUNNING": 1, "QUEUING": args.queued}, counts
        finally:
            store.close()
    print(
        f"claim cost at the store ({database_name(args.database_url)}, "
        f"one claim of bob's one queued job, {args.claims} times; µs median / p99):"
    )
    rows = [
        ("plain FIFO claim (no limits), empty queue", fifo),
        ("fair claim, empty queue", empty),
        (f"fair claim, {args.queued} of alice's queued over her max_running", loaded),
        ("  the same after ANALYZE", analysed),
        ("fair by default (accounts on, no limits), empty queue", by_default_empty),
        (f"fair by default, {args.queued} of alice's queued, 1 running", by_default),
        ("  the same after ANALYZE", by_default_analysed),
    ]
    for label, took in rows:
        print(f"  {label + ':':<62} {statistics.median(took):7.0f} / {percentile(took, 99):7.0f}")
    ratios = [statistics.median(took) / statistics.median(empty) for took in (loaded, analysed)]
    by_default_ratio = statistics.median(by_default) / statistics.median(fifo)
    print(
        f"  fair by default, {args.queued} queued / plain FIFO claim on an empty queue "
        f"(median): {by_default_ratio:.2f}x"
    )
    print(
        f"  ratio {args.queued} queued / empty (median): {ratios[0]:.2f}x, "
        f"after ANALYZE {ratios[1]:.2f}x (target <= 1.5x); "
        f"alice's {args.queued} jobs written in {written:.1f} s"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "shares", "claims"), default="all")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=200, help="jobs per user (part 1)")
    parser.add_argument(
        "--duration-ms", type=int, default=200, help="each job's durationMs (part 1)"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--max-running", type=int, default=1, help="every user's max_running (part 1)"
    )
    parser.add_argument(
        "--queued", type=int, default=100_000, help="alice's over-quota jobs (part 2)"
    )
    parser.add_argument("--claims", type=int, default=2000, help="timed claims per case (part 2)")
    parser.add_argument(
        "--database-url",
        help="default: SQLite in a temporary folder; PostgreSQL: a scratch database on that server",
    )
    args = parser.parse_args()
    if args.users < 2 or args.max_running < 1:
        parser.error("--users must be at least 2 and --max-running at least 1")
    if args.part in ("all", "shares"):
        part_shares(args)
    if args.part in ("all", "claims"):
        part_claims(args)


if __name__ == "__main__":
    main()

"""The retention cleaner on a large store (docs/protocol.md §5): 20 000 expired jobs are
erased in bounded batches (200 of them) while requests keep being answered quickly, and exactly the
expired jobs go: not fresh ones, not active ones, not fetched ones inside their
fetched retention.  On SQLite, and on PostgreSQL when XRUNTIME_TEST_DATABASE_URL is set
(the ``any_store`` fixture drops and re-creates its table first).  A million, with the
figures, is ``benchmarks/store_growth.py``'s."""

import random
import threading
import time
import uuid

import pytest
from sqlalchemy import func, insert, select

from xruntime.engine.cleaner import RetentionCleaner
from xruntime.engine.notifier import Notifier
from xruntime.settings.config import JobSettings, Settings
from xruntime.store import now_ms
from xruntime.store.schema import jobs as jobs_table

from .helpers import BlockingJobs, new_record

EXPIRED = 20_000
MINUTE = 60_000
HOUR = 60 * MINUTE
SETTINGS = Settings(jobs=JobSettings(unfetched_retention_ms=HOUR, fetched_retention_ms=10 * MINUTE))
MAX_LATENCY = 0.5  # s: "well under 1 s" for any one call while the cleaner runs

RESULT = b'{"stepsDone":1,"payload":"x"}'
FAULT = b'{"$type":"ProcessingFault","message":"failed","hint":"retry"}'


def row(now, status, *, finished_ago=None, fetched_ago=None, queued_ago=None):
    queued_at = now - (queued_ago if queued_ago is not None else (finished_ago or 0) + MINUTE)
    return {
        "id": str(uuid.uuid4()),
        "service": "XDemo",
        "operation": "simulate",
        "fetch_type": "SimulateResponse",
        "status": status,
        "request": b"{}",
        "result": RESULT if status == "SUCCEEDED" else None,
        "fault": FAULT if status == "FAILED" else None,
        "progress": None,
        "queued_at": queued_at,
        "started_at": queued_at + 10 if status != "QUEUING" else None,
        "finished_at": now - finished_ago if finished_ago is not None else None,
        "first_fetched_at": now - fetched_ago if fetched_ago is not None else None,
        "attempts": 0 if status == "QUEUING" else 1,
        "node": "n1" if status in ("RUNNING", "STOPPING", "DELETED") else None,
        "lease_until": now + MINUTE if status in ("RUNNING", "STOPPING", "DELETED") else None,
        "queueing_timeout": None,
        "computation_timeout": None,
    }


def fill(store, now):
    """Insert the expired rows and the ones that must stay, shuffled together so that
    every batch of the cleaner meets both.  Answers (expired ids, kept ids by kind)."""
    rng = random.Random(7)
    expired, kept = [], {"fresh": [], "fetched inside": [], "active": [], "deleted": []}
    rows = []
    for i in range(EXPIRED):
        status = "SUCCEEDED" if i % 3 else "FAILED"
        if i % 10 == 0:  # fetched, and its fetched retention is over too
            r = row(now, status, finished_ago=2 * HOUR, fetched_ago=11 * MINUTE + i % 1000)
        else:  # never fetched, finished longer ago than the unfetched retention
            r = row(now, status, finished_ago=HOUR + 1 + rng.randrange(10 * HOUR))
        rows.append(r)
        expired.append(r["id"])
    for i in range(2000):
        status = "SUCCEEDED" if i % 2 else "FAILED"
        # finished recently, never fetched
        r = row(now, status, finished_ago=HOUR - 5 * MINUTE - i)
        kept["fresh"].append(r["id"])
        rows.append(r)
        # finished long ago (past the unfetched retention) but first fetched recently:
        # 5 minutes inside the fetched retention, at the cleaner's "now" (see the test)
        r = row(now, status, finished_ago=5 * HOUR, fetched_ago=5 * MINUTE - i)
        kept["fetched inside"].append(r["id"])
        rows.append(r)
    for i in range(600):
        status = ("QUEUING", "RUNNING", "STOPPING")[i % 3]
        r = row(now, status, queued_ago=20 * HOUR)
        kept["active"].append(r["id"])
        rows.append(r)
    for _ in range(200):
        r = row(now, "DELETED", queued_ago=20 * HOUR)
        kept["deleted"].append(r["id"])
        rows.append(r)
    rng.shuffle(rows)
    with store.engine.begin() as conn:
        for start in range(0, len(rows), 20_000):
            conn.execute(insert(jobs_table), rows[start : start + 20_000])
    return expired, kept


def stored_ids(store):
    with store.engine.connect() as conn:
        return {r[0] for r in conn.execute(select(jobs_table.c.id))}


@pytest.mark.exclusive  # its latencies are this machine's, not shared with other tests
def test_cleaner_erases_20k_expired_jobs_without_stalling_requests(any_store):
    store = any_store
    now = now_ms()
    expired, kept = fill(store, now)
    notifier = Notifier()
    manager = BlockingJobs(store, notifier, lambda: SETTINGS)
    fresh_id = kept["fresh"][0]
    fetched_id = kept["fetched inside"][0]
    active_id = kept["active"][1]  # a RUNNING one

    # The cleaner judges expiry at the instant the rows were stamped against, however
    # long filling and cleaning take: on a real clock every margin of the rows that
    # must stay (and of the expired ones) would shrink by the run's duration, which
    # depends on the machine (over a minute on PostgreSQL on a slow one).  The
    # cleaner's use of the real clock is tested end to end (tests/e2e/test_retention.py).
    cleaner = RetentionCleaner(store, lambda: SETTINGS, clock=lambda: now)
    outcome = {}

    def clean():
        t0 = time.perf_counter()
        try:
            outcome["erased"] = cleaner.clean()
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc
        outcome["took"] = time.perf_counter() - t0

    latencies = {"peek": [], "get": [], "create": [], "watch": []}
    created = []
    cleaning = threading.Thread(target=clean, name="cleaner-under-test")
    cleaning.start()
    try:
        while cleaning.is_alive():
            t = time.perf_counter()
            rec = store.peek(fresh_id)
            latencies["peek"].append(time.perf_counter() - t)
            assert rec is not None and rec.status in ("SUCCEEDED", "FAILED")

            t = time.perf_counter()
            rec = store.get(fetched_id)
            latencies["get"].append(time.perf_counter() - t)
            assert rec is not None and rec.first_fetched_at is not None

            t = time.perf_counter()
            job = new_record()
            assert store.create(job, SETTINGS.jobs.max_queued)
            latencies["create"].append(time.perf_counter() - t)
            created.append(job.id)

            t = time.perf_counter()
            answer = manager.watch(fresh_id)  # terminal: answers at once
            latencies["watch"].append(time.perf_counter() - t)
            assert answer.status in ("SUCCEEDED", "FAILED")

            t = time.perf_counter()
            rec = store.peek(active_id)
            latencies["peek"].append(time.perf_counter() - t)
            assert rec is not None and rec.status == "RUNNING"
    finally:
        cleaning.join()
        notifier.close()
    assert "error" not in outcome, outcome.get("error")

    worst = {name: max(values) for name, values in latencies.items()}
    print(
        f"\n{store.dialect}: cleaner erased {outcome['erased']} jobs in {outcome['took']:.2f} s; "
        f"{len(created)} request rounds meanwhile; max latency (ms): "
        + ", ".join(f"{k} {v * 1000:.1f}" for k, v in worst.items())
    )
    assert len(created) >= 5, "the cleaner ended before the requests could overlap it"
    for name, value in worst.items():
        assert value < MAX_LATENCY, f"{name} took {value:.3f} s while the cleaner ran"

    # exactly the expired jobs were erased
    assert outcome["erased"] == EXPIRED
    remaining = stored_ids(store)
    should_stay = set(created).union(*kept.values())
    assert remaining == should_stay, (
        f"{len(should_stay - remaining)} jobs that should stay were erased "
        f"({[k for k, ids in kept.items() if set(ids) - remaining]}), "
        f"{len(remaining - should_stay)} expired ones are left"
    )
    # a second run finds nothing more
    assert cleaner.clean() == 0
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(jobs_table)).scalar() == len(
            should_stay
        )

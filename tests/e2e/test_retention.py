"""Retention of finished jobs (docs/protocol.md §5), over JSON on a real server, with periods
of seconds: unfetched retention from the end of the job, fetched retention from the
FIRST fetch, FAILED jobs alike, running jobs never erased, live edits applying to
jobs already stored, and per-service overrides.

Times are taken on the client; the server runs on the same host and clock.  A job's
end is known to within the start call's round trip: ``queued_at`` lies between the
times before and after the start call, and ``elapsedTime`` is frozen at the end.
"""

import os
import time

import pytest

from tests.harness import Server, write_config

UNFETCHED = 3.0  # s, [jobs] unfetched_retention of the module's server
FETCHED = 1.0  # s, [jobs] fetched_retention
CLEANUP = 0.5  # s, [jobs] cleanup_interval
SLACK = 0.3  # s: HTTP round trips and the 50 ms polling of the tests
# The server's housekeeping thread ticks once a second, so a cleanup may come up to
# 1 s late whatever cleanup_interval says; the tests of the retention rules allow for
# that, test_cleanup_runs_every_cleanup_interval checks the interval itself.
LATE = max(CLEANUP, 1.0) + SLACK

RETENTION = f"""
[jobs]
unfetched_retention = "{UNFETCHED:g}s"
fetched_retention = "{FETCHED:g}s"
cleanup_interval = "{CLEANUP * 1000:g}ms"
"""

FETCH = {"XDemo": "fetchSimulateResponse", "XCrashy": "fetchCrashResponse"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A node whose finished jobs expire within seconds."""
    srv = Server(str(tmp_path_factory.mktemp("retention")), extra=RETENTION).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def long_server(tmp_path_factory):
    """A node with long retention; its tests edit the file while it runs."""
    srv = Server(
        str(tmp_path_factory.mktemp("retention-live")),
        extra='[jobs]\nunfetched_retention = "1h"\nfetched_retention = "1h"\n',
    ).start()
    yield srv
    srv.stop()


# ---------------------------------------------------------------------------- helpers


def finished_job(srv, service="XDemo", **request):
    """Start a job and wait for its end.  Answers (id, last Job, earliest and latest
    possible end time)."""
    operation = "startSimulate" if service == "XDemo" else "startCrash"
    before = time.time()
    job = srv.call(service, operation, request)
    after = time.time()
    done = srv.wait_done(job["id"])
    assert done["status"] in ("SUCCEEDED", "FAILED"), done
    elapsed = done["elapsedTime"] / 1000
    return job["id"], done, before + elapsed - 0.002, after + elapsed + 0.002


def fetch(srv, job_id, service="XDemo"):
    return srv.post(service, FETCH[service], {"id": job_id})


def watch_until_gone(srv, job_ids, timeout):
    """Watch (never fetch) the jobs every 50 ms; answers {id: time it first answered
    UNKNOWN} for those that did within ``timeout`` s."""
    gone, deadline = {}, time.time() + timeout
    while len(gone) < len(job_ids) and time.time() < deadline:
        for job_id in job_ids:
            if job_id in gone:
                continue
            answer = srv.watch(job_id)
            if answer["status"] == "UNKNOWN":
                gone[job_id] = time.time()
                assert answer == {"id": job_id, "status": "UNKNOWN", "elapsedTime": 0}
            else:
                assert answer["status"] in ("SUCCEEDED", "FAILED"), answer
        time.sleep(0.05)
    return gone


def assert_unknown(srv, job_id, service="XDemo"):
    assert srv.watch(job_id) == {"id": job_id, "status": "UNKNOWN", "elapsedTime": 0}
    r = fetch(srv, job_id, service)
    assert r.status_code == 404, (r.status_code, r.text)
    assert r.json()["faultInfo"]["$type"] == "UnknownJobFault"
    assert r.json()["faultInfo"]["jobId"] == job_id


def rewrite(srv, extra):
    """Replace the server's file as a whole (written aside, then renamed in place, so
    the server never reads half a file), with the same [server], [database], [workers]."""
    scratch = os.path.join(srv.folder, "edit")
    path = write_config(scratch, srv.port, extra=extra, workers=srv.workers)
    os.replace(path, srv.config)


def reloads(srv):
    log = srv.log()
    return log.count(f"{srv.config}: reloaded") + log.count(f"{srv.config}: re-read")


def apply(srv, extra, timeout=2.0):
    """Rewrite the file and wait until the server has read it (within 2 s, §5)."""
    seen = reloads(srv)
    rewrite(srv, extra)
    deadline = time.time() + timeout
    while reloads(srv) == seen:
        assert time.time() < deadline, (
            f"the edit was not read within {timeout} s:\n{srv.log()[-3000:]}"
        )
        time.sleep(0.05)


# ---------------------------------------------------------------------------- unfetched


def test_unfetched_job_is_kept_for_unfetched_retention_then_unknown(server):
    kept_id, _, _, _ = finished_job(server, durationMs=0, resultSize=10)
    job_id, _, end_min, end_max = finished_job(server, durationMs=0, resultSize=10)
    # still fetchable shortly before its unfetched retention runs out
    time.sleep(max(0.0, end_min + UNFETCHED - 0.5 - time.time()))
    assert server.watch(job_id)["status"] == "SUCCEEDED"
    r = fetch(server, kept_id)
    assert r.status_code == 200 and r.json()["stepsDone"] == 1, r.text
    assert time.time() < end_min + UNFETCHED, "the test was too slow to check in time"
    gone = watch_until_gone(server, [job_id], UNFETCHED + LATE + 2)
    assert job_id in gone, "the unfetched job was never erased"
    assert gone[job_id] >= end_min + UNFETCHED, (
        f"erased {end_min + UNFETCHED - gone[job_id]:.2f} s before its unfetched retention"
    )
    assert gone[job_id] <= end_max + UNFETCHED + LATE, (
        f"erased {gone[job_id] - end_max - UNFETCHED:.2f} s after its unfetched retention"
    )
    assert_unknown(server, job_id)


def test_watching_is_not_fetching(server):
    """Watching a finished job again and again does not start its fetched retention."""
    job_id, _, end_min, _ = finished_job(server, durationMs=0)
    deadline = end_min + FETCHED + LATE + 0.2
    while time.time() < deadline:
        assert server.watch(job_id)["status"] == "SUCCEEDED"
        time.sleep(0.1)
    assert fetch(server, job_id).status_code == 200


def test_cleanup_runs_every_cleanup_interval(server):
    """Jobs that end at different moments each go within cleanup_interval (plus the
    round trips) of their retention's end: the cleanup runs that often."""
    ends = {}
    for _ in range(8):
        job_id, _, _, end_max = finished_job(server, durationMs=0)
        ends[job_id] = end_max
        time.sleep(0.12)  # (the jobs end at different moments, over two cleanup intervals)
    gone = watch_until_gone(server, list(ends), UNFETCHED + LATE + 3)
    assert set(gone) == set(ends), "some jobs were never erased"
    late = {job_id: gone[job_id] - ends[job_id] - UNFETCHED for job_id in ends}
    assert min(late.values()) >= -0.05, f"erased before its retention ran out: {late}"
    worst = max(late.values())
    assert worst <= CLEANUP + SLACK, (
        f"a job was erased {worst:.2f} s after its retention ran out, with cleanup_interval = "
        f"{CLEANUP} s; lateness per job: {sorted(round(v, 2) for v in late.values())}"
    )


# ---------------------------------------------------------------------------- fetched


def test_fetched_job_expires_fetched_retention_after_its_first_fetch(server):
    job_id, _, _, _ = finished_job(server, durationMs=0, steps=2, resultSize=30)
    before = time.time()
    r = fetch(server, job_id)
    after = time.time()
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["stepsDone"] == 2 and len(first["payload"]) == 30
    # fetching again inside the period answers the same result, and does not extend
    # it: were each fetch to extend it, this loop would keep the job for ever
    answers = 0
    while True:
        sent = time.time()
        r = fetch(server, job_id)
        if r.status_code == 404:
            gone = time.time()
            break
        assert r.status_code == 200 and r.json() == first, (r.status_code, r.text)
        answers += 1
        assert sent < after + FETCHED + LATE, "fetching again extended the fetched retention"
        time.sleep(0.1)
    assert answers >= 5
    assert gone >= before + FETCHED, (
        f"erased {before + FETCHED - gone:.2f} s before its fetched retention"
    )
    # its fetched retention (1 s) applied, not the unfetched one (3 s) from its end
    assert gone <= after + FETCHED + LATE, f"erased {gone - after - FETCHED:.2f} s late"
    assert_unknown(server, job_id)


def test_fetched_retention_counts_from_the_first_fetch_not_from_the_end(server):
    """A job first fetched late in its unfetched retention is kept fetched_retention
    from that fetch, even past the end of its unfetched retention."""
    job_id, _, end_min, end_max = finished_job(server, durationMs=0)
    time.sleep(max(0.0, end_min + UNFETCHED - 0.6 - time.time()))
    before = time.time()
    r = fetch(server, job_id)
    after = time.time()
    assert r.status_code == 200, r.text
    gone = watch_until_gone(server, [job_id], FETCHED + LATE + 2)
    assert job_id in gone
    assert gone[job_id] >= before + FETCHED, "erased by its unfetched retention although fetched"
    assert gone[job_id] <= after + FETCHED + LATE
    assert_unknown(server, job_id)


# ---------------------------------------------------------------------------- failed


def test_failed_jobs_are_kept_and_expire_the_same_way(server):
    unfetched_id, done, end_min, end_max = finished_job(server, durationMs=0, failAtStep=1)
    assert done["status"] == "FAILED"
    fetched_id, done, _, _ = finished_job(server, durationMs=0, failAtStep=1)
    assert done["status"] == "FAILED"
    before = time.time()
    r = fetch(server, fetched_id)
    after = time.time()
    assert r.status_code == 500 and r.json()["faultInfo"]["$type"] == "ProcessingFault", r.text
    fault = r.json()
    # inside its fetched retention, the same fault again (half a second into it)
    time.sleep(0.5)
    assert fetch(server, fetched_id).json() == fault
    # the unfetched one: its fault is still there (watching is not fetching)
    assert server.watch(unfetched_id)["status"] == "FAILED"

    gone = watch_until_gone(server, [unfetched_id, fetched_id], UNFETCHED + LATE + 2)
    assert set(gone) == {unfetched_id, fetched_id}
    assert before + FETCHED <= gone[fetched_id] <= after + FETCHED + LATE, gone[fetched_id] - after
    assert end_min + UNFETCHED <= gone[unfetched_id] <= end_max + UNFETCHED + LATE, (
        gone[unfetched_id] - end_max
    )
    assert_unknown(server, fetched_id)
    assert_unknown(server, unfetched_id)


# ---------------------------------------------------------------------------- active jobs


def test_running_and_queued_jobs_are_never_erased(server):
    """Two jobs run (both workers busy) and a third waits in the queue for longer than
    both retentions: none is erased, and each is fetchable right after it ends."""
    t0 = time.time()
    runners = [server.start_job(durationMs=6000, steps=3, resultSize=5) for _ in range(2)]
    for job in runners:
        server.wait_status(job["id"], "RUNNING")
    queued = server.start_job(durationMs=0, resultSize=5)
    # the runners end 6 s after t0: until then, check that none of the three is erased
    while time.time() < t0 + UNFETCHED + LATE:
        for job in runners + [queued]:
            answer = server.watch(job["id"], progressUpdatePeriod=250, maximumPollingPeriod=250)
            assert answer["status"] in ("QUEUING", "RUNNING"), (job["id"], answer, time.time() - t0)
    for job in runners + [queued]:
        done = server.wait_done(job["id"])
        assert done["status"] == "SUCCEEDED", done
        r = fetch(server, job["id"])
        assert r.status_code == 200, (r.status_code, r.text)
        assert len(r.json()["payload"]) == 5
    # the queued one waited longer than both retentions before it ran
    assert server.watch(queued["id"])["elapsedTime"] >= UNFETCHED * 1000


# ---------------------------------------------------------------------------- live edits


def test_live_edit_of_retention_applies_to_jobs_already_stored(long_server):
    srv = long_server
    apply(srv, '[jobs]\nunfetched_retention = "1h"\nfetched_retention = "1h"\n')
    # the cleanup interval is the default (60 s) here: the edit shortens it too
    old_id, _, _, _ = finished_job(srv, durationMs=0)
    fetched_id, _, _, _ = finished_job(srv, durationMs=0)
    assert fetch(srv, fetched_id).status_code == 200
    time.sleep(1.2)  # both are past 1 s now, and kept: the retention is 1 h
    assert srv.watch(old_id)["status"] == "SUCCEEDED"
    assert srv.watch(fetched_id)["status"] == "SUCCEEDED"

    written = time.time()
    rewrite(
        srv,
        '[jobs]\nunfetched_retention = "1s"\nfetched_retention = "1h"\n'
        'cleanup_interval = "500ms"\n',
    )
    gone = watch_until_gone(srv, [old_id], 5)
    assert old_id in gone, f"the edit did not apply to the stored job:\n{srv.log()[-3000:]}"
    assert gone[old_id] - written <= 3.0, f"erased {gone[old_id] - written:.2f} s after the edit"
    assert_unknown(srv, old_id)
    # the fetched one follows fetched_retention, still 1 h
    assert srv.watch(fetched_id)["status"] == "SUCCEEDED"
    assert fetch(srv, fetched_id).status_code == 200

    rewrite(
        srv,
        '[jobs]\nunfetched_retention = "1h"\nfetched_retention = "1s"\n'
        'cleanup_interval = "500ms"\n',
    )
    written = time.time()
    gone = watch_until_gone(srv, [fetched_id], 5)
    assert fetched_id in gone and gone[fetched_id] - written <= 3.0
    assert_unknown(srv, fetched_id)


def test_per_service_retention_override(long_server):
    srv = long_server
    apply(
        srv,
        '[jobs]\nunfetched_retention = "1h"\nfetched_retention = "1h"\n'
        'cleanup_interval = "500ms"\n\n'
        '[services.XDemo]\nunfetched_retention = "1s"\n',
    )
    demo_id, _, _, demo_end = finished_job(srv, durationMs=0)
    crashy_id, done, _, _ = finished_job(srv, "XCrashy", mode="sleep", seconds=0)
    assert done["status"] == "SUCCEEDED"
    gone = watch_until_gone(srv, [demo_id], 1.0 + LATE + 2)
    assert demo_id in gone, "the XDemo job outlived its service's unfetched retention"
    assert gone[demo_id] <= demo_end + 1.0 + LATE
    assert_unknown(srv, demo_id)
    # the XCrashy job follows [jobs]: 1 h; several cleanups later it is still there
    deadline = time.time() + 2.5
    while time.time() < deadline:
        assert srv.watch(crashy_id)["status"] == "SUCCEEDED", "the XCrashy job was erased"
        time.sleep(0.1)
    r = fetch(srv, crashy_id, "XCrashy")
    assert r.status_code == 200 and r.json()["pid"] > 0, r.text

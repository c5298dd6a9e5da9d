"""Jobs survive the server: SIGTERM hands running jobs back, SIGKILL re-runs them."""

import signal
import time

#: Every job's RUNNING line (with its attempt) is written at DEBUG.
DEBUG_LOG = '[log]\nlevel = "debug"\n'


def test_sigkill_mid_job_then_restart_completes_the_job(fresh_server):
    srv = fresh_server(extra=DEBUG_LOG).start()
    job = srv.start_job(durationMs=20000, steps=20)
    running = srv.wait_status(job["id"], "RUNNING")
    done_before = srv.start_job(durationMs=0)
    srv.wait_done(done_before["id"])
    queued = [srv.start_job(durationMs=100) for _ in range(3)]
    assert running["status"] == "RUNNING"
    srv.kill()

    srv = fresh_server(port=srv.port, extra=DEBUG_LOG)
    srv.start()
    # the same node finds its lost job at start and runs it again from the start
    assert srv.call("XDemo", "fetchSimulateResponse", {"id": done_before["id"]})["stepsDone"] == 1
    for q in queued:
        assert srv.wait_done(q["id"])["status"] == "SUCCEEDED"
    # it runs again from the start, as its second attempt; a stop ends it early
    rerun = srv.wait_status(job["id"], "RUNNING")
    assert f"job {job['id']} XDemo.simulate RUNNING on worker" in srv.log()
    assert (
        "(attempt 2)"
        in srv.log().split(f"job {job['id']} XDemo.simulate RUNNING")[-1].splitlines()[0]
    )
    assert rerun["elapsedTime"] > 0
    while "progress" not in srv.watch(job["id"], progressUpdatePeriod=250):
        pass
    srv.call("XRuntime", "stopJob", {"id": job["id"]})
    assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert srv.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})["stepsDone"] >= 1
    assert "was running on a node that died" in srv.log()


def test_after_max_attempts_the_job_fails_with_internal_error(fresh_server):
    extra = """
        [jobs]
        max_attempts = 1
        """
    srv = fresh_server(extra=extra).start()
    job = srv.start_job(durationMs=20000)
    srv.wait_status(job["id"], "RUNNING")
    srv.kill()
    srv = fresh_server(port=srv.port, extra=extra).start()
    assert srv.watch(job["id"])["status"] == "FAILED"
    r = srv.post("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    body = r.json()
    assert r.status_code == 500 and body["faultInfo"]["$type"] == "InternalErrorFault"
    assert "max_attempts = 1" in body["message"]


def test_sigterm_hands_running_jobs_back_and_exits_quickly(fresh_server):
    srv = fresh_server(extra=DEBUG_LOG).start()
    job = srv.start_job(durationMs=1500, steps=3)
    srv.wait_status(job["id"], "RUNNING")
    t0 = time.monotonic()
    assert srv.stop(signal.SIGTERM) == 0
    assert time.monotonic() - t0 < 10
    assert "handed back to the queue" in srv.log()
    srv = fresh_server(port=srv.port, extra=DEBUG_LOG).start()
    done = srv.wait_done(job["id"])
    assert done["status"] == "SUCCEEDED"
    assert srv.call("XDemo", "fetchSimulateResponse", {"id": job["id"]})["stepsDone"] == 3
    # the hand-back did not count as an attempt
    assert f"job {job['id']} XDemo.simulate RUNNING on worker" in srv.log()
    assert (
        "(attempt 1)"
        in srv.log().split(f"job {job['id']} XDemo.simulate RUNNING")[-1].splitlines()[0]
    )


def test_watch_held_during_shutdown_answers(fresh_server):
    import threading

    srv = fresh_server().start()
    job = srv.start_job(durationMs=30000)
    srv.wait_status(job["id"], "RUNNING")
    answers = []
    t = threading.Thread(
        target=lambda: answers.append(
            srv.post("XRuntime", "watchJob", {"id": job["id"], "maximumPollingPeriod": 50000})
        )
    )
    t.start()
    srv.wait_held(1)
    srv.stop(signal.SIGINT)
    t.join(10)
    assert answers and answers[0].status_code == 200

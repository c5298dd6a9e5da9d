"""Progress is coalesced in the worker process: a function that reports without pause
costs the server a few messages a second, and the latest value still arrives."""

import json
import threading
import time
from itertools import pairwise

from tests.waiting import until
from xruntime.engine import worker
from xruntime.engine.messages import Done, Failure, Progress, Result, RunJob
from xruntime.engine.worker import PROGRESS_PERIOD, WorkerJobContext, run_one
from xruntime.protocol.types import BulkProgress


class RecordingConn:
    """Stands in for the worker's end of the pipe: records what is sent, and when."""

    def __init__(self):
        self.sent = []
        self.lock = threading.Lock()

    def send(self, message):
        with self.lock:
            self.sent.append((time.monotonic(), message))

    def messages(self, kind=object):
        with self.lock:
            return [m for _, m in self.sent if isinstance(m, kind)]


def context(conn, job_id="job-1"):
    return WorkerJobContext(conn, job_id, threading.Event(), type("V", (), {"value": 0})())


def successful(message: Progress) -> int:
    return json.loads(message.progress)["successful"]


def test_a_flood_of_reports_sends_a_handful_of_messages_and_the_last_value_before_the_outcome():
    """The rule is checked on the times the messages were sent, not against how long the
    flood took: no two progress messages less than PROGRESS_PERIOD apart, but the flush
    before the outcome.  The flood lasts several periods (at least 10 000 reports), so
    that on any machine the timer and the function's thread both send, and race."""
    conn = RecordingConn()
    job = context(conn)
    start = time.monotonic()
    i = 0
    while i < 10_000 or time.monotonic() - start < 4 * PROGRESS_PERIOD:
        i += 1
        job.report_progress(BulkProgress(remaining=1_000_000 - i, successful=i, failed=0))
    job.send_outcome(Result(b"{}"))
    took = time.monotonic() - start  # the outcome included
    with conn.lock:
        sent = list(conn.sent)
    times = [t for t, m in sent if isinstance(m, Progress)]
    progress = [m for _, m in sent if isinstance(m, Progress)]
    assert successful(progress[0]) == 1  # the first report goes out at once
    gaps = [b - a for a, b in pairwise(times)]
    assert all(gap >= PROGRESS_PERIOD for gap in gaps[:-1]), (
        f"progress messages less than {PROGRESS_PERIOD} s apart: gaps {[round(g, 4) for g in gaps]}"
    )
    # hence at most one per period from the first, and the flush before the outcome
    assert len(progress) <= took / PROGRESS_PERIOD + 2
    assert successful(progress[-1]) == i  # the last value is not lost
    assert sent[-1][1] == Done("job-1", Result(b"{}"))  # and it precedes the outcome
    assert [successful(m) for m in progress] == sorted(successful(m) for m in progress)


def test_a_kept_report_is_sent_when_its_turn_comes_even_if_the_function_goes_quiet():
    conn = RecordingConn()
    job = context(conn)
    job.report_progress(BulkProgress(remaining=2, successful=1, failed=0))
    job.report_progress(BulkProgress(remaining=1, successful=2, failed=0))  # kept back
    assert [successful(m) for m in conn.messages(Progress)] == [1]
    until(lambda: len(conn.messages(Progress)) >= 2, "the progress kept back sent")
    first, second = [t for t, m in conn.sent]
    assert [successful(m) for m in conn.messages(Progress)] == [1, 2]
    assert second - first >= PROGRESS_PERIOD * 0.9
    job.send_outcome(Result(b"{}"))
    assert len(conn.messages(Progress)) == 2  # nothing was left to send


def test_nothing_is_sent_after_the_outcome():
    conn = RecordingConn()
    job = context(conn)
    job.report_progress(BulkProgress(remaining=1, successful=1, failed=0))
    job.send_outcome(Failure("{}"))
    job.report_progress(BulkProgress(remaining=0, successful=2, failed=0))  # a stray thread
    time.sleep(PROGRESS_PERIOD * 1.5)  # (a progress kept back would be sent by now)
    assert [type(m) for m in conn.messages()] == [Progress, Done]


def test_xdemo_reporting_without_pause_sends_few_messages_and_ends_with_its_last_step(monkeypatch):
    conn = RecordingConn()
    monkeypatch.setattr(worker, "PROGRESS_PERIOD", 60.0)  # longer than the whole run
    run_one(
        conn,
        threading.Event(),
        type("V", (), {"value": 0})(),
        RunJob("job-2", "XDemo", "simulate", json.dumps({"steps": 20_000, "durationMs": 0})),
    )
    sent = conn.messages()
    assert [type(m) for m in sent] == [Progress, Progress, Done]
    assert [successful(m) for m in sent[:2]] == [1, 20_000]
    assert json.loads(sent[-1].outcome.stored)["stepsDone"] == 20_000

"""watchJob (docs/protocol.md §4): clamping of its two periods, request faults, and timing.

The timing tests run ``JobManager.watch`` on a real store and Notifier while another
thread changes the job through the store and then calls ``notifier.notify(job_id)``,
as the supervisor does.  Tolerances are generous (a loaded two-core CI machine).
"""

import asyncio
import gc
import json
import threading
import time
from types import SimpleNamespace

import pytest

from tests.waiting import PATIENCE, until
from xruntime.operations import watching
from xruntime.protocol import codec
from xruntime.protocol.faults import InvalidValueFault, MissingParameterFault, ProcessingFault
from xruntime.protocol.types import WatchRequest
from xruntime.protocol.watch import watch_periods
from xruntime.store import StoreUnavailable, now_ms
from xruntime.store.changes import MISSED

from .helpers import (
    claim_exactly,
    fault_json,
    progress_json,
    put_in_state,
    result_json,
    stored_response,
)

#: How late an answer may come after the moment it is due (scheduling on 2 busy cores).
SLACK = 0.2
#: "At once": how long after a change (made and notified) its watch may answer.  Any
#: wrong behaviour (answering at maximumPollingPeriod) would be seconds late.
AT_ONCE = 0.25


# --------------------------------------------------------------------------- clamping


@pytest.mark.parametrize(
    "update, maximum, expected",
    [
        (None, None, (1000, 50000)),  # defaults
        (250, None, (250, 50000)),
        (249, None, (250, 50000)),  # under 250: 250
        (0, None, (250, 50000)),
        (-1, None, (250, 50000)),  # negative ones too
        (-100000, -5, (250, 250)),
        (1, 1, (250, 250)),
        (1000, 5000, (1000, 5000)),
        (50000, None, (50000, 50000)),
        (50001, None, (50000, 50000)),  # over 50000: 50000
        (10**12, 10**12, (50000, 50000)),
        (None, 100, (1000, 1000)),  # the maximum is at least the update period
        (None, 999, (1000, 1000)),
        (3000, 2000, (3000, 3000)),
        (None, 50001, (1000, 50000)),  # and at most 50000
        (None, 250, (1000, 1000)),
        (300, 400, (300, 400)),
        (None, 0, (1000, 1000)),
    ],
)
def test_watch_period_clamping(update, maximum, expected):
    assert watch_periods(update, maximum) == expected


@pytest.mark.parametrize(
    "update, maximum, parameter",
    [
        (2.5, None, "progressUpdatePeriod"),
        ("abc", None, "progressUpdatePeriod"),
        (True, None, "progressUpdatePeriod"),
        (None, 2.5, "maximumPollingPeriod"),
        (None, "500", "maximumPollingPeriod"),
        (None, False, "maximumPollingPeriod"),
    ],
)
def test_watch_periods_refuse_non_integers(update, maximum, parameter):
    with pytest.raises(InvalidValueFault) as excinfo:
        watch_periods(update, maximum)
    assert excinfo.value.parameter == parameter


@pytest.mark.parametrize(
    "field, value",
    [
        ("progressUpdatePeriod", 2.5),
        ("progressUpdatePeriod", "abc"),
        ("progressUpdatePeriod", "1000"),
        ("progressUpdatePeriod", True),
        ("progressUpdatePeriod", [1000]),
        ("maximumPollingPeriod", 0.5),
        ("maximumPollingPeriod", "abc"),
        ("maximumPollingPeriod", {"ms": 1}),
    ],
)
def test_watch_request_with_non_integer_period_is_invalid_value(field, value):
    with pytest.raises(InvalidValueFault) as excinfo:
        codec.decode({"id": "x", field: value}, WatchRequest)
    fault = excinfo.value
    assert type(fault) is InvalidValueFault
    assert fault.parameter == field


@pytest.mark.parametrize("data", [{}, {"progressUpdatePeriod": 1000}, {"id": None}])
def test_watch_request_without_id_is_missing_parameter(data):
    with pytest.raises(MissingParameterFault) as excinfo:
        codec.decode(data, WatchRequest)
    assert excinfo.value.parameter == "id"


@pytest.mark.parametrize("value", [-5, 0, 100, 249])
def test_watch_request_small_integers_are_accepted_and_clamped(value):
    request = codec.decode(
        {"id": "x", "progressUpdatePeriod": value, "maximumPollingPeriod": value}, WatchRequest
    )
    assert watch_periods(request.progressUpdatePeriod, request.maximumPollingPeriod) == (250, 250)


def test_watch_with_non_integer_period_is_refused_before_waiting(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    started = time.monotonic()
    with pytest.raises(InvalidValueFault) as excinfo:
        jobs.watch(job_id, 2.5)
    assert excinfo.value.parameter == "progressUpdatePeriod"
    assert time.monotonic() - started < AT_ONCE


# --------------------------------------------------------------------------- timing


def timed(fn, *args):
    started = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - started


def later(delay, action):
    """Run ``action`` in another thread ``delay`` seconds from now; answers the thread
    and a list that receives the monotonic time the action finished at."""
    done = []

    def run():
        time.sleep(delay)
        action()
        done.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def change_progress(jobs, job_id, successful):
    def action():
        assert jobs.store.set_progress(
            job_id, progress_json(remaining=5 - successful, successful=successful)
        )
        jobs.notifier.notify(job_id)

    return action


@pytest.mark.parametrize("state", ["SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"])
def test_terminal_or_unknown_job_answers_at_once(jobs, simulate_op, state):
    job_id = put_in_state(jobs, simulate_op, state)
    job, elapsed = timed(jobs.watch, job_id, 50000, 50000)
    assert job.status == state
    assert job.id == job_id
    assert elapsed < AT_ONCE  # of a 50 s period


def test_change_before_the_period_is_answered_when_the_period_is_over(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    thread, _ = later(0.05, change_progress(jobs, job_id, 1))
    job, elapsed = timed(jobs.watch, job_id, 250, 5000)
    thread.join()
    assert elapsed >= 0.25, "a change is not answered before progressUpdatePeriod"
    assert elapsed <= 0.25 + SLACK, "once the period is over, an earlier change is answered"
    assert job.status == "RUNNING"
    assert job.progress.successful == 1


def test_change_after_the_period_is_answered_at_once(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    started = time.monotonic()
    thread, done = later(0.5, change_progress(jobs, job_id, 2))
    job = jobs.watch(job_id, 250, 5000)
    answered = time.monotonic()
    thread.join()
    assert job.progress.successful == 2
    assert answered - started >= 0.5
    assert answered - done[0] < AT_ONCE, "a watch must answer within a few ms of the change"


def test_status_change_counts_as_a_change(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")

    def stop():
        assert jobs.store.request_stop(job_id)
        jobs.notifier.notify(job_id)

    started = time.monotonic()
    thread, done = later(0.4, stop)
    job = jobs.watch(job_id, 250, 5000)
    answered = time.monotonic()
    thread.join()
    assert job.status == "STOPPING"
    assert answered - started >= 0.4
    assert answered - done[0] < AT_ONCE


def test_queued_job_claimed_counts_as_a_change(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "QUEUING")

    def claim():
        claim_exactly(jobs.store, job_id)
        jobs.notifier.notify(job_id)

    started = time.monotonic()
    thread, done = later(0.3, claim)
    job = jobs.watch(job_id, 250, 5000)
    answered = time.monotonic()
    thread.join()
    assert job.status == "RUNNING"
    assert answered - started >= 0.3
    assert answered - done[0] < AT_ONCE


def test_no_change_answers_at_maximum_polling_period_with_last_status(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING", progress=progress_json(3, 2))
    job, elapsed = timed(jobs.watch, job_id, 250, 500)
    assert 0.5 <= elapsed <= 0.5 + SLACK
    assert job.status == "RUNNING"
    assert job.progress.successful == 2


def test_notification_without_a_change_does_not_end_the_watch(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING", progress=progress_json(3, 2))
    thread, _ = later(0.3, lambda: jobs.notifier.notify(job_id))
    job, elapsed = timed(jobs.watch, job_id, 250, 700)
    thread.join()
    assert elapsed >= 0.7, "only a real change (status or progress) answers early"
    assert job.status == "RUNNING"


@pytest.mark.parametrize("outcome", ["SUCCEEDED", "FAILED"])
def test_finishing_wakes_the_watch_at_once_even_before_the_period(jobs, simulate_op, outcome):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")

    def finish():
        kwargs = (
            {"result": result_json(stored_response())}
            if outcome == "SUCCEEDED"
            else {"fault": fault_json(ProcessingFault("failed"))}
        )
        assert jobs.store.finish(job_id, outcome, now_ms(), **kwargs)
        jobs.notifier.notify(job_id)

    started = time.monotonic()
    thread, done = later(0.1, finish)
    job = jobs.watch(job_id, 5000, 10000)
    answered = time.monotonic()
    thread.join()
    assert job.status == outcome
    assert answered - started < 1.0, "a terminal state is answered before progressUpdatePeriod"
    assert answered - done[0] < AT_ONCE


def test_deleting_a_running_job_wakes_the_watch_at_once(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    thread, done = later(0.1, lambda: jobs.delete(job_id))
    job = jobs.watch(job_id, 5000, 10000)
    answered = time.monotonic()
    thread.join()
    assert job.status == "DELETED"
    assert answered - done[0] < AT_ONCE


def test_erasing_a_queued_job_answers_unknown_at_once(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "QUEUING")
    thread, done = later(0.1, lambda: jobs.delete(job_id))
    job = jobs.watch(job_id, 5000, 10000)
    answered = time.monotonic()
    thread.join()
    assert job.status == "UNKNOWN"
    assert job.elapsedTime == 0
    assert answered - done[0] < AT_ONCE


def hold_watches(jobs, job_id, count):
    """``count`` watches held on the job, each from its own thread; answers the threads
    and the list that receives (answer, monotonic time answered)."""
    answers = []

    def watch():
        answers.append((jobs.watch(job_id, 5000, 10000), time.monotonic()))

    watchers = [threading.Thread(target=watch, daemon=True) for _ in range(count)]
    for w in watchers:
        w.start()
    until(lambda: jobs.watches.waiting() >= count, f"{count} watches waiting")
    assert jobs.watches.waiting() == count
    return watchers, answers


def test_every_watcher_of_a_job_is_woken(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    watchers, answers = hold_watches(jobs, job_id, 5)
    assert jobs.store.finish(job_id, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    jobs.notifier.notify(job_id)
    finished = time.monotonic()
    for w in watchers:
        w.join(2)
    assert [job.status for job, _ in answers] == ["SUCCEEDED"] * 5
    assert all(at - finished < AT_ONCE for _, at in answers)
    assert jobs.watches.waiting() == 0, "answered watches must unsubscribe"


def test_closing_the_notifier_answers_waiting_watches(jobs, simulate_op):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    thread, done = later(0.1, jobs.notifier.close)
    job = jobs.watch(job_id, 250, 10000)
    answered = time.monotonic()
    thread.join()
    assert job.status == "RUNNING"
    assert answered - done[0] < AT_ONCE


def test_watch_answer_has_the_stored_elapsed_time(jobs, simulate_op, store):
    job_id = put_in_state(jobs, simulate_op, "SUCCEEDED")
    rec = store.get(job_id)
    assert jobs.watch(job_id).elapsedTime == rec.finished_at - rec.queued_at
    assert json.loads(rec.result)["stepsDone"] == 3


def test_watchers_woken_by_one_change_cost_one_read_and_share_one_answer(jobs, simulate_op, store):
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    watchers, answered = hold_watches(jobs, job_id, 20)
    reads = []
    peek = store.peek
    store.peek = lambda i: reads.append(i) or peek(i)
    try:
        assert store.finish(job_id, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
        jobs.notifier.notify(job_id)
        for w in watchers:
            w.join(2)
    finally:
        store.peek = peek
    answers = [job for job, _ in answered]
    assert [a.status for a in answers] == ["SUCCEEDED"] * 20
    assert reads == [job_id], "one read for every watcher of the job"
    assert all(a is answers[0] for a in answers), "one answer, encoded once per binding"


@pytest.mark.parametrize("watchers, paused", [(watching.BURST, True), (watching.BURST - 1, False)])
def test_a_burst_of_woken_watchers_takes_its_steps_with_the_collector_paused(watchers, paused):
    """benchmarks/longpoll.py: a full garbage collection in the middle of 5 000 answers
    delayed the last of them by up to 0.6 s.  Waking a burst of watchers pauses the
    collector until each has taken its first step, and it is on again after them."""

    async def main():
        job = watching.JobWatch(SimpleNamespace(closed=False), "job")
        collector_on = []

        async def watcher():
            await job.next(None, 60)
            collector_on.append(gc.isenabled())

        tasks = [asyncio.create_task(watcher()) for _ in range(watchers)]
        await asyncio.sleep(0)  # every one of them waits now
        job.wake(watching.Snapshot(None))
        await asyncio.gather(*tasks)
        return collector_on, gc.isenabled()

    assert gc.isenabled()
    collector_on, after = asyncio.run(main())
    assert collector_on == [not paused] * watchers
    assert after


def test_a_change_before_the_period_is_over_wakes_no_watcher_until_then():
    """stopJob on a job with 10 000 watchers (RUNNING → STOPPING, then its end) woke
    each of them at STOPPING only to wait again (benchmarks/longpoll.py).  A change
    before a watcher's progress update period is over now only moves its timer: it is
    answered when the period is over, with the change, as before."""
    running = SimpleNamespace(status="RUNNING", progress=None, owner=None)
    stopping = SimpleNamespace(status="STOPPING", progress=None, owner=None)
    store = SimpleNamespace(peek=lambda job_id: store.rec, rec=running, answers_at_once=False)

    async def until(condition):
        for _ in range(int(PATIENCE / 0.01)):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"not within {PATIENCE:g} s")

    async def main():
        watches = watching.Watches(store, SimpleNamespace(listen=lambda changed, close: None))
        loop = asyncio.get_running_loop()
        began = loop.time()
        tasks = [asyncio.create_task(watches.watch("job", 2000, 10000)) for _ in range(3)]
        await until(lambda: "job" in watches._jobs and len(watches._jobs["job"]._quiet) == 3)
        job = watches._jobs["job"]
        store.rec = stopping
        watches._changed("job")
        await until(lambda: job.changes == 2)
        assert not job._waiters and len(job._quiet) == 3, "nobody woken by the change"
        assert all(wait.moved for wait in job._quiet.values()), (
            "each timer moved to its period's end"
        )
        answers = await asyncio.gather(*tasks)
        return answers, loop.time() - began

    answers, took = asyncio.run(main())
    assert all(snap.rec is stopping and changed for snap, changed in answers)
    assert 2.0 <= took < 10.0, "answered when the period was over"


# --------------------------------------------------------------------------- a feed cut off


def read_once(jobs, job_id):
    """Wait until the held watches of the job have read it (and no read is under way)."""

    def read():
        watch = jobs.watches._jobs.get(job_id)
        return watch is not None and watch.snapshot is not None and not watch._reading

    until(read, "the held watches read their job")


def test_changes_missed_by_the_feed_are_read_again_at_once(jobs, simulate_op):
    """A change made where this process's feed could not hear it (its connection to the
    database was lost), then ``MISSED`` (the feed is back): the watch answers it now,
    not at maximumPollingPeriod."""
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    watchers, answers = hold_watches(jobs, job_id, 2)
    read_once(jobs, job_id)
    assert jobs.store.finish(job_id, "SUCCEEDED", now_ms(), result=result_json(stored_response()))
    time.sleep(0.3)  # (a told change would have been answered by now; this one is not)
    assert answers == [], "an untold change woke a watch"
    jobs.notifier.notify_local(MISSED)
    told = time.monotonic()
    for w in watchers:
        w.join(2)
    assert [job.status for job, _ in answers] == ["SUCCEEDED"] * 2
    assert all(at - told < AT_ONCE for _, at in answers)


def test_a_feed_cut_off_from_an_unreachable_store_answers_watches_with_the_outage(
    jobs, simulate_op, monkeypatch
):
    """The feed's connection is lost because the database cannot be reached: every held
    watch reads its job again, and answers the store's outage (TemporarilyUnavailable
    in every binding) rather than hold its client until maximumPollingPeriod."""
    job_id = put_in_state(jobs, simulate_op, "RUNNING")
    outcomes = []

    def watch():
        try:
            outcomes.append(jobs.watch(job_id, 5000, 50000))
        except Exception as exc:
            outcomes.append(exc)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    until(lambda: jobs.watches.waiting() >= 1, "the watch waiting")
    read_once(jobs, job_id)

    def away(job_id):
        raise StoreUnavailable("the job store cannot be reached")

    monkeypatch.setattr(jobs.store, "peek", away)
    jobs.notifier.notify_local(MISSED)
    told = time.monotonic()
    watcher.join(2)
    assert time.monotonic() - told < AT_ONCE + 0.5
    assert len(outcomes) == 1 and isinstance(outcomes[0], StoreUnavailable), outcomes

"""The bell that wakes idle worker slots (engine/work_bell.py): one slot a ring, no ring
lost while no slot is idle, every slot at shutdown."""

import threading

from xruntime.engine.work_bell import WorkBell

LONG = 60.0  # s an idle slot would wait unwoken: far longer than any test here runs


def idle_slot(bell: WorkBell) -> tuple[threading.Thread, threading.Event]:
    """A thread that waits on the bell as an idle slot does, and ends when woken."""
    event = threading.Event()
    thread = threading.Thread(target=bell.wait, args=(event, LONG), daemon=True)
    thread.start()
    return thread, event


def wait_until_idle(bell: WorkBell, count: int) -> None:
    for _ in range(10_000):
        with bell._lock:
            if len(bell._idle) == count:
                return
        threading.Event().wait(0.001)
    raise AssertionError(f"{count} slots never went idle")


def test_a_ring_wakes_one_idle_slot_the_last_that_went_idle():
    bell = WorkBell()
    first, _ = idle_slot(bell)
    wait_until_idle(bell, 1)
    second, _ = idle_slot(bell)
    wait_until_idle(bell, 2)
    bell.ring()
    second.join(LONG / 2)
    assert not second.is_alive()
    assert first.is_alive()  # (it would wait LONG: only a ring ends it)
    bell.ring()
    first.join(LONG / 2)
    assert not first.is_alive()


def test_a_ring_while_no_slot_is_idle_is_kept_for_the_next_that_goes_idle():
    """(A ring during a slot's look: the job it rang for may have come after the look
    read the queue.)"""
    bell = WorkBell()
    bell.looking()
    bell.ring()
    slot, _ = idle_slot(bell)
    slot.join(LONG / 2)
    assert not slot.is_alive()
    again, _ = idle_slot(bell)  # the ring was taken: the next one waits
    wait_until_idle(bell, 1)
    assert again.is_alive()
    bell.ring_all()
    again.join(LONG / 2)


def test_a_look_sees_what_rang_before_it_began():
    bell = WorkBell()
    bell.ring()
    bell.looking()
    slot, _ = idle_slot(bell)
    wait_until_idle(bell, 1)
    assert slot.is_alive()
    bell.ring()
    slot.join(LONG / 2)
    assert not slot.is_alive()


def test_ring_all_wakes_every_idle_slot_and_the_next():
    bell = WorkBell()
    slots = [idle_slot(bell)[0] for _ in range(3)]
    wait_until_idle(bell, 3)
    bell.ring_all()
    for slot in slots:
        slot.join(LONG / 2)
        assert not slot.is_alive()
    late, _ = idle_slot(bell)
    late.join(LONG / 2)
    assert not late.is_alive()


def test_a_slot_whose_wait_timed_out_is_no_longer_idle():
    bell = WorkBell()
    bell.wait(threading.Event(), 0.001)
    assert bell._idle == []
    bell.ring()  # (kept: no slot is idle)
    assert bell._rung


def after_run(bell: WorkBell, saw_more: bool) -> tuple[threading.Thread, list]:
    """A thread whose slot's run just ended, as ``WorkerSlot.run`` calls the bell; its
    list gets what ``after_run`` answered (True: it went idle first)."""
    answered: list = []
    event = threading.Event()
    thread = threading.Thread(
        target=lambda: answered.append(bell.after_run(event, saw_more, LONG)), daemon=True
    )
    thread.start()
    return thread, answered


def test_after_a_run_a_slot_goes_idle_without_a_look_when_nothing_may_wait():
    """(Every job queued since its look rang: a look would find nothing.)"""
    bell = WorkBell()
    bell.looking()
    bell.seen(waiting=True, taken=True)  # its look found its own job, and no more
    slot, answered = after_run(bell, saw_more=False)
    wait_until_idle(bell, 1)
    assert slot.is_alive() and answered == []
    bell.ring()  # a job is queued: it wakes, and looks
    slot.join(LONG / 2)
    assert answered == [True]


def test_after_a_run_a_slot_looks_at_once_where_work_may_wait_for_it():
    bell = WorkBell()
    assert bell.after_run(threading.Event(), True, LONG) is False  # its look saw more
    bell.looking()
    bell.ring()  # rang during the run, no slot idle: kept
    slot, answered = after_run(bell, saw_more=False)
    slot.join(LONG / 2)
    assert answered == [True]  # (went idle, and was woken at once by the kept ring)


def test_work_no_slot_could_take_makes_every_runs_end_look_until_a_look_finds_none():
    """A user at their running limit: another slot's look found her next job and could
    not take it; the end of her running job may free it, so that run's slot looks at
    once rather than leaving it for an idle slot's next look."""
    bell = WorkBell()
    bell.seen(waiting=True, taken=False)
    assert bell.after_run(threading.Event(), False, LONG) is False
    bell.seen(waiting=True, taken=True)  # a look that took some: still held back
    assert bell.after_run(threading.Event(), False, LONG) is False
    bell.seen(waiting=False, taken=False)  # nothing waits at all any more
    slot, answered = after_run(bell, saw_more=False)
    wait_until_idle(bell, 1)
    assert slot.is_alive()
    bell.ring_all()
    slot.join(LONG / 2)

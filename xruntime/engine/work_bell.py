"""The bell that wakes idle worker slots when work may be waiting: one slot a ring.

Every queued job rings it (the change feed's "a job is queued", a retry planned, a job
handed back, a parent's children done).  A ring used to wake every idle slot: each
read whether work waited, each found the one new job, each tried to claim it, and all
but one claim were write transactions that found nothing (two a job at one client, on
a node of two workers), on the job's way to its run.  Now a ring wakes the slot that
went idle last (its connection's pages and its thread are the warmest), and a slot
that took work while more waited (``WorkerSlot.run``: its look counted two queued
jobs, or a parent waiting) rings again for the next idle one: as many slots wake as
there is work, one after the other.

A ring while no slot is idle is kept, and a slot's look clears it (``looking``): a
slot that goes idle after a ring that came during its look looks again at once, so no
job queued meanwhile waits for the slot's idle period.  ``ring_all`` wakes every slot
(the node shuts down).

A slot whose run ended looks again at once only where work may wait for it
(``after_run``): the bell rang since its look, that look saw more than the job it took,
or a look found work that no slot could take then (``seen``: a user at their running
limit, a retry not yet due, a parent whose children run, a service not served here),
which a run's end may free.  Otherwise it goes idle without a look, as every job queued
since rang: at one client, that look was one read a job that found nothing.
"""

import threading


class WorkBell:
    """Wakes idle worker slots: one a ``ring``, every one at ``ring_all``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[threading.Event] = []  # idle slots' events, in the order they idled
        self._rung = False  # rung while no slot was idle, since the last look began
        #: a look found work waiting that no slot could take then, and no look since
        #: found none waiting at all (``seen``)
        self.held_back = False

    def ring(self) -> None:
        """Work may be waiting: wake the slot that went idle last (or, when none is
        idle, the next slot to go idle does not wait)."""
        with self._lock:
            if self._idle:
                self._idle.pop().set()
            else:
                self._rung = True

    def ring_all(self) -> None:
        """Wake every idle slot, and the next that goes idle."""
        with self._lock:
            for event in self._idle:
                event.set()
            self._idle.clear()
            self._rung = True

    def looking(self) -> None:
        """A slot begins to look for work: what rang before is seen by this look."""
        self._rung = False

    def seen(self, waiting: bool, taken: bool) -> None:
        """What a slot's look found: whether work waited (a queued job, a parent waiting
        for its children), and whether the slot took some."""
        if waiting and not taken:  # kept until a look finds nothing waiting at all
            self.held_back = True
        elif not waiting:
            self.held_back = False

    def after_run(self, event: threading.Event, saw_more: bool, timeout: float) -> bool:
        """A slot's run ended (``saw_more``: the look that found its job saw more work
        than that job): False where it should look again at once; else it waits idle
        as in ``wait`` first, and True."""
        if saw_more or self.held_back:
            return False
        self.wait(event, timeout)
        return True

    def wait(self, event: threading.Event, timeout: float) -> None:
        """Wait, idle, until a ring wakes ``event`` (the slot's own) or ``timeout`` s
        pass; at once when the bell rang since the slot's look began."""
        with self._lock:
            if self._rung:
                self._rung = False
                return
            event.clear()
            self._idle.append(event)
        event.wait(timeout)
        with self._lock:
            if event in self._idle:  # (timed out: no ring took it off)
                self._idle.remove(event)

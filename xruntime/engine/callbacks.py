"""Delivering callbacks from the store's outbox (docs/protocol.md §14), in each node's
callbacks process (``serving.delivery``).

``CallbackDelivery`` is a thread that takes due events from the outbox (a lease: nodes
sharing the store take different ones) and hands each to a bounded pool of sending
threads, ``[callbacks] concurrency`` at once: a receiver that answers in 10 s holds one
of them, never the job nor the other deliveries.  It is woken the moment the change
feed reports a change (of any of the node's processes, or of another node), reads when
the next event is due (one indexed read), and otherwise sleeps until the next retry is
due; with ``[callbacks] allowed`` empty (callbacks off) it does not look at each
change, only every ``IDLE_S``.

Each attempt ends delivered (a 2xx), or due again after ``retry_delay`` doubled per
attempt, or given up after ``max_attempts`` or when its target is refused; the loop
writes the attempts that ended since its last look in one transaction
(``callbacks_attempted``), with the job's history of each, before it takes more.
Worker processes and HTTP processes never deliver.
"""

import http.client
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..protocol.states import SHOWS_PROGRESS, Status
from ..settings.model import Settings
from ..store import CallbackAttempt, CallbackEvent, JobStore, StoreUnavailable, now_ms
from . import webhooks

log = logging.getLogger(__name__)

#: s between two looks at the outbox when nothing wakes the delivery (a change told
#: nowhere, another node's lease running out).
IDLE_S = 2.0
#: s the attempts under way get to end when the node stops.
CLOSE_WAIT_S = 5.0
#: Sending threads at most, whatever ``[callbacks] concurrency`` says.
MAX_THREADS = 1000


def body_of(event: CallbackEvent) -> bytes:
    """The POSTed body: ``type`` and the ``Job`` as ``watchJob`` answers it in JSON (its
    progress is the stored JSON, the codec's form, as the JSON binding writes it)."""
    data: dict = {
        "type": event.type,
        "id": event.job_id,
        "status": event.status,
        "elapsedTime": event.elapsed,
    }
    if event.progress and SHOWS_PROGRESS[Status(event.status)]:
        data["progress"] = json.loads(event.progress)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def message_id(event: CallbackEvent) -> str:
    """``webhook-id``: one per event, the same at every attempt (the outbox never uses
    a row's number twice)."""
    return f"{event.job_id}-{event.seq}"


class CallbackDelivery:
    """The node's deliveries of callbacks (see the module's docstring)."""

    def __init__(
        self,
        store: JobStore,
        settings: Callable[[], Settings],
        node: str,
        resolver: webhooks.Resolver = webhooks.resolve,
    ) -> None:
        self.store = store
        self.settings = settings
        self.node = node
        self.resolver = resolver
        self.wake = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._attempt_ended = threading.Condition(self._lock)
        self._in_flight = 0
        self._ended: list[CallbackAttempt] = []  # attempts not written yet
        self._connections = webhooks.Connections()
        self._pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="callback")
        self._thread = threading.Thread(target=self._loop, name="callbacks", daemon=True)

    def start(self) -> None:
        """Take back what this node's previous run was delivering, and start."""
        try:
            released = self.store.release_callbacks(self.node, now_ms())
            if released:
                log.info(
                    "%d callbacks this node was delivering when it stopped are due again", released
                )
        except StoreUnavailable as exc:
            log.warning("callbacks of this node's previous run not released now: %s", exc)
        self._thread.start()

    def changed(self, _job_id: str) -> None:
        """A job changed (the change feed): an event may be in the outbox."""
        if self.settings().callbacks.allowed:
            self.wake.set()

    def close(self) -> None:
        """Stop taking events; the attempts under way get ``CLOSE_WAIT_S`` to end, and
        those that ended are written (the others are attempted again when their lease
        runs out)."""
        self._closed.set()
        self.wake.set()
        self._thread.join(CLOSE_WAIT_S)
        with self._lock:
            self._attempt_ended.wait_for(lambda: self._in_flight == 0, CLOSE_WAIT_S)
        self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            self._write_ended()
        except StoreUnavailable as exc:  # their leases run out: they are attempted again
            log.warning("callbacks: attempts that ended not written: %s", exc)
        self._connections.close()

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while not self._closed.is_set():
            self.wake.clear()
            try:
                wait_s = self._dispatch()
            except StoreUnavailable as exc:
                log.warning("callbacks: the store cannot be reached (%s); trying again", exc)
                wait_s = IDLE_S
            except Exception:  # never let the thread die: the next look may succeed
                log.exception("callbacks: unexpected error; trying again")
                wait_s = IDLE_S
            self.wake.wait(wait_s)

    def _dispatch(self) -> float:
        """Hand every due event to a sending thread, as many as are free; answers how
        long to sleep unless woken."""
        self._write_ended()
        settings = self.settings().callbacks
        with self._lock:
            free = min(settings.concurrency, MAX_THREADS) - self._in_flight
        if free <= 0:
            return IDLE_S  # a sending thread wakes the loop when it is done
        due = self.store.next_callback_due()
        if due is None:
            return IDLE_S
        now = now_ms()
        if due > now:
            return min((due - now) / 1000, IDLE_S)
        # an attempt takes connect, send and each read of the answer: each up to the timeout
        lease_ms = 4 * settings.timeout_ms + 10_000
        taken = self.store.claim_callbacks(self.node, now, lease_ms, free)
        with self._lock:
            self._in_flight += len(taken)
        for event, lease in taken:
            self._pool.submit(self._deliver, event, lease)
        # none taken: another node holds them in its transaction; look again shortly
        return 0.0 if taken else 0.05

    def _write_ended(self) -> None:
        """Write the attempts that ended since the last look, in one transaction; kept
        for the next look when the store cannot be reached."""
        with self._lock:
            ended, self._ended = self._ended, []
        if not ended:
            return
        try:
            self.store.callbacks_attempted(self.node, ended)
        except StoreUnavailable:
            with self._lock:
                self._ended[:0] = ended
            raise

    # ------------------------------------------------------------------ one attempt

    def _deliver(self, event: CallbackEvent, lease: int) -> None:
        ended = None
        try:
            message, due = self._attempt(event)
            ended = CallbackAttempt(event, lease, message, due)
        except Exception:  # its lease runs out: it is attempted again
            log.exception("callbacks: the attempt of %s failed unexpectedly", message_id(event))
        finally:
            with self._lock:
                self._in_flight -= 1
                if ended is not None:
                    self._ended.append(ended)
                self._attempt_ended.notify_all()
            self.wake.set()

    def _attempt(self, event: CallbackEvent) -> tuple[str, int | None]:
        """One attempt of ``event``: (its message for the history and the log, when it
        is due again or None when it is done: delivered or given up)."""
        settings = self.settings()
        rules = settings.callbacks
        attempt = event.attempts + 1
        what = f"callback {event.type} to {event.url}"
        status, outcome, final = None, "", False
        secret, key = settings.callback_secret(event.owner)
        try:
            if not secret:
                raise webhooks.Refused(f"{key} is not set: it cannot be signed")
            target = webhooks.target_of(event.url, rules.allowed, self.resolver)
            body = body_of(event)
            timestamp = now_ms() // 1000
            headers = {
                "webhook-id": message_id(event),
                "webhook-timestamp": str(timestamp),
                "webhook-signature": webhooks.signature(secret, message_id(event), timestamp, body),
            }
            status = self._connections.post(target, headers, body, rules.timeout_ms / 1000)
            outcome = f"HTTP {status}" + (
                " (redirects are not followed)" if 300 <= status < 400 else ""
            )
        except webhooks.Refused as exc:
            outcome, final = f"refused: {exc}", True
        except (OSError, http.client.HTTPException) as exc:
            outcome = _error_text(exc)
        except Exception as exc:  # any failure of an attempt counts as one (logged below)
            outcome = f"failed: {type(exc).__name__}: {_error_text(exc)}"
            log.debug("callbacks: the attempt of %s failed", message_id(event), exc_info=True)
        if status is not None and 200 <= status < 300:
            message, due = f"{what}: {outcome} (attempt {attempt})", None
            log.info("job %s: %s", event.job_id, message)
        elif final or attempt >= rules.max_attempts:
            message, due = f"{what}: {outcome}; given up after attempt {attempt}", None
            log.warning("job %s: %s", event.job_id, message)
        else:
            delay = rules.retry_after_ms(attempt)
            message = (
                f"{what}: {outcome} (attempt {attempt} of {rules.max_attempts}; "
                f"next in {delay / 1000:g} s)"
            )
            due = now_ms() + delay
            log.warning("job %s: %s", event.job_id, message)
        return message, due


def _error_text(exc: BaseException) -> str:
    """An attempt's error in a few words (``timed out``, ``connection refused``…)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return text if len(text) < 200 else text[:197] + "..."

"""Delivering callbacks from the store's outbox (docs/protocol.md §14), in each node's
callbacks process (``process``).

``CallbackDelivery`` is a thread that takes due events from the outbox (a lease: nodes
sharing the store take different ones) and hands each to a sending thread,
``[callbacks] concurrency`` at once.  It is woken the moment the change feed reports a
change (of any of the node's processes, or of another node), reads when the next event
is due (one indexed read), and otherwise sleeps until the next retry is due; with
``[callbacks] allowed`` empty (callbacks off) it does not look at each change, only
every ``IDLE_S``.

No receiver can hold the deliveries of others (issue 32):

- an attempt has one deadline, ``[callbacks] timeout``, for resolving the name,
  connecting, sending and reading the whole answer (``sending.Connections``): a
  receiver that answers a byte every few seconds is cut at the deadline;
- a claim holds an event for twice that and ``LEASE_MARGIN_MS`` more
  (``lease_ms_of``), so no other node takes an event while its attempt runs, and this
  node never claims again an event it is still attempting, or whose outcome it has not
  written yet;
- at most ``share_of(concurrency)`` = ``max(1, concurrency // 4)`` attempts are under
  way at once per owner and per target (host:port) on a node (``_Caps``; the claim
  leaves the others' events where they are, and takes owners round robin: the
  store's ``claim_callbacks``): one user's slow or dead targets hold at most a
  quarter of a node's senders, and another user's events never wait behind theirs;
- ``close`` cuts the attempts under way and writes them as failed attempts
  ("interrupted by the node's shutdown") within ``CLOSE_WAIT_S``.

Each attempt ends delivered (a 2xx), or due again after ``retry_delay`` doubled per
attempt, or given up after ``max_attempts`` or when its target is refused; the loop
writes the attempts that ended since its last look in one transaction
(``callbacks_attempted``), with the job's history of each, before it takes more.
Worker processes and HTTP processes never deliver.
"""

import http.client
import json
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..protocol.states import SHOWS_PROGRESS, Status
from ..settings.model import Settings
from ..store import CallbackAttempt, CallbackEvent, StoreUnavailable, now_ms
from .sending import Connections
from .signing import signature
from .targets import Resolver, TargetRefused, resolve, target_of

if TYPE_CHECKING:
    from ..store import JobStore

log = logging.getLogger(__name__)

#: s between two looks at the outbox when nothing wakes the delivery (a change told
#: nowhere, another node's lease running out).
IDLE_S = 2.0
#: s a closing delivery waits at most: for its loop, then for the attempts it cut.
CLOSE_WAIT_S = 5.0
#: s the cut attempts get at least to end (and write their own outcome).
CUT_WAIT_S = 1.0
#: Sending threads at most, whatever ``[callbacks] concurrency`` says.
MAX_THREADS = 1000
#: An owner, and a target (host:port), may have ``concurrency // SHARE_DIVISOR``
#: attempts under way at once on a node (at least one).
SHARE_DIVISOR = 4
#: ms a claim holds an event beyond twice its attempt's deadline (``lease_ms_of``).
LEASE_MARGIN_MS = 30_000
#: s before the next look when due events were left (a cap, another node's attempt).
BLOCKED_S = 0.25
#: What an attempt cut by the node's shutdown ended with.
INTERRUPTED = "interrupted by the node's shutdown"


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


class _Senders:
    """The sending threads: daemon threads, made as they are needed (at most
    ``MAX_THREADS``) and kept for the next attempts.  Daemons: a thread that hangs in
    what nothing can cut (a name being resolved) never holds the process's exit."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._waiting = 0  # threads waiting for work
        self._queued = 0  # work not taken yet

    def submit(self, work: Callable[..., None], *args: object) -> None:
        with self._lock:
            self._queued += 1
            if self._queued > self._waiting and self._threads < MAX_THREADS:
                self._threads += 1
                threading.Thread(target=self._run, name="callback", daemon=True).start()
        self._queue.put((work, args))

    def _run(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            work, args = self._queue.get()
            with self._lock:
                self._waiting -= 1
                self._queued -= 1
            if work is None:
                return
            work(*args)

    def close(self) -> None:
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._queue.put((None, ()))


class _Caps:
    """What a claim may still take: at most ``share`` attempts at once per owner and
    per target (host:port), counting those under way on this node."""

    def __init__(self, share: int, running: dict[int, tuple[CallbackEvent, int]]) -> None:
        self.share = share
        self.busy = set(running)
        self.owners: Counter[str] = Counter()
        self.targets: Counter[str] = Counter()
        for event, _ in running.values():
            self.owners[event.owner] += 1
            self.targets[target_key(event.url)] += 1

    def admit(self, event: CallbackEvent) -> bool:
        """Whether ``event`` may be taken now (and count it, if so)."""
        if event.seq in self.busy:  # under way here still (or ended, not written yet)
            return False
        target = target_key(event.url)
        if self.owners[event.owner] >= self.share or self.targets[target] >= self.share:
            return False
        self.owners[event.owner] += 1
        self.targets[target] += 1
        return True


def target_key(url: str) -> str:
    """``host:port`` of a callback URL, as the caps count targets (the URL as it is
    when it names none: it is refused at its attempt anyway)."""
    try:
        split = urlsplit(url)
        port = split.port or (443 if split.scheme.lower() == "https" else 80)
        return f"{(split.hostname or '').lower()}:{port}"
    except ValueError:
        return url


def share_of(concurrency: int) -> int:
    """The attempts one owner, or one target, may have under way at once on a node."""
    return max(1, concurrency // SHARE_DIVISOR)


def lease_ms_of(timeout_ms: int) -> int:
    """How long a claim holds an event: its attempt's deadline twice over, and
    ``LEASE_MARGIN_MS`` (resolving the name, writing the outcome) besides."""
    return 2 * timeout_ms + LEASE_MARGIN_MS


class CallbackDelivery:
    """The node's deliveries of callbacks (see the module's docstring)."""

    def __init__(
        self,
        store: "JobStore",
        settings: Callable[[], Settings],
        node: str,
        resolver: Resolver = resolve,
    ) -> None:
        self.store = store
        self.settings = settings
        self.node = node
        self.resolver = resolver
        self.wake = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._attempt_ended = threading.Condition(self._lock)
        self._running: dict[int, tuple[CallbackEvent, int]] = {}  # seq → (event, lease)
        self._ended: list[CallbackAttempt] = []  # attempts not written yet
        self._connections = Connections()
        self._senders = _Senders()
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
        """Stop taking events, cut the attempts under way, and write every attempt
        that ended, those cut as failed attempts ("interrupted by the node's
        shutdown"), all within ``CLOSE_WAIT_S`` and one write: none is left for its
        lease to run out.  An attempt that nothing can cut (a name being resolved)
        and that has not ended by then is written as interrupted too; its thread's
        own outcome is never written."""
        began = time.monotonic()
        self._closed.set()
        self.wake.set()
        self._thread.join(CLOSE_WAIT_S)
        self._connections.interrupt()
        left = max(CUT_WAIT_S, CLOSE_WAIT_S - (time.monotonic() - began))
        with self._lock:
            self._attempt_ended.wait_for(lambda: not self._running, left)
            for event, lease in self._running.values():
                message, due = self._outcome(event, None, INTERRUPTED, False)
                self._ended.append(CallbackAttempt(event, lease, message, due))
            self._running.clear()
        self._senders.close()
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
        """Hand due events to sending threads, as many as are free and the caps per
        owner and per target let through; answers how long to sleep unless woken."""
        self._write_ended()
        settings = self.settings().callbacks
        concurrency = min(settings.concurrency, MAX_THREADS)
        with self._lock:
            free = concurrency - len(self._running)
            caps = _Caps(share_of(concurrency), self._running)
            caps.busy.update(attempt.event.seq for attempt in self._ended)
        if free <= 0 or self._closed.is_set():
            return IDLE_S  # a sending thread wakes the loop when it is done
        due = self.store.next_callback_due()
        if due is None:
            return IDLE_S
        now = now_ms()
        if due > now:
            return min((due - now) / 1000, IDLE_S)
        taken = self.store.claim_callbacks(
            self.node,
            now,
            lease_ms_of(settings.timeout_ms),
            free,
            admit=caps.admit,
            per_owner=2 * caps.share,
        )
        with self._lock:
            for event, lease in taken:
                self._running[event.seq] = (event, lease)
        for event, lease in taken:
            self._senders.submit(self._deliver, event, lease)
        # none taken: those due wait for a cap (an attempt ending here wakes the loop),
        # for another node's attempt of their job, or another node took them
        return 0.0 if taken else BLOCKED_S

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
                # (gone: close() wrote it as interrupted; its own outcome is not written)
                if self._running.pop(event.seq, None) is not None and ended is not None:
                    self._ended.append(ended)
                self._attempt_ended.notify_all()
            self.wake.set()

    def _attempt(self, event: CallbackEvent) -> tuple[str, int | None]:
        """One attempt of ``event``: (its message for the history and the log, when it
        is due again or None when it is done: delivered or given up)."""
        began = time.monotonic()
        settings = self.settings()
        rules = settings.callbacks
        status, outcome, final = None, "", False
        secret, key = settings.callback_secret(event.owner)
        try:
            if not secret:
                raise TargetRefused(f"{key} is not set: it cannot be signed")
            target = target_of(event.url, rules.allowed, self.resolver)
            body = body_of(event)
            timestamp = now_ms() // 1000
            headers = {
                "webhook-id": message_id(event),
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signature(secret, message_id(event), timestamp, body),
            }
            # one deadline for the attempt, resolving its name included
            left = rules.timeout_ms / 1000 - (time.monotonic() - began)
            status = self._connections.post(target, headers, body, left)
            outcome = f"HTTP {status}" + (
                " (redirects are not followed)" if 300 <= status < 400 else ""
            )
        except TargetRefused as exc:
            outcome, final = f"refused: {exc}", True
        except (OSError, http.client.HTTPException) as exc:
            outcome = _error_text(exc)
        except Exception as exc:  # any failure of an attempt counts as one (logged below)
            outcome = f"failed: {type(exc).__name__}: {_error_text(exc)}"
            log.debug("callbacks: the attempt of %s failed", message_id(event), exc_info=True)
        return self._outcome(event, status, outcome, final)

    def _outcome(
        self, event: CallbackEvent, status: int | None, outcome: str, final: bool
    ) -> tuple[str, int | None]:
        """An attempt of ``event`` that ended with ``outcome`` (and the HTTP ``status``
        answered, if any): (its message, when it is due again or None)."""
        rules = self.settings().callbacks
        attempt = event.attempts + 1
        what = f"callback {event.type} to {event.url}"
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

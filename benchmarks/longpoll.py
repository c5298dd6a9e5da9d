"""How a node serves many held watchJob long polls: the other calls meanwhile, the
node's memory, and how fast every held watch answers when the job ends.

A real node is started with the DEFAULT configuration: config/xserver.toml copied into
a temporary folder with only its port (a free one) and its database url (SQLite in that
folder, or ``--database-url``) changed; threads, workers and the rest stay as shipped.
For each client count N (``--clients``), in turn, with a fresh job:

1. One job is started: XDemo startSimulate ``{"durationMs": D, "steps": 1}`` (one step:
   no progress update before its end).  D (``--job-seconds``, default 60 s) is only an
   upper bound, longer than the held phase below: step 5 ends the job.
2. N clients, split over a few client processes (``--processes``; by default one per
   2 500 clients, at most 4), asyncio on raw non-blocking sockets (no thread per
   connection), each open their own TCP connection and POST ``XRuntime/watchJob
   {"id": ID, "progressUpdatePeriod": 50000, "maximumPollingPeriod": 50000}`` as a
   minimal HTTP/1.1 request (``Connection: close``), then wait for the answer (parsed by
   Content-Length).  A watch is "held" once its request is fully sent.  Connects go in
   batches (``--batch`` in flight over all processes) so that the listen backlog is not
   overrun; a refused, reset or timed-out connect is retried (``--retries``); connects
   not done within ``--connect-budget`` count as failed.
3. Once every request is sent, and ``--settle`` seconds more, while held: the node's
   connections (accepted, or waiting in its listen backlog; /proc/net/tcp) and its
   memory: its whole process tree (the server process and all its descendants, found
   recursively through the ppid in /proc/*/stat): the sum of VmRSS and the sum of Pss
   (/proc/PID/smaps_rollup) in MB, and the process count.
4. Still while held: ``--other-calls`` sequential calls on a separate keep-alive
   connection, cycling over startSimulate ``{"durationMs": 0}`` → watchJob of the job
   started in the previous cycle (finished by then) → fetchSimulateResponse of it →
   getRuntimeInformation; latency p50/p99/max per call.  Each call has a timeout
   (``--call-timeout``), the phase a budget (``--others-budget``); calls not answered
   are counted.  The default budgets keep steps 2–4 well under the 50 s
   maximumPollingPeriod of the held watches; the output warns when the job ended
   before step 4 was done.
5. The job is ended with ``XRuntime/stopJob``.  With one step, a job stopped before its
   step ends has no result, so it ends FAILED (RequestStoppedFault); SUCCEEDED if it
   ended by itself.  Both are terminal: every held watch must answer at once.
6. For each watch, the time its answer arrived minus the time the job ended.  The
   arrival is the kernel's receive timestamp of the answer's last segment
   (SO_TIMESTAMPNS), so the client processes' own delay in handling thousands of answers
   at once is not counted (the figures by the client's clock are printed beside them).
   The job's end is the client clock when startSimulate was sent plus the job's frozen
   elapsedTime (finished − queued, server clock on the same machine): at or slightly
   before the true end, so the latency is overstated by at most the startSimulate round
   trip (printed).  The same figures from the stopJob answer's arrival are printed too.
   Answers with a non-terminal status (RUNNING or STOPPING when maximumPollingPeriod
   passed first) and failures are counted apart and left out of the latencies.

The node's CPU time (user + system over all its processes, /proc/PID/stat) is printed for
steps 2–3 and from stopJob until every answer has arrived, per watch: it moves much less
with the machine's other load than the latencies do.

Every loop is bounded (counts, per-call and per-phase timeouts); the script talks to
127.0.0.1 only and stops by itself.  The client processes raise their own
RLIMIT_NOFILE to the hard limit; the node keeps the limit it was started with (printed).
The client processes share the machine's cores with the node (said in the output).

The floor (``--floor``, on by default; ``--no-floor`` leaves it out): each round also
starts ``benchmarks/longpoll_floor.py``, a bare uvicorn app of the node's default shape
(2 HTTP processes with httptools and uvloop on one listening socket, a bare ASGI app, the
same URLs and JSON shapes, jobs in memory, a job's end told to both processes by Unix
datagrams), and runs every client count against it with the same client code, measuring
its process tree the same way.  Its figures are printed like a node's (headed "floor",
without the node's targets), and at the end every figure of each tree beside the floor's
(medians of the rounds) with tree ÷ floor, and issue 36's targets at 10 000 held: all
answered after the job ended at p99 <= 1.2 × the floor's, node RSS <= 400 MB, other
calls p99 <= 20 ms.  It costs one more server start and one more run per client count.

    python benchmarks/longpoll.py [--clients 2000 10000] [--job-seconds 60]
                                  [--processes 0] [--database-url URL] [--rounds R]
                                  [--baseline-tree PATH [--baseline-python PYTHON]]
                                  [--floor | --no-floor]

To compare against another commit on a shared, noisy machine, measure both in one
invocation: ``git worktree add --detach /tmp/base COMMIT`` (with its own ``.venv``), then
``--baseline-tree /tmp/base --rounds 2``.  Each round starts one node of each tree in
turn, and the floor (the order of all three reversed every other round), each node on
its own shipped configuration and its own SQLite database, runs every client count
against it, and stops it; at the end
each figure is printed per round and as the median of the rounds for both trees, with
this tree's median over the baseline's.  Only figures of the same invocation are
compared: the machine's other load moves them from one invocation to the next.

Targets, with the default configuration on the 2-core machine:
- 10 000 held: other calls p99 <= 20 ms while held; all answered p99 <= 100 ms after the
  job ended; node RSS (all its processes) <= 400 MB.
- 2 000 held: all answered p99 <= 50 ms after the job ended.
"""

import argparse
import asyncio
import collections
import http.client
import json
import math
import multiprocessing
import os
import queue as queue_module
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.floor import FloorProcess  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import ROOT, Server, default_config, descendants, free_port  # noqa: E402
from tests.processes import tcp_sockets  # noqa: E402

HOST = "127.0.0.1"
TERMINAL = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not name it
ANCILLARY = socket.CMSG_SPACE(16)
TARGETS = {10000: {"others_p99": 20, "answered_p99": 100, "rss": 400}, 2000: {"answered_p99": 50}}


# ---------------------------------------------------------------- the client processes


class Held:
    """One held watch: its own connection, its request, its answer."""

    __slots__ = (
        "sent_at",
        "attempts",
        "kernel_at",
        "local_at",
        "http_status",
        "status",
        "error",
        "sent",
    )

    def __init__(self, loop):
        self.sent_at = self.kernel_at = self.local_at = None
        self.attempts = 0
        self.http_status = 0
        self.status = self.error = None
        self.sent = loop.create_future()  # done when the request is sent, or given up

    def row(self):
        return (
            self.sent_at,
            self.attempts,
            self.kernel_at,
            self.local_at,
            self.http_status,
            self.status,
            self.error,
        )


async def _connect_and_send(loop, port, request, held, timeout, retries):
    last = None
    for attempt in range(retries + 1):
        held.attempts = attempt + 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await asyncio.wait_for(loop.sock_connect(sock, (HOST, port)), timeout)
            await asyncio.wait_for(loop.sock_sendall(sock, request), timeout)
            return sock
        except (TimeoutError, OSError) as e:
            sock.close()
            last = e
            await asyncio.sleep(0.05 * (attempt + 1))
        except asyncio.CancelledError:  # the connect budget is spent
            sock.close()
            raise
    raise ConnectionError(f"connect: {type(last).__name__}")


def _read_answer(loop, sock):
    """A future: (kernel time, local time, HTTP status, body) of one HTTP/1.1 answer."""
    future = loop.create_future()
    buf = bytearray()
    state = {"at": None, "header": None, "length": None}

    def finish(result=None, error=None):
        loop.remove_reader(sock.fileno())
        if not future.done():
            future.set_exception(error) if error else future.set_result(result)

    def readable():
        try:
            while True:
                data, ancillary, _, _ = sock.recvmsg(65536, ANCILLARY)
                if not data:
                    break
                buf.extend(data)
                state["at"] = time.time()
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                        seconds, nanoseconds = struct.unpack("qq", value[:16])
                        state["at"] = seconds + nanoseconds / 1e9
        except BlockingIOError:
            data = None
        except OSError as e:
            return finish(error=ConnectionError(f"read: {type(e).__name__}"))
        if state["header"] is None:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end]).decode("latin-1").split("\r\n")
                state["header"] = end + 4
                state["status"] = int(head[0].split()[1])
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        state["length"] = int(value)
        if state["header"] is not None:
            body = buf[state["header"] :]
            if (state["length"] is not None and len(body) >= state["length"]) or data == b"":
                return finish((state["at"], time.time(), state["status"], bytes(body)))
        if data == b"":
            finish(
                error=ConnectionError("closed before an answer" if not buf else "truncated answer")
            )

    loop.add_reader(sock.fileno(), readable)
    return future


async def _hold(loop, port, request, held, timeout, retries, answered, index):
    try:
        sock = await _connect_and_send(loop, port, request, held, timeout, retries)
    except (ConnectionError, asyncio.CancelledError) as e:
        held.error = (
            str(e) if isinstance(e, ConnectionError) else "not connected: connect budget spent"
        )
        if not held.sent.done():
            held.sent.set_result(False)
        return
    held.sent_at = time.time()
    if not held.sent.done():
        held.sent.set_result(True)
    try:
        held.kernel_at, held.local_at, held.http_status, body = await _read_answer(loop, sock)
        answered[index] += 1
        if held.http_status == 200:
            held.status = json.loads(body).get("status")
        else:
            held.error = f"HTTP {held.http_status}"
    except ConnectionError as e:
        held.error = str(e)
    except (ValueError, AttributeError):
        held.error = "unreadable answer"
    except asyncio.CancelledError:
        held.error = "no answer before the benchmark gave up"
        try:
            loop.remove_reader(sock.fileno())
        except (ValueError, OSError):
            pass
    finally:
        sock.close()


async def _clients(
    index,
    port,
    job_id,
    count,
    batch,
    timeout,
    retries,
    connect_budget,
    wait_budget,
    give_up,
    answered,
    results,
):
    loop = asyncio.get_running_loop()
    body = json.dumps(
        {"id": job_id, "progressUpdatePeriod": 50000, "maximumPollingPeriod": 50000}
    ).encode()
    request = (
        f"POST /services/rs/XRuntime/watchJob HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n"
    ).encode() + body
    helds, tasks = [], []
    connect_deadline = time.time() + connect_budget
    for start in range(0, count, batch):
        if time.time() > connect_deadline:
            break
        group = [Held(loop) for _ in range(start, min(count, start + batch))]
        helds += group
        tasks += [
            asyncio.create_task(_hold(loop, port, request, h, timeout, retries, answered, index))
            for h in group
        ]
        await asyncio.wait(
            [h.sent for h in group],
            timeout=max(0.01, min((timeout + 1) * (retries + 2), connect_deadline - time.time())),
        )
    for h, t in zip(helds, tasks, strict=True):  # still connecting when the budget was spent
        if not h.sent.done():
            t.cancel()
    await asyncio.wait([h.sent for h in helds], timeout=5)
    skipped = count - len(helds)
    sent = sum(1 for h in helds if h.sent_at is not None)
    results.put(
        (
            "held",
            index,
            {
                "sent": sent,
                "failed": count - sent,
                "skipped": skipped,
                "retried": sum(1 for h in helds if h.attempts > 1),
            },
        )
    )
    deadline = time.time() + wait_budget
    while time.time() < deadline and not give_up.is_set():
        if all(t.done() for t in tasks):
            break
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    rows = [h.row() for h in helds]
    rows += [(None, 0, None, None, 0, None, "not connected: connect budget spent")] * skipped
    results.put(("done", index, rows))


def client_process(
    index,
    port,
    job_id,
    count,
    batch,
    timeout,
    retries,
    connect_budget,
    wait_budget,
    give_up,
    answered,
    results,
):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    asyncio.run(
        _clients(
            index,
            port,
            job_id,
            count,
            batch,
            timeout,
            retries,
            connect_budget,
            wait_budget,
            give_up,
            answered,
            results,
        )
    )


# ---------------------------------------------------------------- the controlling side


class Connection:
    """One keep-alive JSON connection with a timeout per call."""

    def __init__(self, port, timeout):
        self.port, self.timeout, self.conn = port, timeout, None

    def call(self, service, operation, body, timeout=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout or self.timeout)
        self.conn.timeout = timeout or self.timeout
        if self.conn.sock is not None:
            self.conn.sock.settimeout(self.conn.timeout)
        try:
            self.conn.request(
                "POST",
                f"/services/rs/{service}/{operation}",
                json.dumps(body),
                {"Content-Type": "application/json"},
            )
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if response.status != 200:
            raise RuntimeError(f"{operation}: HTTP {response.status} {data[:200]!r}")
        return json.loads(data)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def other_calls(port, count, call_timeout, budget, previous_job):
    """``count`` sequential calls on one keep-alive connection: latencies (ms) of the
    answered ones, and the failures by reason."""
    conn = Connection(port, call_timeout)
    latencies, failures = [], collections.Counter()
    new_job = previous_job
    deadline = time.time() + budget
    for i in range(count):
        remaining = deadline - time.time()
        if remaining <= 0:
            failures[f"not sent: {budget:g} s budget spent"] += count - i
            break
        kind = i % 4
        if kind == 0:
            call = ("XDemo", "startSimulate", {"durationMs": 0})
        elif kind == 1:
            call = (
                "XRuntime",
                "watchJob",
                {"id": previous_job, "progressUpdatePeriod": 250, "maximumPollingPeriod": 5000},
            )
        elif kind == 2:
            call = ("XDemo", "fetchSimulateResponse", {"id": previous_job})
        else:
            call = ("XRuntime", "getRuntimeInformation", {})
        began = time.perf_counter()
        try:
            answer = conn.call(*call, timeout=min(call_timeout, max(0.1, remaining)))
        except TimeoutError:
            failures[f"{call[1]}: no answer within {call_timeout:g} s"] += 1
            continue
        except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
            failures[f"{call[1]}: {str(e)[:80] or type(e).__name__}"] += 1
            continue
        latencies.append((time.perf_counter() - began) * 1000)
        if kind == 0:
            new_job = answer["id"]
        elif kind == 3:
            previous_job = new_job
    conn.close()
    return latencies, failures


def process_tree(root):
    """``root`` and all its descendants."""
    return [root] + descendants(root)


def _kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def node_memory(pid):
    """(sum of VmRSS in MB, sum of Pss in MB, number of processes) of the node's tree."""
    pids = process_tree(pid)
    rss = sum(_kb(f"/proc/{p}/status", "VmRSS") for p in pids)
    pss = sum(_kb(f"/proc/{p}/smaps_rollup", "Pss") for p in pids)
    return rss / 1024, pss / 1024, len(pids)


def node_cpu(pid):
    """CPU seconds (user + system) the node's tree has used so far (/proc/PID/stat)."""
    ticks = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def node_connections(port):
    """(connections the node has accepted, connections waiting in its listen backlog) on
    ``port``, from /proc/net/tcp: an established socket with an inode belongs to a
    process (accepted); the listening socket's rx_queue is its accept queue."""
    accepted = backlog = 0
    for _, state, queued, inode in tcp_sockets(port):
        if state == "0A":  # LISTEN
            backlog += queued
        elif state == "01" and inode != "0":  # ESTABLISHED, owned
            accepted += 1
    return accepted, backlog


def open_files_limit(pid):
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return line.split()[3]
    except OSError:
        pass
    return "?"


def figures(values):
    if not values:
        return "none answered"
    return (
        f"p50 {percentile(values, 50):.1f}, p99 {percentile(values, 99):.1f}, "
        f"max {max(values):.1f} ms"
    )


def top(counter, limit=4):
    return "; ".join(f"{n} × {reason}" for reason, n in counter.most_common(limit))


def note(text):
    print(f"  … {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- one client count


def run(server, n, args, name="node"):
    """One client count against ``server`` (a node, or the floor: ``name`` "floor", whose
    figures are printed the same way, without the node's targets)."""
    port, pid = server.port, server.proc.pid
    control = Connection(port, args.stop_timeout)
    # a finished no-op job for the first cycle of the other calls
    warm = control.call("XDemo", "startSimulate", {"durationMs": 0})
    for _ in range(100):
        if (
            control.call(
                "XRuntime",
                "watchJob",
                {"id": warm["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 1000},
            )["status"]
            in TERMINAL
        ):
            break
    rss0, pss0, procs0 = node_memory(pid)
    cpu0 = node_cpu(pid)

    started_at = time.time()
    job = control.call(
        "XDemo", "startSimulate", {"durationMs": int(args.job_seconds * 1000), "steps": 1}
    )
    start_rtt = (time.time() - started_at) * 1000  # how early the job-end estimate can be
    for _ in range(100):  # until a worker runs it (bounded: 100 × 1 s)
        status = control.call(
            "XRuntime",
            "watchJob",
            {"id": job["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 1000},
        )["status"]
        if status != "QUEUING":
            break
    if status != "RUNNING":
        raise RuntimeError(f"the long job is {status}, not RUNNING")

    processes = args.processes or min(4, max(1, math.ceil(n / 2500)))
    shares = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    batch = max(1, args.batch // processes)
    wait_budget = args.settle + args.others_budget + args.stop_timeout + args.answer_timeout + 120
    ctx = multiprocessing.get_context("spawn")
    results, give_up, answered = ctx.Queue(), ctx.Event(), ctx.Array("i", processes)
    workers = [
        ctx.Process(
            target=client_process,
            daemon=True,
            args=(
                i,
                port,
                job["id"],
                share,
                batch,
                args.connect_timeout,
                args.retries,
                args.connect_budget,
                wait_budget,
                give_up,
                answered,
                results,
            ),
        )
        for i, share in enumerate(shares)
    ]
    note(f"{n} clients in {processes} process(es), {batch} connects at a time per process")
    connect_began = time.time()
    for w in workers:
        w.start()
    held, rows = {}, {}

    def collect(until, want):
        """Reports of the client processes until each sent its ``want`` one (or ``until``)."""
        while len(want) < processes and time.time() < until:
            try:
                kind, index, value = results.get(timeout=max(0.01, until - time.time()))
            except queue_module.Empty:
                return
            (held if kind == "held" else rows)[index] = value

    collect(time.time() + args.connect_budget + 60, held)
    connect_seconds = time.time() - connect_began
    sent = sum(h["sent"] for h in held.values())
    not_sent = n - sent
    note(f"{sent}/{n} watches sent in {connect_seconds:.1f} s; settling {args.settle:g} s")
    time.sleep(args.settle)

    waiting_before = sent - sum(answered)
    accepted, backlog = node_connections(port)
    rss, pss, procs = node_memory(pid)
    connect_cpu = node_cpu(pid) - cpu0
    note(f"{args.other_calls} other calls")
    latencies, failures = other_calls(
        port, args.other_calls, args.call_timeout, args.others_budget, warm["id"]
    )
    waiting_after = sent - sum(answered)
    held_until = time.time()

    note("stopJob")
    cpu_at_stop = node_cpu(pid)
    stop_error = None
    # a new connection: the one that started the job has been idle since, longer than
    # the floor's keep-alive timeout (uvicorn's 5 s) under load (stopJob: BrokenPipeError)
    control.close()
    try:
        stopped = control.call("XRuntime", "stopJob", {"id": job["id"]})
        stop_status = stopped["status"]
    except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
        stop_error, stop_status = f"{type(e).__name__} {e}", None
    stop_answered = time.time()
    final = None
    for _ in range(20):  # the frozen elapsedTime (bounded)
        try:
            final = control.call(
                "XRuntime",
                "watchJob",
                {"id": job["id"], "progressUpdatePeriod": 250, "maximumPollingPeriod": 5000},
            )
        except (OSError, http.client.HTTPException, RuntimeError, ValueError):
            break
        if final["status"] in TERMINAL:
            break
    job_end = (
        started_at + final["elapsedTime"] / 1000 if final and final["status"] in TERMINAL else None
    )

    collect(time.time() + args.answer_timeout, rows)
    if len(rows) < processes:
        give_up.set()
        collect(time.time() + 30, rows)
    answer_cpu = node_cpu(pid) - cpu_at_stop
    for w in workers:
        w.join(10)
        if w.is_alive():
            w.terminate()
            w.join(5)
    control.close()

    all_rows = [r for i in sorted(rows) for r in rows[i]]
    missing = n - len(all_rows)
    terminal, non_terminal, failed = [], collections.Counter(), collections.Counter()
    for _sent_at, _attempts, kernel_at, local_at, _http_status, status, error in all_rows:
        if error:
            failed[error] += 1
        elif status in TERMINAL:
            terminal.append((kernel_at, local_at))
        else:
            non_terminal[status] += 1
    if missing:
        failed["a client process did not report"] += missing
    retried = sum(h["retried"] for h in held.values())
    after_end = [(k - job_end) * 1000 for k, _ in terminal] if job_end else []
    after_stop = [(k - stop_answered) * 1000 for k, _ in terminal]
    local_after_end = [(loc - job_end) * 1000 for _, loc in terminal] if job_end else []

    # ---------------------------------------------------------------- the figures
    ended_early = job_end is not None and job_end < held_until
    end_how = f"stopJob answered {stop_status}" if stop_status else f"stopJob failed: {stop_error}"
    if stop_status in TERMINAL:
        end_how += " (the job had ended by itself)"
    final_status = final["status"] if final else "no answer"
    statuses = "/".join(sorted({row[5] for row in all_rows if row[5] in TERMINAL})) or "terminal"
    print(
        f"{n} held ({processes} client process(es) on the same {os.cpu_count()} cores as the node):"
    )
    print(
        f"  held: {sent}/{n} watch requests sent in {connect_seconds:.1f} s ({not_sent} not sent, "
        f"{retried} connects retried); {args.settle:g} s later the {name} had accepted {accepted} "
        f"connections and {backlog} waited in its listen backlog"
    )
    print(
        f"  {name} while held: RSS {rss:.0f} MB, PSS {pss:.0f} MB, {procs} processes "
        f"(before the clients: RSS {rss0:.0f} MB, PSS {pss0:.0f} MB, {procs0} processes)"
    )
    per_watch = 1e6 / max(1, sent)
    print(
        f"  {name} CPU (all its processes): {connect_cpu:.2f} s while the watches connected and "
        f"settled ({connect_cpu * per_watch:.0f} µs a watch); {answer_cpu * 1000:.0f} ms from "
        f"stopJob until the client processes had every answer ({answer_cpu * per_watch:.0f} µs "
        f"a watch)"
    )
    print(
        f"  other calls while held: {figures(latencies)} "
        f"({len(latencies)}/{args.other_calls} answered"
        + (f"; {top(failures)}" if failures else "")
        + f"; {waiting_before} watches waiting before them, {waiting_after} after)"
    )
    print(
        f"  job ended: {end_how}, finally {final_status}"
        + (f" after {final['elapsedTime'] / 1000:.1f} s" if final else "")
        + f"; stopJob answered {stop_answered - connect_began:.1f} s after the client "
        "processes were started"
    )
    if ended_early:
        print(
            f"  WARNING: the job ended {held_until - job_end:.1f} s before the memory and the "
            "other calls were done, so they were not all measured while held: raise --job-seconds"
        )
    print(
        f"  answered after the job ended: {figures(after_end)} "
        f"({len(terminal)}/{n} answered {statuses}, {sum(non_terminal.values())} non-terminal"
        + (f" [{', '.join(f'{c} {s}' for s, c in non_terminal.items())}]" if non_terminal else "")
        + f", {sum(failed.values())} failed"
        + (f": {top(failed)}" if failed else "")
        + ")"
    )
    detail = [
        f"the end taken as startSimulate sent + elapsedTime, early by at most its round trip "
        f"({start_rtt:.1f} ms); arrival = kernel receive time"
    ]
    if stop_status == "STOPPING":
        detail.append(f"from the stopJob answer instead: {figures(after_stop)}")
    detail.append(f"arrival = when the client had parsed it: {figures(local_after_end)}")
    print(f"    ({'; '.join(detail)})")
    print(
        f"  summary: {n} held: other calls {figures(latencies)}; answered after the job ended "
        f"{figures(after_end)} ({len(terminal)}/{n} answered); {name} RSS {rss:.0f} MB "
        f"(PSS {pss:.0f} MB, {procs} processes)"
    )
    target = TARGETS.get(n) if name == "node" else None
    if target:
        checks = []
        partly = (
            "not measured while held"
            if ended_early
            else f"not measured (only {sent}/{n} held)"
            if sent < n
            else None
        )
        if "others_p99" in target:
            p99 = percentile(latencies, 99) if len(latencies) == args.other_calls else math.inf
            verdict = partly if partly else "met" if p99 <= target["others_p99"] else "MISSED"
            checks.append(f"other calls p99 <= {target['others_p99']} ms: {verdict}")
        if "answered_p99" in target:
            p99 = percentile(after_end, 99) if after_end and len(terminal) == n else math.inf
            checks.append(
                f"all {n} answered, p99 <= {target['answered_p99']} ms: "
                f"{'met' if p99 <= target['answered_p99'] else 'MISSED'}"
            )
        if "rss" in target:
            verdict = partly if partly else "met" if rss <= target["rss"] else "MISSED"
            checks.append(f"node RSS <= {target['rss']} MB: {verdict}")
        print("  targets: " + "; ".join(checks))
    sys.stdout.flush()
    complete = len(terminal) == n
    return {
        "answered_first": min(after_end) if after_end and complete else math.nan,
        "answered_p50": percentile(after_end, 50) if after_end and complete else math.nan,
        "answered_p99": percentile(after_end, 99) if after_end and complete else math.nan,
        "others_p99": (
            percentile(latencies, 99) if len(latencies) == args.other_calls else math.nan
        ),
        "rss": rss,
        "pss": pss,
        "idle_rss": rss0,
        "connect_s": connect_seconds,
        "connect_cpu_us": connect_cpu / max(1, sent) * 1e6,
        "answer_cpu_us": answer_cpu / max(1, sent) * 1e6,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[2000, 10000],
        help="held watches, one run per count (default: 2000 10000)",
    )
    parser.add_argument(
        "--job-seconds",
        type=float,
        default=60,
        help="durationMs of the held job, an upper bound: stopJob ends it (default 60)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=0,
        help="client processes; 0: one per 2 500 clients, at most 4",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="connects in flight at once over all client processes (default 100)",
    )
    parser.add_argument("--connect-timeout", type=float, default=10, help="per connect attempt (s)")
    parser.add_argument(
        "--retries", type=int, default=3, help="of a refused, reset or timed-out connect"
    )
    parser.add_argument(
        "--connect-budget",
        type=float,
        default=30,
        help="seconds for all connects; clients not connected by then count as failed",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=1.5,
        help="seconds between the last send and the other calls",
    )
    parser.add_argument("--other-calls", type=int, default=200)
    parser.add_argument("--call-timeout", type=float, default=2, help="per other call (s)")
    parser.add_argument(
        "--others-budget", type=float, default=10, help="seconds for all other calls"
    )
    parser.add_argument("--stop-timeout", type=float, default=120, help="for the stopJob call (s)")
    parser.add_argument(
        "--answer-timeout",
        type=float,
        default=60,
        help="seconds after stopJob for the held watches to answer",
    )
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--baseline-tree",
        metavar="PATH",
        help="another checkout of xruntime (e.g. a git worktree of an older commit): "
        "its node, on its own config/xserver.toml, is measured too, in turns "
        "with this tree's, and both are printed side by side with ratios",
    )
    parser.add_argument(
        "--baseline-python",
        metavar="PATH",
        help="the baseline's interpreter (default: PATH/.venv/bin/python if there is "
        "one, else this one)",
    )
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure benchmarks/longpoll_floor.py (a bare uvicorn app of the node's "
        "shape) each round, by the same client, and print the nodes' figures over its "
        "(issue 36's targets); --no-floor: the nodes only (default: on)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each tree this many times, in turns (with --baseline-tree: "
        "baseline first in odd rounds, this tree first in even ones)",
    )
    args = parser.parse_args()
    if args.baseline_tree and args.database_url:
        parser.error(
            "--baseline-tree runs each node on its own SQLite database: the two trees' "
            "schemas may differ, so they cannot share --database-url"
        )
    trees = [Tree("this tree", ROOT, sys.executable)]
    if args.baseline_tree:
        trees.insert(0, baseline_tree(args.baseline_tree, args.baseline_python))
    database = args.database_url.split(":")[0] if args.database_url else "SQLite"
    measured = collections.defaultdict(list)  # (tree label, n) → figures per round
    servers = ([None] if args.floor else []) + trees  # None: the floor
    for turn in range(args.rounds):
        for tree in servers if turn % 2 == 0 else servers[::-1]:
            if tree is None:
                print(f"=== round {turn + 1}/{args.rounds}: floor ({FLOOR_DESCRIPTION})")
                with tempfile.TemporaryDirectory() as folder:
                    floor = Floor(folder).start()
                    try:
                        print(
                            f"floor: benchmarks/longpoll_floor.py, its open-files limit "
                            f"{open_files_limit(floor.proc.pid)}; clients and floor share this "
                            f"machine's {os.cpu_count()} cores"
                        )
                        sys.stdout.flush()
                        for n in args.clients:
                            measured["floor", n].append(run(floor, n, args, name="floor"))
                    finally:
                        floor.stop()
                continue
            if len(servers) > 1 or args.rounds > 1:
                print(f"=== round {turn + 1}/{args.rounds}: {tree.label} ({tree.describe()})")
            with tempfile.TemporaryDirectory() as folder:
                server = start_node(tree, folder, args.database_url)
                try:
                    print(
                        f"node: default config/xserver.toml (only port and database url changed), "
                        f"{database}, "
                        f"its open-files limit {open_files_limit(server.proc.pid)}; "
                        f"clients and node share this machine's {os.cpu_count()} cores"
                    )
                    sys.stdout.flush()
                    for n in args.clients:
                        measured[tree.label, n].append(run(server, n, args))
                finally:
                    server.stop()
    if len(trees) > 1:
        compare(trees[0], trees[1], args.clients, measured)
    if args.floor:
        against_floor(trees, args.clients, measured)


FLOOR = os.path.join(ROOT, "benchmarks", "longpoll_floor.py")
FLOOR_DESCRIPTION = (
    "benchmarks/longpoll_floor.py: 2 uvicorn/httptools/uvloop processes on one listening "
    "socket, a bare ASGI app, jobs in memory, ends told by Unix datagrams"
)


def Floor(folder):
    """benchmarks/longpoll_floor.py in a subprocess, started and stopped as a node is
    (its process tree is measured the same way)."""
    return FloorProcess(FLOOR, "longpoll floor: serving", folder, free_port())


class Tree:
    """A checkout whose node is measured: its label, folder and interpreter."""

    def __init__(self, label, root, python):
        self.label, self.root, self.python = label, root, python

    def describe(self):
        try:
            commit = subprocess.run(
                ["git", "-C", self.root, "log", "-1", "--format=%h %s"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            commit = ""
        dirty = ""
        try:
            if subprocess.run(
                ["git", "-C", self.root, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip():
                dirty = " + uncommitted changes"
        except (OSError, subprocess.SubprocessError):
            pass
        return f"{self.root}: {commit[:60] or 'not a git checkout'}{dirty}"


def baseline_tree(path, python=None):
    """The ``Tree`` of ``--baseline-tree PATH``, run by ``python`` (default:
    PATH/.venv/bin/python if there is one, else this interpreter)."""
    root = os.path.abspath(path)
    venv_python = os.path.join(root, ".venv", "bin", "python")
    default = venv_python if os.path.exists(venv_python) else sys.executable
    return Tree("baseline", root, python or default)


def start_node(tree, folder, database_url, extra=""):
    """A node of ``tree`` on its own shipped configuration (``extra``, TOML text, added
    at its end), started as the harness starts one: from the tree's folder, its modules
    first on the path, with its interpreter."""
    config = default_config(folder, free_port(), database_url, root=tree.root)
    if extra:
        with open(config, "a", encoding="utf-8") as f:
            f.write(extra)
    if tree.root == ROOT and tree.python == sys.executable:
        return Server(folder, config=config, env={"XRUNTIME_SERVICE_MODULES": ""}).start()
    # The harness runs ``prefix + [sys.executable, "-m", "xruntime", …]`` from this tree:
    # the prefix moves to the other tree and runs its interpreter instead of this one.
    switch = ["sh", "-c", 'cd "$1" && shift 2 && exec "$0" "$@"', tree.python, tree.root]
    return Server(
        folder,
        config=config,
        prefix=switch,
        env={"XRUNTIME_SERVICE_MODULES": "", "PYTHONPATH": own_services_path(tree, folder)},
    ).start()


def own_services_path(tree, folder):
    """``PYTHONPATH`` for a node of ``tree``: its modules, and its own shipped services as
    ``xruntime_services``.  An editable install maps that package to the services/ of the
    checkout it was made from, whatever tree runs: a baseline's node ran this tree's
    services on its own framework (XDima's, asking its jobs for what the baseline's do
    not have, failed every job)."""
    shim = os.path.join(folder, "services-of-tree")
    os.makedirs(shim, exist_ok=True)
    link = os.path.join(shim, "xruntime_services")
    if not os.path.islink(link):
        os.symlink(os.path.join(tree.root, "services"), link)
    return os.pathsep.join([tree.root, shim])


#: What ``compare`` prints, from ``run``'s figures: (key, label, unit).
COMPARED = (
    ("answered_first", "first answer after the job ended", "ms"),
    ("answered_p50", "answered after the job ended, p50", "ms"),
    ("answered_p99", "answered after the job ended, p99", "ms"),
    ("others_p99", "other calls while held, p99", "ms"),
    ("rss", "node RSS while held", "MB"),
    ("pss", "node PSS while held", "MB"),
    ("idle_rss", "node RSS before the clients", "MB"),
    ("connect_s", "all watch requests sent in", "s"),
    ("connect_cpu_us", "node CPU a watch, connecting", "µs"),
    ("answer_cpu_us", "node CPU a watch, answering", "µs"),
)


def compare(base, this, counts, measured):
    """Both trees side by side: each round's figure, the median, and this tree's median
    over the baseline's (below 1: this tree is faster or smaller)."""
    print(f"\n=== {this.label} ({this.describe()})\n    against the baseline ({base.describe()})")
    for n in counts:
        rounds = len(measured[base.label, n])
        print(f"{n} held, {rounds} round(s) each; per round: baseline → {this.label}")
        for key, label, unit in COMPARED:
            ours = [m[key] for m in measured[this.label, n]]
            theirs = [m[key] for m in measured[base.label, n]]
            per_round = ", ".join(
                f"{_shown(b)} → {_shown(o)}" for b, o in zip(theirs, ours, strict=True)
            )
            b, o = _median(theirs), _median(ours)
            ratio = f"{o / b:.2f}" if b and not math.isnan(b) and not math.isnan(o) else "?"
            print(
                f"  {label:<38} median {_shown(b):>7} → {_shown(o):>7} {unit:<2}  × {ratio:<5} "
                f"({per_round})"
            )
    sys.stdout.flush()


#: Issue 36's targets against the floor, at 10 000 held, with the default config.
FLOOR_TARGETS = {10000: {"answered_ratio": 1.2, "rss": 400, "others_p99": 20}}


def against_floor(trees, counts, measured):
    """Each tree's figures beside the floor's (medians of the rounds), with the ratio
    tree ÷ floor, and issue 36's targets: answered after the end p99 ≤ 1.2× the floor's,
    node RSS ≤ 400 MB, other calls' p99 ≤ 20 ms (at 10 000 held)."""
    print(f"\n=== against the floor ({FLOOR_DESCRIPTION})")
    for n in counts:
        rounds = len(measured["floor", n])
        print(f"{n} held, median of {rounds} round(s); the floor → each tree (× tree ÷ floor)")
        floor = {key: _median([m[key] for m in measured["floor", n]]) for key, _, _ in COMPARED}
        for key, label, unit in COMPARED:
            cells = []
            for tree in trees:
                value = _median([m[key] for m in measured[tree.label, n]])
                ratio = (
                    f"{value / floor[key]:.2f}"
                    if floor[key] and not math.isnan(floor[key]) and not math.isnan(value)
                    else "?"
                )
                cells.append(f"{tree.label} {_shown(value):>7} {unit:<2} × {ratio:<5}")
            print(
                f"  {label.replace('node ', 'server '):<40} floor {_shown(floor[key]):>7} "
                f"{unit:<2} → " + "; ".join(cells)
            )
        target = FLOOR_TARGETS.get(n)
        if not target:
            continue
        for tree in trees:
            figures_ = {
                key: _median([m[key] for m in measured[tree.label, n]]) for key, _, _ in COMPARED
            }
            ratio = (
                figures_["answered_p99"] / floor["answered_p99"]
                if floor["answered_p99"] and not math.isnan(floor["answered_p99"])
                else math.nan
            )
            checks = [
                f"answered p99 {_shown(figures_['answered_p99'])} ms ÷ floor's "
                f"{_shown(floor['answered_p99'])} ms = "
                + (f"{ratio:.2f}" if not math.isnan(ratio) else "n/a")
                + f" (≤ {target['answered_ratio']}: "
                + _verdict(ratio, target["answered_ratio"])
                + ")",
                f"node RSS {_shown(figures_['rss'])} MB (≤ {target['rss']}: "
                + _verdict(figures_["rss"], target["rss"])
                + ")",
                f"other calls p99 {_shown(figures_['others_p99'])} ms (≤ {target['others_p99']}: "
                + _verdict(figures_["others_p99"], target["others_p99"])
                + ")",
            ]
            print(f"  issue 36, {tree.label}: " + "; ".join(checks))
    sys.stdout.flush()


def _verdict(value, limit):
    return "not measured" if math.isnan(value) else "met" if value <= limit else "MISSED"


def _median(values):
    values = sorted(v for v in values if not math.isnan(v))
    if not values:
        return math.nan
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _shown(value):
    return "n/a" if math.isnan(value) else f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


if __name__ == "__main__":
    main()

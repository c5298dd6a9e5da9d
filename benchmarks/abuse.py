"""What one abusive client achieves against a node (docs/protocol.md §15).

For each measured abuse a fresh node is started from the shipped
config/xserver.toml (port and database changed; SQLite in a temporary folder, or a
scratch database on the PostgreSQL server of ``--database-url``), with at most 1 024
open files (soft and hard limit: a node raises its soft limit to the hard one; 1 024 is what
many systems give a service), and XRuntime, XDemo, XDima
and XTour.  Items that need accounts (5, 6, 9, t1..t7) add ``[auth] required = true`` and the
users alice (the abuser), bob (the other caller) and root (an admin); item 5 also
lowers ``[jobs] max_queued`` to 500 so that one user's children can fill the queue,
as in the first measurement.

While the abusive client runs, a well-behaved *other* client calls the node in a
loop, each round on a new connection: getRuntimeInformation, startSimulate
(durationMs 0), deleteJob of that job, a round every 20 ms at most; every call is
timed (p50/p99) and any answer but 200 (or no answer within 15 s) is counted as an
error.  The node's RSS (VmRSS summed over all its processes: main, HTTP processes,
workers) is sampled every 50 ms.  Per row the script prints: the node's RSS before
and its peak, the other client's latencies and errors, what the abuse got (HTTP
status and fault type, or what it achieved) and the time until it was refused, the
tracebacks the node logged meanwhile, and whether the targets held: others' p99
under 100 ms and node RSS under 1 GB.

The rows (full sizes; ``--quick`` makes them smaller and shorter):

  1a  one JSON-RPC batch of 8 fetchSimulateResponse of one 100 MiB result
  1b  2 batches of 20 000 getRuntimeInformation, at once
  1c  one batch of 1 000 listJobs(limit 1000) over 300 jobs: bytes in and out
  2a  a job with queueingTimeout 2^63-1 while the workers are busy; then the other
      client's job with a 2 s queueing timeout: when it fails (PostgreSQL: housekeeping
      overflowed a bigint every second)
  2b  a job with computationTimeout 2^63-1 (it killed a worker slot on SQLite); then
      4 plain jobs, and the worker processes before and after
  3a  2 connections sending a 150 MB header line, at once (node CPU seconds used)
  3b  1 100 connections per HTTP process, each sending an unfinished header, held 15 s
  4a  8 SOAP requests at once, each ~10 MB of empty elements in soap:Header
  4b  8 JSON requests at once, each ~10 MB of ``[],`` in one array
  5   while root's 2 jobs keep the workers busy for 3 s, alice (max_queued 20) starts
      20 XDima parents of parallelism 64 at once; the queue's peak (all users), and
      what her starts and parents got
  6   alice starts XDima 1000x1000 jobs (~7 MB stored each) and never fetches them,
      until a start or a job is refused (QuotaExceededFault) or the caps: the bytes
      the store grew by.  If the tree's config/xserver.toml names a key
      ``max_stored...``, alice's table sets it to 64 MiB.
  7   the CLI against a local server answering 302 and 307 to another local port
      that records any Authorization header: token forwarded?, exit code (client
      side, no node)
  8   accounts off: startSimulate with ``Content-Type: text/plain`` + ``Origin:
      https://evil.example``; a form body with that Origin; ``Host: evil.example``
  9   a listJobs cursor past int64 (x50), a ``%0a`` in a refused path (a forged log
      line?), the SQLite file's mode, malformed datagrams to the node's change-feed
      sockets, SOAP CDATA ``<![CDATA[x<!y]]>``

The tenant rows (issue 32): accounts on, alice the abuser, bob the other caller (the
loop above runs as bob), root an admin; ``[callbacks] allowed = ["127.0.0.1"]`` and a
``callback_secret`` for alice and bob where callbacks are sent (t1-t3), the
``[callbacks]`` defaults otherwise (timeout 10 s, concurrency 16).  Run them with
``--baseline 465c52b`` (the commit before issue 32's work): ``--items t`` selects
t1..t7.  The targets besides the others' p99 and RSS: bob's callbacks each arrive
within one attempt's deadline (10 s), the disk never holds more than alice's quota plus
one job's bound, her full disk fails her job (not stuck) while bob's jobs still run,
bob's job waits at most one of her jobs' duration.

  t1  alice's 16 XDemo jobs' callbacks go to a receiver answering ``HTTP/1.1 200 OK``
      and then a byte every 5 s; meanwhile bob starts an XDemo job (0 ms) with a
      callback to a healthy receiver every 0.5 s: his callbacks' delay (arrival minus
      his start's answer) p50 / max and how many never arrived; the senders her
      receiver held at once and how long her attempts lasted
  t2  alice's 4 XDemo jobs (lasting the row, a step a second) send their progress every
      1 s to a receiver that never answers (6 workers, so that bob's jobs run); bob as
      in t1; the outbox's rows (``callback_outbox``, read from the store) peak and end
  t3  alice's starts with callback URLs holding ``été``, a space, CR LF, a dot segment
      (``/xr/../admin``), and the NAT64 ``[64:ff9b::7f00:1]``: each start's answer; for
      an accepted one the attempts the node logged within 25 s and what the receiver
      got (the NAT64 one's job runs past the row, so that no attempt leaves 127.0.0.1)
  t4  alice (``[users.alice] max_stored_bytes`` 50 MiB) starts 40 XDima 2000-location
      jobs (32 MB results) as fast as she can, never waiting: starts accepted and
      refused, her jobs' ends, the node's data folder (database and result files, as
      allocated) peak and once her jobs ended, against 50 MiB + 32 MB
  t5  as root only (else "skipped: needs root"; SQLite only): the database on a 64 MiB
      tmpfs (unmounted afterwards, always), ``[database] min_free_bytes`` 4 MiB where
      the tree's config names the key; alice starts XDima 1500-location jobs (18 MB
      results) one after another until one fails, a start is refused or the cap;
      bob's loop follows each of his jobs to its end: how many SUCCEEDED
  t6  while root's 2 jobs keep the workers busy and alice has 1 000 jobs queued, she
      sends 1 000 watchJobs of those 1 000 ids each (maximumPollingPeriod 50 s) on
      1 000 connections, held 20 s: how many were held and refused, node RSS
  t7  alice queues 458 XDemo jobs of 2 s (JSON-RPC batches), then bob starts one of 0
      ms: his wait from his start's answer to SUCCEEDED, and how many of hers had ended
      by then (cap 120 s: "not run within cap")

With a baseline (``--baseline REV``, default a2d2c9d: the commit before these
limits were built) the same rows run against nodes started from that revision, checked
out into a temporary git worktree (removed at the end; its ``services/`` imported as
``xruntime_services``, which the editable install maps to this checkout's), so that
machines of different speeds compare by ratio.  Severe abuses of the baseline are
capped: an abusive client stops when the node's RSS passes 3 GB (reported "≥ 3 GB"),
the node is killed past 5 GB, and every row has a count cap and a wall-clock cap
("timed out").  Every node is killed at the end, whatever happened.  Only 127.0.0.1 is
ever contacted.

    python benchmarks/abuse.py [--items 1,3,8] [--quick] [--database-url URL]
                               [--baseline REV | --no-baseline]
    python benchmarks/abuse.py --items t --baseline 465c52b     # issue 32's rows
"""

import argparse
import base64
import contextlib
import http.client
import http.server
import json
import os
import random
import re
import resource
import secrets
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.fairness import scratch_database  # noqa: E402
from benchmarks.roundtrip import process_names  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.processes import descendants  # noqa: E402
from tests.receiver import HostileReceiver, Receiver  # noqa: E402
from xruntime.operations.accounts import token_sha256  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1024 * 1024
GB = 1024 * MB
RSS_STOP = 3 * GB  # the abusive client stops past this
RSS_KILL = 5 * GB  # the node is killed past this
NOFILE = 1024  # the node's open files (soft limit)
OTHER_TIMEOUT = 15  # s: an other's call unanswered this long is an error
TARGET_P99_MS = 100
TARGET_RSS = 1 * GB
SOAP_ENV = "http://schemas.xmlsoap.org/soap/envelope/"
XRUNTIME_NS = "http://xruntime.org/xserver/xruntime"
TOKENS = {name: secrets.token_urlsafe(24) for name in ("alice", "bob", "root")}
CALLBACK_SECRETS = {
    name: "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode() for name in ("alice", "bob")
}
FAULT = re.compile(rb"\b([A-Z][A-Za-z]*Fault)\b")


# ------------------------------------------------------------------------ nodes


class Tree:
    """A source tree to run nodes from: this one, or the baseline's worktree."""

    def __init__(self, root, label, shim=None):
        self.root, self.label = root, label
        # the tree's services/ as xruntime_services (the editable install maps that name
        # to this checkout's services/, whose services a baseline's xruntime may not load)
        self.pythonpath = os.pathsep.join([root] + ([shim] if shim else []))
        with open(os.path.join(root, "config", "xserver.toml"), encoding="utf-8") as f:
            self.config_text = f.read()


def edited_config(text, port, url, keys=None, extra=""):
    """The shipped file with port, url and ``keys`` ({(table, key): value}) changed in
    place (added at the end of their table when absent), ``extra`` appended."""
    keys = {("server", "port"): port, ("database", "url"): url, **(keys or {})}
    pending = dict(keys)
    lines, table = [], None

    def flush():
        for (t, key), value in list(pending.items()):
            if t == table:
                lines.append(f"{key} = {json.dumps(value)}\n")
                del pending[(t, key)]

    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            flush()
            table = stripped.split("]")[0].strip("[ ")
        elif (table, stripped.split("=")[0].strip()) in pending and not stripped.startswith("#"):
            key = stripped.split("=")[0].strip()
            line = f"{key} = {json.dumps(pending.pop((table, key)))}\n"
        lines.append(line)
    flush()
    for (t, key), value in pending.items():
        lines.append(f"\n[{t}]\n{key} = {json.dumps(value)}\n")
    out = "".join(lines) + extra
    tomllib.loads(out)
    return out


def users_toml(alice_keys=None, signed=False):
    """alice, bob and root (an admin); ``signed``: alice's and bob's callback secrets."""
    text = "\n"
    for name in ("alice", "bob", "root"):
        text += f'\n[users.{name}]\ntoken_sha256 = "{token_sha256(TOKENS[name])}"\n'
        if signed and name in CALLBACK_SECRETS:
            text += f'callback_secret = "{CALLBACK_SECRETS[name]}"\n'
        if name == "root":
            text += "admin = true\n"
        if name == "alice":
            text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in (alice_keys or {}).items())
    return text


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One node from ``tree`` in a folder of its own, its own process group."""

    def __init__(self, tree, folder, database_url, keys=None, extra="", auth=None):
        self.tree, self.folder = tree, folder
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.auth = auth  # the other client's (user, token), if any
        self.database_url = database_url or "sqlite:///data/xruntime.db"
        os.makedirs(folder, exist_ok=True)
        self.config = os.path.join(folder, "xserver.toml")
        with open(self.config, "w", encoding="utf-8") as f:
            f.write(edited_config(tree.config_text, self.port, self.database_url, keys, extra))
        self.log_path = os.path.join(folder, "server.log")
        self.proc = None
        self.killed = False

    def start(self, timeout=60):
        self._log = open(self.log_path, "ab")
        env = {**os.environ, "PYTHONPATH": self.tree.pythonpath, "XRUNTIME_SERVICE_MODULES": ""}

        def limits():
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (NOFILE, NOFILE)
            )  # (a node raises soft to hard)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xruntime", "serve", "--config", self.config],
            cwd=self.tree.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=limits,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"node exited with {self.proc.returncode}:\n{self.log()[-3000:]}"
                )
            status, _, _ = call(
                self,
                "XRuntime",
                "getRuntimeInformation",
                {},
                timeout=2,
                auth=("root", TOKENS["root"]) if self.auth else None,
            )
            if status == 200 and self.log().count("started (pid") >= 2:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"node did not start:\n{self.log()[-3000:]}")

    def pids(self):
        if self.proc is None or self.proc.poll() is not None:
            return []
        return [self.proc.pid] + descendants(self.proc.pid)

    def stop(self):
        """SIGTERM, then SIGKILL to its process group (the node and all it started)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self._log.close()

    def kill(self):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def log(self):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stored_bytes(self):
        """The store's size: the SQLite folder's files, or the PostgreSQL database."""
        if self.database_url.startswith("sqlite"):
            folder = os.path.join(self.folder, "data")
            return (
                sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
                if os.path.isdir(folder)
                else 0
            )
        from sqlalchemy import create_engine

        engine = create_engine(self.database_url)
        try:
            with engine.connect() as conn:
                return conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
        finally:
            engine.dispose()


# ------------------------------------------------------------------------ HTTP


def basic(auth):
    return (
        {"Authorization": "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()}
        if auth
        else {}
    )


def raw(port, method, path, body=b"", headers=None, timeout=30):
    """(status, body, seconds) of one request on a new connection; status 0: no answer."""
    began = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, data, time.monotonic() - began
    except (OSError, http.client.HTTPException) as exc:
        return 0, repr(exc).encode(), time.monotonic() - began
    finally:
        conn.close()


def call(node, service, operation, body, timeout=30, auth=None, headers=None):
    """A JSON call: (status, answer or None, seconds)."""
    status, data, took = raw(
        node.port,
        "POST",
        f"/services/rs/{service}/{operation}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json", **basic(auth), **(headers or {})},
        timeout,
    )
    try:
        answer = json.loads(data) if status else None
    except ValueError:
        answer = None
    return status, answer, took


def nbytes(n):
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def fault_of(data: bytes):
    found = FAULT.search(data[:8192])
    return found.group(1).decode() if found else ""


def outcome_of(status, data):
    return "no answer" if status == 0 else f"{status} {fault_of(data)}".strip()


def jsonrpc(method, params, id):
    return {"jsonrpc": "2.0", "method": method, "params": params, "id": id}


def wait_done(node, job_id, auth=None, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, job, _ = call(
            node, "XRuntime", "watchJob", {"id": job_id, "maximumPollingPeriod": 2000}, auth=auth
        )
        if status == 200 and job["status"] in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"):
            return job
        if status != 200:
            time.sleep(0.2)
    return {"status": "timed out"}


# ------------------------------------------------------------------------ measuring


class Sampler(threading.Thread):
    """The node's RSS every 50 ms; sets ``stop_abuse`` past RSS_STOP, kills past RSS_KILL."""

    def __init__(self, node, stop_abuse):
        super().__init__(daemon=True)
        self.node, self.stop_abuse = node, stop_abuse
        self.done = threading.Event()
        self.before = self.peak = rss(node.pids())
        self.cpu_before = cpu(node.pids())
        self.capped = False

    def run(self):
        pids, refreshed = self.node.pids(), time.monotonic()
        while not self.done.wait(0.05):
            if time.monotonic() - refreshed > 0.5:
                pids, refreshed = self.node.pids(), time.monotonic()
            now = rss(pids)
            self.peak = max(self.peak, now)
            if now > RSS_STOP:
                self.capped = True
                self.stop_abuse.set()
            if now > RSS_KILL and not self.node.killed:
                self.node.killed = True
                self.node.kill()

    def finish(self):
        self.cpu_used = cpu(self.node.pids()) - self.cpu_before
        self.done.set()
        self.join()


def rss(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += (
                    next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) * 1024
                )
        except (OSError, StopIteration):
            pass
    return total


def cpu(pids):
    ticks, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        except OSError:
            pass
    return total


class Other(threading.Thread):
    """The well-behaved caller: a round of calls on a new connection each, timed."""

    def __init__(self, node, follow=False):
        super().__init__(daemon=True)
        self.node = node
        self.done = threading.Event()
        self.latencies, self.errors = [], {}
        self.follow = follow  # watch each job to its end (untimed) before deleting it
        self.finals = {}  # with follow: {status each job had after at most 5 s: count}

    def timed(self, service, operation, body):
        status, data, took = raw(
            self.node.port,
            "POST",
            f"/services/rs/{service}/{operation}",
            json.dumps(body).encode(),
            {"Content-Type": "application/json", **basic(self.node.auth)},
            OTHER_TIMEOUT,
        )
        self.latencies.append(took)
        if status != 200:
            kind = (
                f"{status} {fault_of(data)}".strip()
                if status
                else "no answer (" + data.decode().split("(")[0] + ")"
            )
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return status, None
        return status, json.loads(data)

    def run(self):
        while not self.done.is_set():
            began = time.monotonic()
            self.timed("XRuntime", "getRuntimeInformation", {})
            if self.done.is_set():
                break
            status, job = self.timed("XDemo", "startSimulate", {"durationMs": 0, "steps": 1})
            if status == 200 and not self.done.is_set():
                if self.follow:
                    self.follow_job(job["id"])
                self.timed("XRuntime", "deleteJob", {"id": job["id"]})
            self.done.wait(max(0.0, 0.02 - (time.monotonic() - began)))

    def follow_job(self, job_id):
        """The job watched (not timed) until it ends or 5 s passed; its status counted."""
        deadline, final = time.monotonic() + 5, "?"
        while time.monotonic() < deadline:
            status, job, _ = call(
                self.node,
                "XRuntime",
                "watchJob",
                {"id": job_id, "maximumPollingPeriod": 5000},
                timeout=OTHER_TIMEOUT,
                auth=self.node.auth,
            )
            final = job["status"] if status == 200 and job else f"watch {status}"
            if final in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN") or status != 200:
                break
        self.finals[final] = self.finals.get(final, 0) + 1

    def finish(self):
        self.done.set()
        self.join(OTHER_TIMEOUT * 3 + 5)


class Context:
    def __init__(self, node, quick, stop_abuse, cap):
        self.node, self.quick, self.stop_abuse = node, quick, stop_abuse
        self.deadline = time.monotonic() + cap
        self.notes = []
        self.missed = []  # a row's own targets it missed (the tenant rows)

    def running(self):
        return not self.stop_abuse.is_set() and time.monotonic() < self.deadline

    def size(self, full, quick):
        return quick if self.quick else full


# ------------------------------------------------------------------------ the abuses
# Each item: (title, node settings, prepare(ctx) or None, abuse(ctx) → (outcome, refused
# after in s or None), wall-clock cap in s (full, quick)).


def prepare_1a(ctx):
    status, job, _ = call(
        ctx.node,
        "XDemo",
        "startSimulate",
        {"durationMs": 0, "steps": 1, "resultSize": ctx.size(100, 20) * MB},
    )
    ctx.job = job["id"]
    assert wait_done(ctx.node, ctx.job)["status"] == "SUCCEEDED"


def abuse_1a(ctx):
    batch = [jsonrpc("fetchSimulateResponse", {"id": ctx.job}, i) for i in range(8)]
    return post_batch(ctx, "XDemo", batch, f"8 fetches of a {ctx.size(100, 20)} MiB result")


def post_batch(ctx, service, batch, what, parse=True):
    """Sends one batch, reads the answer in chunks (stops at the caps)."""
    body = json.dumps(batch).encode()
    began = time.monotonic()
    conn = http.client.HTTPConnection(
        "127.0.0.1", ctx.node.port, timeout=max(1, ctx.deadline - began)
    )
    size, chunks = 0, []
    try:
        conn.request("POST", f"/services/rpc/{service}", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        while True:
            if not ctx.running():
                return f"{what}: stopped after {size / MB:.0f} MB of answer " + (
                    "(node RSS ≥ 3 GB)" if ctx.stop_abuse.is_set() else "(timed out)"
                ), None
            chunk = response.read1(1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size <= 64 * MB:
                chunks.append(chunk)
    except (OSError, http.client.HTTPException) as exc:
        return f"{what}: {exc!r} after {time.monotonic() - began:.1f} s", None
    finally:
        conn.close()
    took = time.monotonic() - began
    data = b"".join(chunks)
    summary = f"{response.status}, {nbytes(len(body))} in, {nbytes(size)} out"
    if parse and size <= 64 * MB:
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and "error" in answer:
            summary += f", refused whole: {answer['error'].get('code')} {fault_of(data)}"
        elif isinstance(answer, list):
            errors = {}
            for item in answer:
                if "error" in item:
                    error = item["error"]
                    key = f"{error.get('code')} {error.get('data', {}).get('$type', '')}".strip()
                    errors[key] = errors.get(key, 0) + 1
            summary += f", {len(answer) - sum(errors.values())} results" + "".join(
                f", {n} × {key}" for key, n in errors.items()
            )
    refused = "refused" in summary or "×" in summary
    return f"{what}: {summary}", took if refused else None


def abuse_1b(ctx):
    n = ctx.size(20_000, 5_000)
    batch = [jsonrpc("getRuntimeInformation", {}, i) for i in range(n)]
    results = [None, None]

    def one(i):
        results[i] = post_batch(ctx, "XRuntime", batch, f"{n} items")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [r[1] for r in results if r and r[1] is not None]
    texts = [r[0] if r else "no outcome" for r in results]
    text = f"2 × {texts[0]}" if texts[0] == texts[1] else "; ".join(texts)
    return text, (max(refused) if len(refused) == 2 else None)


def prepare_1c(ctx):
    for _ in range(ctx.size(300, 100)):
        call(ctx.node, "XDemo", "startSimulate", {"durationMs": 0, "steps": 1})


def abuse_1c(ctx):
    batch = [jsonrpc("listJobs", {"limit": 1000}, i) for i in range(1000)]
    return post_batch(ctx, "XRuntime", batch, "1000 × listJobs")


BIG = 2**63 - 1


def prepare_busy(ctx):
    """Both workers busy with a long job each."""
    ctx.busy = [
        call(
            ctx.node, "XDemo", "startSimulate", {"durationMs": ctx.size(15_000, 8_000), "steps": 1}
        )[1]["id"]
        for _ in range(2)
    ]


def abuse_2a(ctx):
    status, answer, took = call(
        ctx.node,
        "XDemo",
        "startSimulate",
        {"durationMs": 0, "steps": 1, "timeouts": {"queueingTimeout": BIG}},
    )
    refused = status != 200
    outcome = f"queueingTimeout 2^63-1: {status} {fault_of(json.dumps(answer).encode())}".strip()
    time.sleep(2)  # a few housekeeping rounds
    began = time.monotonic()
    status, job, _ = call(
        ctx.node,
        "XDemo",
        "startSimulate",
        {"durationMs": 0, "steps": 1, "timeouts": {"queueingTimeout": 2000}},
    )
    while ctx.running():
        status, job, _ = call(
            ctx.node, "XRuntime", "watchJob", {"id": job["id"], "maximumPollingPeriod": 1000}
        )
        if status == 200 and job["status"] != "QUEUING":
            break
    fired = time.monotonic() - began
    other = (
        f"other's 2 s queueing timeout: {job.get('status') if job else status} after {fired:.1f} s"
    )
    if job and job.get("status") == "QUEUING":
        other = f"other's 2 s queueing timeout: still QUEUING after {fired:.1f} s (timed out)"
    for busy in ctx.busy:  # free the workers
        call(ctx.node, "XRuntime", "deleteJob", {"id": busy})
    return f"{outcome}; {other}", took if refused else None


def abuse_2b(ctx):
    def workers():
        return sum(
            1 for name in process_names(ctx.node.pids(), ctx.node.port).values() if name == "worker"
        )

    before = workers()
    status, answer, took = call(
        ctx.node,
        "XDemo",
        "startSimulate",
        {"durationMs": 100, "steps": 1, "timeouts": {"computationTimeout": BIG}},
    )
    refused = status != 200
    outcome = f"computationTimeout 2^63-1: {status} {fault_of(json.dumps(answer).encode())}".strip()
    if status == 200:
        outcome += f" → job {wait_done(ctx.node, answer['id'], timeout=10)['status']}"
    began = time.monotonic()
    ids = [
        call(ctx.node, "XDemo", "startSimulate", {"durationMs": 0, "steps": 1})[1]["id"]
        for _ in range(4)
    ]
    done = sum(
        wait_done(ctx.node, job, timeout=max(1, min(10, ctx.deadline - time.monotonic())))["status"]
        == "SUCCEEDED"
        for job in ids
    )
    outcome += (
        f"; then {done}/4 plain jobs done in {dur(time.monotonic() - began)}, "
        f"worker processes {before} → {workers()}"
    )
    return outcome, took if refused else None


def big_header(ctx, size, results, index):
    began = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", ctx.node.port), timeout=60)
    sent = 0
    try:
        sock.sendall(
            b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: x\r\nX-Big: "
        )
        chunk = b"a" * MB
        while sent < size and ctx.running():
            sock.sendall(chunk)
            sent += len(chunk)
        if sent >= size:
            sock.sendall(b"\r\nContent-Length: 2\r\n\r\n{}")
        sock.settimeout(max(1, ctx.deadline - time.monotonic()))
        answer = sock.recv(200)
        line = answer.split(b"\r\n")[0].decode(errors="replace") or "closed"
    except TimeoutError:
        line = "timed out"
    except OSError as exc:
        line = type(exc).__name__
    finally:
        sock.close()
    results[index] = (f"{line} after {sent / MB:.0f} MB", time.monotonic() - began)


def abuse_3a(ctx):
    size = ctx.size(150, 20) * MB
    results = [None, None]
    threads = [threading.Thread(target=big_header, args=(ctx, size, results, i)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = all(
        r[0].startswith(("HTTP/1.1 4", "ConnectionReset", "BrokenPipe", "closed")) for r in results
    )
    return (
        f"2 × {size // MB} MB header: " + "; ".join(r[0] for r in results),
        max(r[1] for r in results) if refused else None,
    )


def abuse_3b(ctx):
    http_processes = sum(
        1 for name in process_names(ctx.node.pids(), ctx.node.port).values() if name == "http"
    )
    count, hold = 1100 * max(1, http_processes), ctx.size(15, 6)
    socks, refused_at, failed = [], None, 0
    began = time.monotonic()
    try:
        for _ in range(count):
            if not ctx.running():
                break
            try:
                sock = socket.create_connection(("127.0.0.1", ctx.node.port), timeout=5)
                sock.sendall(
                    b"POST /services/rs/XRuntime/getRuntimeInformation HTTP/1.1\r\nHost: x\r\n"
                )
                sock.setblocking(False)
                socks.append(sock)
            except OSError:
                failed += 1
        opened = time.monotonic() - began
        closed, answered = set(), {}
        end = time.monotonic() + hold
        while time.monotonic() < end and ctx.running():
            for i, sock in enumerate(socks):
                if i in closed:
                    continue
                try:
                    data = sock.recv(200)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                closed.add(i)
                line = data.split(b"\r\n")[0].decode(errors="replace") or "closed"
                answered[line] = answered.get(line, 0) + 1
                if refused_at is None:
                    refused_at = time.monotonic() - began
            time.sleep(0.1)
    finally:
        for sock in socks:
            sock.close()
    got = ", ".join(f"{n} {line}" for line, n in answered.items()) or "none closed"
    return (
        f"{len(socks)} sockets ({http_processes} HTTP processes) opened in {opened:.1f} s "
        f"({failed} failed), held {hold} s: {got}",
        refused_at,
    )


def parallel_posts(ctx, path, body, content_type, count):
    results = [None] * count

    def one(i):
        status, data, took = raw(
            ctx.node.port,
            "POST",
            path,
            body,
            {"Content-Type": content_type},
            timeout=max(1, ctx.deadline - time.monotonic()),
        )
        results[i] = (outcome_of(status, data), took)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = {}
    for kind, _ in results:
        kinds[kind] = kinds.get(kind, 0) + 1
    refused = all(not kind.startswith("2") for kind, _ in results)
    return ", ".join(f"{n} × {kind}" for kind, n in kinds.items()), (
        max(took for _, took in results) if refused else None
    )


def abuse_4a(ctx):
    size, count = ctx.size(10 * MB - 4096, 2 * MB), ctx.size(8, 2)
    head = f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Header>'.encode()
    tail = (
        f'</soap:Header><soap:Body><r:getRuntimeInformation xmlns:r="{XRUNTIME_NS}"/>'
        "</soap:Body></soap:Envelope>"
    ).encode()
    body = head + b"<a/>" * ((size - len(head) - len(tail)) // 4) + tail
    kinds, took = parallel_posts(
        ctx, "/services/ws/XRuntime", body, "text/xml; charset=utf-8", count
    )
    return f"{count} × {len(body) / 1e6:.1f} MB SOAP: {kinds}", took


def abuse_4b(ctx):
    size, count = ctx.size(10 * MB - 4096, 2 * MB), ctx.size(8, 2)
    body = b"[" + b"[]," * ((size - 4) // 3) + b"[]]"
    kinds, took = parallel_posts(
        ctx, "/services/rs/XRuntime/getRuntimeInformation", body, "application/json", count
    )
    return f"{count} × {len(body) / 1e6:.1f} MB JSON: {kinds}", took


ALICE = ("alice", TOKENS["alice"])
ROOT_USER = ("root", TOKENS["root"])


def locations(n, seed):
    rng = random.Random(seed)
    return [
        {"longitude": rng.uniform(6.0, 15.0), "latitude": rng.uniform(47.3, 55.0)} for _ in range(n)
    ]


def queued_peak(ctx, peaks, done):
    """The most jobs (all users') seen QUEUING, polled every 100 ms as root, into ``peaks``."""
    while not done.wait(0.1):
        status, info, _ = call(
            ctx.node,
            "XRuntime",
            "getRuntimeInformation",
            {"withJobCounts": True},
            auth=ROOT_USER,
            timeout=10,
        )
        if status == 200:
            for count in info.get("jobs") or []:
                peaks[count["status"]] = max(peaks.get(count["status"], 0), count["count"])


def prepare_5(ctx):
    """Both workers busy with root's jobs, so that alice's parents all queue first."""
    for _ in range(2):
        call(
            ctx.node,
            "XDemo",
            "startSimulate",
            {"durationMs": ctx.size(3000, 2000), "steps": 1},
            auth=ROOT_USER,
        )


def abuse_5(ctx):
    parents, starts, peaks, polled = [], {}, {}, threading.Event()
    poller = threading.Thread(target=queued_peak, args=(ctx, peaks, polled), daemon=True)
    poller.start()
    began, refused_at = time.monotonic(), None
    points = locations(64, 5)
    gate = threading.Barrier(20)
    lock = threading.Lock()

    def start():  # all 20 at once, as a batch would
        gate.wait()
        status, answer, took = call(
            ctx.node,
            "XDima",
            "startCreateDistanceMatrix",
            {"startLocations": points, "parallelism": 64},
            auth=ALICE,
        )
        kind = outcome_of(status, json.dumps(answer).encode())
        with lock:
            starts[kind] = starts.get(kind, 0) + 1
            if status == 200:
                parents.append(answer["id"])

    threads = [threading.Thread(target=start) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    finals = {}
    while ctx.running():
        statuses = []
        for job in parents:
            status, answer, _ = call(
                ctx.node, "XRuntime", "watchJob", {"id": job, "maximumPollingPeriod": 0}, auth=ALICE
            )
            statuses.append(answer["status"] if status == 200 else "?")
        if statuses.count("FAILED") and refused_at is None:
            refused_at = time.monotonic() - began
        if all(s in ("SUCCEEDED", "FAILED", "DELETED") for s in statuses):
            break
        time.sleep(0.2)
    polled.set()
    poller.join()
    for job in parents:
        status, answer, _ = call(
            ctx.node, "XRuntime", "watchJob", {"id": job, "maximumPollingPeriod": 0}, auth=ALICE
        )
        final = answer["status"] if status == 200 else "?"
        if final == "FAILED":
            s, data, _ = raw(
                ctx.node.port,
                "POST",
                "/services/rs/XDima/fetchDistanceMatrixResponse",
                json.dumps({"id": job}).encode(),
                {"Content-Type": "application/json", **basic(ALICE)},
            )
            final += " " + fault_of(data)
        finals[final] = finals.get(final, 0) + 1
        call(ctx.node, "XRuntime", "deleteJob", {"id": job}, auth=ALICE)
    if time.monotonic() >= ctx.deadline:
        finals["(timed out)"] = 1
    return (
        "starts: "
        + ", ".join(f"{n} × {k}" for k, n in starts.items())
        + "; parents: "
        + ", ".join(f"{n} × {k}" for k, n in finals.items())
        + f"; queue peak {peaks.get('QUEUING', 0)} jobs (max_queued 500)"
    ), refused_at


def quota_key(tree):
    """(table, key) of a ``max_stored...`` key the tree's config names, if any."""
    table = None
    for line in tree.config_text.splitlines():
        stripped = line.lstrip("# ").strip()
        if stripped.startswith("["):
            table = stripped.split("]")[0].strip("[ ")
            continue
        found = re.match(r"(max_stored\w*)\s*=", stripped)
        if found:
            return table, found.group(1)
    return None


QUOTA = 64 * MB


def abuse_6(ctx):
    n, cap = ctx.size(1000, 500), ctx.size(30, 8)
    points = locations(n, 6)
    before = ctx.node.stored_bytes()
    began, refused_at, outcome, jobs = time.monotonic(), None, None, []
    for _ in range(cap):
        if not ctx.running():
            break
        status, answer, took = call(
            ctx.node, "XDima", "startCreateDistanceMatrix", {"startLocations": points}, auth=ALICE
        )
        if status != 200:
            outcome, refused_at = (
                f"start {outcome_of(status, json.dumps(answer).encode())}",
                time.monotonic() - began,
            )
            break
        jobs.append(answer["id"])
        job = wait_done(
            ctx.node, answer["id"], auth=ALICE, timeout=max(1, ctx.deadline - time.monotonic())
        )
        if job["status"] == "FAILED":
            s, data, _ = raw(
                ctx.node.port,
                "POST",
                "/services/rs/XDima/fetchDistanceMatrixResponse",
                json.dumps({"id": answer["id"]}).encode(),
                {"Content-Type": "application/json", **basic(ALICE)},
            )
            outcome, refused_at = f"job FAILED {fault_of(data)}", time.monotonic() - began
            break
    grown = ctx.node.stored_bytes() - before
    key = getattr(ctx, "quota_key", None)
    limit = f"{key[1]} {QUOTA // MB} MiB" if key else "no quota key in the config"
    if outcome is None:
        outcome = "never refused" + (" (timed out)" if time.monotonic() >= ctx.deadline else "")
    return (
        f"{len(jobs)} jobs of {n}×{n} started; {outcome}; "
        f"store grew {grown / 1e6:.0f} MB ({limit})",
        refused_at,
    )


def abuse_7(ctx):
    """The tree's CLI against a redirecting local server (no node)."""
    heard = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            heard.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            body = b'{"jobs": []}'
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, *args):
            pass

    elsewhere = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)
    parts = []
    for code in (302, 307):

        class Redirecting(http.server.BaseHTTPRequestHandler):
            def do_POST(self, code=code):
                self.send_response(code)
                self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_port}{self.path}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST

            def log_message(self, *args):
                pass

        redirecting = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
        servers = (elsewhere, redirecting) if code == 302 else (redirecting,)
        for s in servers:
            threading.Thread(target=s.serve_forever, daemon=True).start()
        heard.clear()
        env = {k: v for k, v in os.environ.items() if not k.startswith("XRUNTIME_")}
        env.update(
            PYTHONPATH=ctx.tree.pythonpath,
            XRUNTIME_URL=f"http://127.0.0.1:{redirecting.server_port}",
            XRUNTIME_TOKEN="s3cret-token",
        )
        began = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "xruntime", "jobs"],
                cwd=ctx.tree.root,
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
            )
            exit_code = done.returncode
        except subprocess.TimeoutExpired:
            exit_code = "timed out"
        took = time.monotonic() - began
        redirecting.shutdown()
        redirecting.server_close()
        forwarded = (
            "yes"
            if any(h and "s3cret-token" in base64_or_plain(h) for h in heard)
            else ("no (but the other host was called)" if heard else "no")
        )
        parts.append(f"{code}: token forwarded: {forwarded}, exit {exit_code}")
    elsewhere.shutdown()
    elsewhere.server_close()
    return "; ".join(parts), took


def base64_or_plain(header):
    value = header.split(" ", 1)[-1]
    with contextlib.suppress(ValueError):
        return header + base64.b64decode(value + "==").decode(errors="replace")
    return header


def abuse_8(ctx):
    body = json.dumps({"durationMs": 0, "steps": 1}).encode()
    path = "/services/rs/XDemo/startSimulate"
    cases = {
        "text/plain + Origin evil": {
            "Content-Type": "text/plain",
            "Origin": "https://evil.example",
        },
        "form + Origin evil": {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": "https://evil.example",
        },
        "Host evil.example": {"Content-Type": "application/json", "Host": "evil.example"},
    }
    parts, started, slowest, all_refused = [], 0, 0.0, True
    for name, headers in cases.items():
        status, data, took = raw(ctx.node.port, "POST", path, body, headers)
        slowest = max(slowest, took)
        if status == 200 and b'"id"' in data:
            started += 1
            all_refused = False
            parts.append(f"{name}: 200, job started")
        else:
            parts.append(f"{name}: {outcome_of(status, data)}")
    return "; ".join(parts) + f" ({started}/3 started a job)", slowest if all_refused else None


def abuse_9(ctx):
    node, parts, log_at = ctx.node, [], len(ctx.node.log())
    # a listJobs cursor past int64, 50 times
    cursor = base64.urlsafe_b64encode(f"before:{2**64}".encode()).decode().rstrip("=")
    kinds, slowest, all_refused = {}, 0.0, True
    for _ in range(50):
        status, data, took = raw(
            node.port,
            "POST",
            "/services/rs/XRuntime/listJobs",
            json.dumps({"cursor": cursor}).encode(),
            {"Content-Type": "application/json", **basic(ROOT_USER)},
        )
        kinds[outcome_of(status, data)] = kinds.get(outcome_of(status, data), 0) + 1
        all_refused = all_refused and 400 <= status < 500
        slowest = max(slowest, took)
    tracebacks = node.log()[log_at:].count("Traceback")
    parts.append(
        "cursor past int64 ×50: "
        + ", ".join(f"{n} × {k}" for k, n in kinds.items())
        + f", {tracebacks} tracebacks logged"
    )
    # a %0a in a refused path
    forged = "2026-01-01 00:00:00,000 CRITICAL xruntime[1]: forged"
    for _ in range(3):
        raw(
            node.port,
            "POST",
            "/services/rs/XDemo/startSimulate%0a" + forged.replace(" ", "%20"),
            b"{}",
            {"Content-Type": "application/json"},
        )
        time.sleep(1.1)  # refusals are logged once a second
    forged_lines = sum(line.startswith(forged) for line in node.log()[log_at:].splitlines())
    parts.append(f"%0a in a path: forged log line {'yes' if forged_lines else 'no'}")
    # the SQLite file's mode
    path = os.path.join(node.folder, "data", "xruntime.db")
    if os.path.exists(path):
        parts.append(
            f"SQLite file {os.stat(path).st_mode & 0o777:o}, folder "
            f"{os.stat(os.path.dirname(path)).st_mode & 0o777:o}"
        )
    # malformed datagrams to the node's change-feed sockets
    addresses = feed_addresses(node)
    log_at = len(node.log())
    for address in addresses:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            for datagram in (b"\xff\xfe not utf-8", b"n/x/9\njob\x00with a NUL"):
                with contextlib.suppress(OSError):
                    sock.sendto(datagram, address)
    time.sleep(1)
    parts.append(
        f"bad datagrams to {len(addresses)} feed sockets: "
        f"{node.log()[log_at:].count('Traceback')} tracebacks logged"
    )
    # CDATA holding "<!"
    envelope = (
        f'<soap:Envelope xmlns:soap="{SOAP_ENV}"><soap:Body><r:watchJob xmlns:r="{XRUNTIME_NS}">'
        "<id><![CDATA[x<!y]]></id></r:watchJob></soap:Body></soap:Envelope>"
    ).encode()
    status, data, _ = raw(
        node.port,
        "POST",
        "/services/ws/XRuntime",
        envelope,
        {"Content-Type": "text/xml; charset=utf-8", **basic(ROOT_USER)},
    )
    parts.append(f"CDATA x<!y: {outcome_of(status, data)}" + (" (DTD)" if b"DTD" in data else ""))
    return "; ".join(parts), slowest if all_refused else None


def feed_addresses(node):
    """The abstract Unix datagram sockets the node's processes hold."""
    inodes = set()
    for pid in node.pids():
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    found = []
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 8 and fields[6] in inodes and fields[7].startswith("@xruntime-feed/"):
                found.append("\0" + fields[7][1:])
    return found


# ------------------------------------------------------------------------ tenants (issue 32)
# Accounts on: alice abuses, bob is the other caller (the Other loop runs as bob; in
# t1 and t2 he also starts jobs with a callback of his own), root is an admin.

BOB = ("bob", TOKENS["bob"])
CALLBACK_TIMEOUT = 10  # s: [callbacks] timeout's default, one attempt's deadline
STORED_QUOTA = 50 * MB  # t4: alice's max_stored_bytes
TMPFS_BYTES = 64 * MB  # t5: the disk of the node's database
MIN_FREE = 4 * MB  # t5: [database] min_free_bytes, where the tree has the key
ENDED = ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN")


def xdima_bound(n):
    """What an n × n XDima result may take (rows × columns × 8 bytes)."""
    return n * n * 8


class Peak(threading.Thread):
    """The largest ``measure()`` seen every ``period`` s, until ``finish()``."""

    def __init__(self, measure, period=0.25):
        super().__init__(daemon=True)
        self.measure, self.period = measure, period
        self.done = threading.Event()
        self.peak = self.last = measure()

    def sample(self):
        with contextlib.suppress(Exception):  # a store or folder busy for a moment
            self.last = self.measure()
            self.peak = max(self.peak, self.last)

    def run(self):
        while not self.done.wait(self.period):
            self.sample()

    def finish(self):
        self.done.set()
        self.join()
        self.sample()
        return self.peak


def disk_bytes(path):
    """Bytes the files under ``path`` take on their disk (allocated blocks)."""
    total = 0
    for folder, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def node_disk(node):
    """What the node's store takes: its data folder (the database and ``<db>.results/``),
    or the PostgreSQL database's size."""
    if node.database_url.startswith("sqlite"):
        return disk_bytes(os.path.join(node.folder, "data"))
    return node.stored_bytes()


def store_rows(node, sql):
    """The rows of one query of the node's store (SQLite read only)."""
    if node.database_url.startswith("sqlite"):
        path = os.path.join(node.folder, "data", "xruntime.db")
        with contextlib.closing(
            sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        ) as conn:
            return conn.execute(sql).fetchall()
    from sqlalchemy import create_engine

    engine = create_engine(node.database_url)
    try:
        with engine.connect() as conn:
            return list(conn.exec_driver_sql(sql))
    finally:
        engine.dispose()


def outbox_rows(node):
    """{type: rows} of the node's callback_outbox."""
    return dict(store_rows(node, "SELECT type, count(*) FROM callback_outbox GROUP BY type"))


def fault_message(data, size=150):
    """A JSON fault's type and the start of its message."""
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(data).get("message", "")
        return f"{fault_of(data)} ({message[:size]}{'…' if len(message) > size else ''})"
    return fault_of(data) or data[:size].decode(errors="replace")


def failed_fault(ctx, service, fetch, job_id, auth):
    _, data, _ = raw(
        ctx.node.port,
        "POST",
        f"/services/rs/{service}/{fetch}",
        json.dumps({"id": job_id}).encode(),
        {"Content-Type": "application/json", **basic(auth)},
    )
    return fault_message(data)


def counted(kinds):
    return ", ".join(f"{n} × {kind}" for kind, n in kinds.items()) or "none"


def wait_until(ctx, condition, timeout):
    """Until ``condition()`` holds, ``timeout`` s pass or the row's cap: whether it held."""
    deadline = min(ctx.deadline, time.monotonic() + timeout)
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def rpc_starts(node, auth, service, method, params, n):
    """``n`` starts as JSON-RPC batches of 100: (job ids, {refusal: count})."""
    ids, refused = [], {}
    for first in range(0, n, 100):
        batch = [jsonrpc(method, params, i) for i in range(first, min(n, first + 100))]
        status, data, _ = raw(
            node.port,
            "POST",
            f"/services/rpc/{service}",
            json.dumps(batch).encode(),
            {"Content-Type": "application/json", **basic(auth)},
            timeout=120,
        )
        try:
            answers = json.loads(data) if status == 200 else None
        except ValueError:
            answers = None
        if not isinstance(answers, list):
            kind = outcome_of(status, data)
            refused[kind] = refused.get(kind, 0) + len(batch)
            continue
        for answer in answers:
            if "result" in answer:
                ids.append(answer["result"]["id"])
            else:
                error = answer.get("error") or {}
                kind = f"{error.get('code')} {(error.get('data') or {}).get('$type', '')}".strip()
                refused[kind] = refused.get(kind, 0) + 1
    return ids, refused


def alice_starts(ctx, n, request, service="XDemo", operation="startSimulate"):
    """alice's ``n`` starts of ``request``, one after another: (ids, {answer: count})."""
    ids, kinds = [], {}
    for _ in range(n):
        if not ctx.running():
            break
        status, answer, _ = call(ctx.node, service, operation, request, auth=ALICE)
        kind = "accepted" if status == 200 else outcome_of(status, json.dumps(answer).encode())
        kinds[kind] = kinds.get(kind, 0) + 1
        if status == 200:
            ids.append(answer["id"])
    return ids, kinds


def bob_callbacks(ctx, receiver, span):
    """bob starts an XDemo job (0 ms) with a callback to ``receiver`` every 0.5 s for
    ``span`` s, then waits up to one attempt's deadline + 5 s for the last: his
    job.finished callbacks' delays (arrival at ``receiver`` minus his start's answer).
    Answers (text, whether each arrived within one attempt's deadline)."""
    grace = CALLBACK_TIMEOUT + 5
    answered, refused = {}, {}
    end = min(time.monotonic() + span, ctx.deadline - grace - 1)
    while time.monotonic() < end and ctx.running():
        began = time.monotonic()
        status, answer, _ = call(
            ctx.node,
            "XDemo",
            "startSimulate",
            {"durationMs": 0, "steps": 1, "callback": {"url": receiver.url}},
            auth=BOB,
            timeout=OTHER_TIMEOUT,
        )
        if status == 200:
            answered[answer["id"]] = time.time()
        else:
            kind = outcome_of(status, json.dumps(answer).encode())
            refused[kind] = refused.get(kind, 0) + 1
        time.sleep(max(0.0, 0.5 - (time.monotonic() - began)))

    def arrived():
        with receiver.changed:
            got = list(receiver.received)
        first = {}
        for received in got:
            with contextlib.suppress(ValueError):
                data = received.data
                if data.get("type") == "job.finished" and data.get("id") in answered:
                    first.setdefault(data["id"], received.at)
        return first

    stop_at = min(time.monotonic() + grace, ctx.deadline)
    while time.monotonic() < stop_at and len(arrived()) < len(answered):
        time.sleep(0.2)
    first, now = arrived(), time.time()
    delays = [first[job] - answered[job] for job in answered if job in first]
    waiting = [now - answered[job] for job in answered if job not in first]
    text = f"bob's callbacks: {len(first)}/{len(answered)} arrived"
    if delays:
        text += f", delay p50 {dur(percentile(delays, 50))}, max {dur(max(delays))}"
    if waiting:
        text += f", {len(waiting)} never arrived (waited {min(waiting):.0f}–{max(waiting):.0f} s)"
    if refused:
        text += f" (his starts refused: {counted(refused)})"
    ok = bool(answered) and not waiting and max(delays) <= CALLBACK_TIMEOUT
    return text, ok


def open_now(hostile):
    """The connections to ``hostile`` the node has not closed yet (the kernel's view: a
    receiver's thread notes a close a little later)."""

    def still_open(conn):
        try:
            return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    with hostile.lock:
        conns = list(hostile.open)
    return sum(still_open(conn) for conn in conns)


def abuse_t1(ctx):
    trickler, healthy = HostileReceiver(every=5.0), Receiver()
    held = Peak(lambda: open_now(trickler), 0.05)
    held.start()
    try:
        _, kinds = alice_starts(
            ctx, 16, {"durationMs": 0, "steps": 1, "callback": {"url": trickler.url}}
        )
        wait_until(ctx, lambda: trickler.open_now() >= 1, 15)
        time.sleep(1)  # her first attempts under way
        text, ok = bob_callbacks(ctx, healthy, ctx.size(40, 12))
        cut = sorted(trickler.closed)
        outcome = (
            f"alice: 16 starts ({counted(kinds)}), her trickling receiver held "
            f"{held.finish()} of the 16 senders at once, {len(trickler.ids)} POSTs, "
            + (
                f"{len(cut)} attempts cut after {cut[0]:.1f}–{cut[-1]:.1f} s"
                if cut
                else "no attempt ended"
            )
            + f"; {text}"
        )
        if not ok:
            ctx.missed.append("bob's callbacks")
        return outcome, "-"
    finally:
        held.finish()
        trickler.close()
        healthy.stop()


def abuse_t2(ctx):
    silent, healthy = HostileReceiver(every=None), Receiver()
    lasting = int(max(60, ctx.deadline - time.monotonic() + 30)) * 1000  # past the row
    outbox = Peak(lambda: sum(outbox_rows(ctx.node).values()), 0.5)
    outbox.start()
    held = Peak(lambda: open_now(silent), 0.05)
    held.start()
    try:
        _, kinds = alice_starts(
            ctx,
            4,
            {
                "durationMs": lasting,
                "steps": lasting // 1000,
                "callback": {"url": silent.url, "progressPeriod": 1000},
            },
        )
        wait_until(ctx, lambda: len(silent.ids) >= 1, 15)
        time.sleep(2)  # a few progress periods
        text, ok = bob_callbacks(ctx, healthy, ctx.size(40, 12))
        peak = outbox.finish()
        end = outbox_rows(ctx.node)
        outcome = (
            f"alice: 4 jobs' progress every 1 s ({counted(kinds)}) to a receiver that never "
            f"answers: {len(silent.ids)} POSTs, {held.finish()} senders held at once; "
            f"outbox rows peak {peak}, at the end {sum(end.values())} ("
            + ", ".join(f"{n} {kind}" for kind, n in sorted(end.items()))
            + f"); {text}"
        )
        if not ok:
            ctx.missed.append("bob's callbacks")
        return outcome, "-"
    finally:
        outbox.finish()
        held.finish()
        silent.close()
        healthy.stop()


def abuse_t3(ctx):
    receiver = Receiver()
    base = f"http://127.0.0.1:{receiver.port}"
    urls = {
        "été": f"{base}/xr/été",
        "a space": f"{base}/xr/a b",
        "CR LF": f"{base}/xr/a\r\nX-Injected: yes",
        "/xr/../admin": f"{base}/xr/../admin",
        "NAT64 [64:ff9b::7f00:1]": f"http://[64:ff9b::7f00:1]:{receiver.port}/x",
    }
    log_at, jobs, parts, slowest = len(ctx.node.log()), {}, [], None
    try:
        for name, url in urls.items():
            # the NAT64 job lasts past the row: its callback is never attempted, so that
            # nothing leaves 127.0.0.1 (the address is routed off this machine)
            nat64 = name.startswith("NAT64")
            request = {
                "durationMs": 600_000 if nat64 else 0,
                "steps": 1,
                "callback": {"url": url},
            }
            status, answer, took = call(ctx.node, "XDemo", "startSimulate", request, auth=ALICE)
            if status == 200:
                jobs[name] = answer["id"]
            else:
                slowest = max(slowest or 0.0, took)
                parts.append(f"{name}: {outcome_of(status, json.dumps(answer).encode())}")
        watch = min(ctx.size(25, 10), max(1.0, ctx.deadline - time.monotonic() - 2))
        time.sleep(watch)
        log = ctx.node.log()[log_at:]
        lines = log.splitlines()
        with receiver.changed:
            got = list(receiver.received)
        for name, job in jobs.items():
            if name.startswith("NAT64"):
                parts.append(f"{name}: 200 accepted (its job kept running: not attempted)")
                continue
            # the callbacks process's lines naming the job: one an attempt (or a
            # "failed unexpectedly" before a traceback)
            attempts = sum(
                job in line and ("callbacks" in line or "delivery" in line) for line in lines
            )
            traces = sum(
                1
                for i, line in enumerate(lines)
                if line.startswith("Traceback") and i and job in lines[i - 1]
            )
            paths = [r.path for r in got if r.body and job in r.body.decode(errors="replace")]
            parts.append(
                f"{name}: 200 accepted → {attempts} attempts logged in {watch:.0f} s "
                f"({traces} with a traceback), "
                + (f"received at {paths[0]!r}" if paths else "nothing received")
            )
        parts.append(f"{log.count('Traceback')} tracebacks in all")
    finally:
        receiver.stop()
    return "; ".join(parts), slowest


def abuse_t4(ctx):
    n, count = 2000, ctx.size(40, 12)
    points = locations(n, 4)
    bound = STORED_QUOTA + xdima_bound(n)
    disk = Peak(lambda: node_disk(ctx.node), 0.25)
    before = disk.peak
    disk.start()
    began, first_refusal = time.monotonic(), None
    try:
        accepted, kinds = [], {}
        for _ in range(count):
            if not ctx.running():
                break
            status, answer, _ = call(
                ctx.node,
                "XDima",
                "startCreateDistanceMatrix",
                {"startLocations": points},
                auth=ALICE,
            )
            if status == 200:
                accepted.append(answer["id"])
                kind = "accepted"
            else:
                kind = outcome_of(status, json.dumps(answer).encode())
                if first_refusal is None:
                    first_refusal = time.monotonic() - began
            kinds[kind] = kinds.get(kind, 0) + 1
        started_in = time.monotonic() - began
        finals = {}
        for job in accepted:
            answer = wait_done(
                ctx.node, job, auth=ALICE, timeout=max(1, ctx.deadline - time.monotonic())
            )
            final = answer["status"]
            if final == "FAILED":
                final += " " + fault_of(
                    raw(
                        ctx.node.port,
                        "POST",
                        "/services/rs/XDima/fetchDistanceMatrixResponse",
                        json.dumps({"id": job}).encode(),
                        {"Content-Type": "application/json", **basic(ALICE)},
                    )[1]
                )
            finals[final] = finals.get(final, 0) + 1
    finally:
        peak = disk.finish()
    after = disk.last
    if peak > bound:
        ctx.missed.append("disk")
    if "timed out" in finals:
        ctx.missed.append("timed out")
    return (
        f"alice: {count} starts of {n}×{n} in {dur(started_in)}: {counted(kinds)}; "
        f"her jobs: {counted(finals)}; disk {before / 1e6:.1f} MB before, peak "
        f"{peak / 1e6:.1f} MB, {after / 1e6:.1f} MB once they ended (bound: quota "
        f"{STORED_QUOTA / 1e6:.1f} MB + one job's {xdima_bound(n) / 1e6:.0f} MB = "
        f"{bound / 1e6:.1f} MB)"
    ), first_refusal


@contextlib.contextmanager
def small_tmpfs(path, size):
    """A tmpfs of ``size`` bytes mounted at ``path``; unmounted afterwards, whatever
    happened (lazily if something still holds it)."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
    try:
        yield path
    finally:
        for _ in range(5):
            if subprocess.run(["umount", path], capture_output=True).returncode == 0:
                break
            time.sleep(1)
        else:
            subprocess.run(["umount", "--lazy", path], check=False)


def tmpfs_used(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def prepare_t5(ctx):
    ctx.follow_others = True  # bob's loop follows each of his jobs to its end


def abuse_t5(ctx):
    n = 1500
    points = locations(n, 15)
    disk = Peak(lambda: tmpfs_used(ctx.mount), 0.05)
    disk.start()
    began, refused_at, outcome, jobs = time.monotonic(), None, None, 0
    try:
        while ctx.running():
            status, answer, _ = call(
                ctx.node,
                "XDima",
                "startCreateDistanceMatrix",
                {"startLocations": points},
                auth=ALICE,
            )
            if status != 200:
                refused_at = time.monotonic() - began
                outcome = (
                    f"start {jobs + 1} refused: {status} "
                    f"{fault_message(json.dumps(answer).encode(), 100)}"
                )
                break
            jobs += 1
            job = wait_done(
                ctx.node, answer["id"], auth=ALICE, timeout=max(1, ctx.deadline - time.monotonic())
            )
            if job["status"] == "SUCCEEDED":
                continue
            if job["status"] == "FAILED":
                refused_at = time.monotonic() - began
                outcome = f"job {jobs} FAILED " + failed_fault(
                    ctx, "XDima", "fetchDistanceMatrixResponse", answer["id"], ALICE
                )
            else:
                _, job, _ = call(
                    ctx.node,
                    "XRuntime",
                    "watchJob",
                    {"id": answer["id"], "maximumPollingPeriod": 0},
                    auth=ALICE,
                )
                outcome = (
                    f"job {jobs} still {(job or {}).get('status', '?')} after "
                    f"{time.monotonic() - began:.0f} s (the cap)"
                )
                ctx.missed.append("alice's job stuck")
            break
        if outcome is None:
            outcome = f"{jobs} jobs, none failed (timed out)"
        # bob's loop a few seconds more on the disk as alice left it
        time.sleep(max(0.0, min(ctx.size(8, 4), ctx.deadline - time.monotonic())))
    finally:
        peak = disk.finish()
    finals = dict(ctx.other.finals)
    if set(finals) - {"SUCCEEDED"}:
        ctx.missed.append("bob's jobs")
    return (
        f"alice: {n}×{n} jobs ({xdima_bound(n) / 1e6:.0f} MB results) one after another: "
        f"{outcome}; bob's jobs followed to their end: {counted(finals)}; "
        f"tmpfs {TMPFS_BYTES // MB} MiB: peak used {peak / 1e6:.1f} MB, "
        f"{disk.last / 1e6:.1f} MB at the end"
    ), refused_at


def prepare_t6(ctx):
    """root's 2 long jobs hold both workers; then alice's 1 000 jobs all queue."""
    root = [
        call(
            ctx.node,
            "XDemo",
            "startSimulate",
            {"durationMs": 600_000, "steps": 1},
            auth=ROOT_USER,
        )[1]["id"]
        for _ in range(2)
    ]
    for job in root:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status, answer, _ = call(
                ctx.node,
                "XRuntime",
                "watchJob",
                {"id": job, "maximumPollingPeriod": 1000},
                auth=ROOT_USER,
            )
            if status == 200 and answer["status"] != "QUEUING":
                break
    ctx.alice_jobs, refused = rpc_starts(
        ctx.node, ALICE, "XDemo", "startSimulate", {"durationMs": 0, "steps": 1}, 1000
    )
    assert not refused, refused


def abuse_t6(ctx):
    calls, hold = ctx.size(1000, 300), ctx.size(20, 8)
    ids = ctx.alice_jobs
    body = json.dumps({"ids": ids, "maximumPollingPeriod": 50000}).encode()
    request = (
        "POST /services/rs/XRuntime/watchJobs HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{ctx.node.port}\r\nContent-Type: application/json\r\n"
        f"Authorization: {basic(ALICE)['Authorization']}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    selector = selectors.DefaultSelector()
    sent, answered, data, socks, failed = {}, {}, {}, [], 0

    def drain(timeout):
        for key, _ in selector.select(timeout):
            index, sock = key.data, key.fileobj
            try:
                chunk = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            answered.setdefault(index, time.monotonic() - sent[index])
            if len(data.get(index, b"")) < 8192:
                data[index] = data.get(index, b"") + chunk
            if not chunk:
                selector.unregister(sock)

    began = time.monotonic()
    try:
        for index in range(calls):
            if not ctx.running():
                break
            try:
                sock = socket.create_connection(("127.0.0.1", ctx.node.port), timeout=10)
                socks.append(sock)
                sent[index] = time.monotonic()
                sock.sendall(request)
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, index)
            except OSError:
                failed += 1
            drain(0)
        sending = time.monotonic() - began
        end = time.monotonic() + hold
        while time.monotonic() < end and ctx.running():
            drain(0.2)
        held = sum(1 for index in sent if index not in answered)
    finally:
        selector.close()
        for sock in socks:
            sock.close()
    kinds = {}
    for index in answered:
        got = data.get(index, b"")
        line = got.split(b"\r\n", 1)[0].split(b" ")
        kind = f"{line[1].decode()} {fault_of(got)}".strip() if len(line) > 1 else "closed"
        kinds[kind] = kinds.get(kind, 0) + 1
    refusals = [
        took for index, took in answered.items() if b"QuotaExceededFault" in data.get(index, b"")
    ]
    http_processes = sum(
        1 for name in process_names(ctx.node.pids(), ctx.node.port).values() if name == "http"
    )
    return (
        f"alice: {len(sent)} watchJobs of {len(ids)} ids each ({len(request) / 1e3:.0f} kB) "
        f"sent in {dur(sending)} on {http_processes} HTTP processes ({failed} failed): "
        f"{held} held {hold} s ({held * len(ids)} ids), answered: {counted(kinds)}"
    ), (max(refusals) if refusals else None)


def abuse_t7(ctx):
    n, duration = ctx.size(458, 100), ctx.size(2000, 1000)
    began = time.monotonic()
    ids, refused = rpc_starts(
        ctx.node, ALICE, "XDemo", "startSimulate", {"durationMs": duration, "steps": 1}, n
    )
    queued_in = time.monotonic() - began
    status, answer, _ = call(
        ctx.node, "XDemo", "startSimulate", {"durationMs": 0, "steps": 1}, auth=BOB
    )
    if status != 200:
        return f"bob's start: {outcome_of(status, json.dumps(answer).encode())}", None
    answered, final = time.monotonic(), None
    while ctx.running():
        status, job, _ = call(
            ctx.node,
            "XRuntime",
            "watchJob",
            {"id": answer["id"], "maximumPollingPeriod": 5000},
            auth=BOB,
        )
        if status == 200 and job["status"] in ENDED:
            final = job["status"]
            break
    waited = time.monotonic() - answered
    status, info, _ = call(
        ctx.node, "XRuntime", "getRuntimeInformation", {"withJobCounts": True}, auth=ALICE
    )
    hers = {c["status"]: c["count"] for c in (info or {}).get("jobs") or []}
    done = sum(n for s, n in hers.items() if s not in ("QUEUING", "RUNNING"))
    alice = f"alice: {len(ids)} jobs of {duration / 1000:.0f} s queued in {dur(queued_in)}" + (
        f" ({counted(refused)})" if refused else ""
    )
    if final is None:
        ctx.missed.append("bob's wait")
        return (
            f"{alice}; bob's 0 ms job not run within cap ({waited:.0f} s): {done} of hers "
            f"ended, {hers.get('QUEUING', 0)} still queued"
        ), "-"
    if waited > duration / 1000:
        ctx.missed.append("bob's wait")
    return (
        f"{alice}; bob's 0 ms job {final} after {dur(waited)} (one of her jobs: "
        f"{dur(duration / 1000)}); {done} of hers had ended by then"
    ), "-"


ACCOUNTS = users_toml()
TENANTS = {("auth", "required"): True}
CALLBACKS = {**TENANTS, ("callbacks", "allowed"): ["127.0.0.1"]}
SIGNED = users_toml(signed=True)

#: id: (title, node keys, extra TOML, prepare, abuse, cap s (full, quick), needs a node)
ITEMS = {
    "1a": ("JSON-RPC: 8 fetches of 100 MiB in a batch", None, "", prepare_1a, abuse_1a, (60, 20)),
    "1b": ("JSON-RPC: 2 × 20 000 items", None, "", None, abuse_1b, (60, 20)),
    "1c": ("JSON-RPC: 1 000 × listJobs 1000", None, "", prepare_1c, abuse_1c, (60, 20)),
    "2a": ("queueingTimeout 2^63-1", None, "", prepare_busy, abuse_2a, (25, 12)),
    "2b": ("computationTimeout 2^63-1", None, "", None, abuse_2b, (25, 15)),
    "3a": ("2 × 150 MB header", None, "", None, abuse_3a, (60, 20)),
    "3b": ("1 100 unfinished headers", None, "", None, abuse_3b, (40, 20)),
    "4a": ("8 × 10 MB SOAP header of empty elements", None, "", None, abuse_4a, (60, 20)),
    "4b": ("8 × 10 MB JSON of []", None, "", None, abuse_4b, (60, 20)),
    "5": (
        "child jobs past max_queued",
        {("jobs", "max_queued"): 500, ("auth", "required"): True},
        users_toml({"max_queued": 20}),
        prepare_5,
        abuse_5,
        (40, 15),
    ),
    "6": ("stored bytes per user", {("auth", "required"): True}, None, None, abuse_6, (90, 25)),
    "7": ("CLI and a redirect", None, "", None, abuse_7, (60, 60)),
    "8": ("a web page on a node with accounts off", None, "", None, abuse_8, (30, 15)),
    "9": ("smaller edges", {("auth", "required"): True}, ACCOUNTS, None, abuse_9, (30, 30)),
    "t1": (
        "a slow receiver: 16 callbacks trickled a byte per 5 s",
        CALLBACKS,
        SIGNED,
        None,
        abuse_t1,
        (100, 60),
    ),
    "t2": (
        "a progress flood: 4 jobs' progress each 1 s to a silent receiver (6 workers)",
        {**CALLBACKS, ("workers", "count"): 6},
        SIGNED,
        None,
        abuse_t2,
        (100, 60),
    ),
    "t3": ("poison callback URLs", CALLBACKS, SIGNED, None, abuse_t3, (60, 30)),
    "t4": (
        "40 × 32 MB results under max_stored_bytes 50 MiB",
        TENANTS,
        users_toml({"max_stored_bytes": STORED_QUOTA}),
        None,
        abuse_t4,
        (150, 60),
    ),
    "t5": (
        "a full disk: the store on a 64 MiB tmpfs",
        TENANTS,
        ACCOUNTS,
        prepare_t5,
        abuse_t5,
        (90, 60),
    ),
    "t6": (
        "held watches: 1 000 watchJobs × 1 000 ids",
        TENANTS,
        ACCOUNTS,
        prepare_t6,
        abuse_t6,
        (60, 40),
    ),
    "t7": (
        "fair by default: 458 jobs of 2 s, then bob's",
        TENANTS,
        ACCOUNTS,
        None,
        abuse_t7,
        (120, 40),
    ),
}


def run_item(item, tree, folder, args, nodes):
    title, keys, extra, prepare, abuse, caps = ITEMS[item]
    cap = caps[1] if args.quick else caps[0]
    row = {"item": item, "tree": tree.label}
    if item == "7":  # client side: no node
        ctx = Context(None, args.quick, threading.Event(), cap)
        ctx.tree = tree
        outcome, refused = abuse(ctx)
        row.update(outcome=outcome, refused=refused, rss_before=None)
        return row
    keys = dict(keys or {})
    quota = None
    if item == "6":
        quota = quota_key(tree)
        alice = {}
        if quota and quota[0] in (None, "") or (quota and quota[0].startswith("users")):
            alice[quota[1]] = QUOTA
        elif quota:
            keys[(quota[0], quota[1])] = QUOTA
        extra = users_toml(alice)
    if item == "t5":
        if os.geteuid() != 0 or args.database_url:
            reason = "needs root" if os.geteuid() != 0 else "SQLite only"
            row.update(outcome=f"skipped: {reason}", refused=None, rss_before=None)
            return row
        if re.search(r"^[#\s]*min_free_bytes\s*=", tree.config_text, re.MULTILINE):
            keys[("database", "min_free_bytes")] = MIN_FREE
    auth = ("bob", TOKENS["bob"]) if ("auth", "required") in keys else None
    name = f"{item}-{tree.label.split()[0]}"
    with (
        scratch_database(args.database_url, folder) as url,
        (
            small_tmpfs(os.path.join(folder, name + "-disk"), TMPFS_BYTES)
            if item == "t5"
            else contextlib.nullcontext(None)
        ) as mount,
    ):
        url = url if args.database_url else None  # SQLite: the node's own file
        if mount:
            url = f"sqlite:///{mount}/xruntime.db"
        node = Node(tree, os.path.join(folder, name), url, keys, extra, auth)
        nodes.append(node)
        try:
            node.start()
            stop_abuse = threading.Event()
            ctx = Context(node, args.quick, stop_abuse, cap)
            ctx.tree, ctx.quota_key, ctx.mount = tree, quota, mount
            if prepare:
                prepare(ctx)
            ctx.deadline = time.monotonic() + cap
            log_at = len(node.log())
            sampler = Sampler(node, stop_abuse)
            other = ctx.other = Other(node, follow=getattr(ctx, "follow_others", False))
            sampler.start()
            other.start()
            time.sleep(0.5)  # the other's quiet latencies too
            try:
                outcome, refused = abuse(ctx)
            except Exception as exc:  # noqa: BLE001 (a row, not a crash)
                outcome, refused = f"abusive client failed: {exc!r}"[:300], None
            time.sleep(0.3)
            other.finish()
            sampler.finish()
            alive = node.proc.poll() is None and not node.killed
            row.update(
                outcome=outcome
                + ("" if alive else "; NODE DIED" + (" (killed past 5 GB)" if node.killed else "")),
                refused=refused,
                rss_before=sampler.before,
                rss_peak=sampler.peak,
                capped=sampler.capped,
                cpu=sampler.cpu_used,
                latencies=other.latencies,
                errors=other.errors,
                tracebacks=node.log()[log_at:].count("Traceback"),
                missed=ctx.missed,
            )
        finally:
            node.stop()
    return row


def dur(seconds):
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def ms(seconds):
    return f"{seconds * 1000:.0f}" if seconds < 10 else f"{seconds:.1f} s"


def cells(row):
    if row.get("rss_before") is None:
        return [
            "-",
            "-",
            "-",
            row["outcome"],
            ms(row["refused"]) if row["refused"] is not None else "-",
            "-",
        ]
    peak = f"{row['rss_peak'] / MB:.0f}" + (" (≥ 3 GB, stopped)" if row["capped"] else "")
    lat = row["latencies"]
    p50, p99 = (percentile(lat, 50), percentile(lat, 99)) if lat else (None, None)
    errors = sum(row["errors"].values())
    others = (
        (
            f"{ms(p50)} / {ms(p99)} ({len(lat)} calls"
            + (
                f", {errors} errors: " + ", ".join(f"{n} {k}" for k, n in row["errors"].items())
                if errors
                else ""
            )
            + ")"
        )
        if lat
        else "no call finished"
    )
    held = []
    if p99 is None or p99 * 1000 >= TARGET_P99_MS or errors:
        held.append("p99" if p99 is None or p99 * 1000 >= TARGET_P99_MS else "errors")
    if row["rss_peak"] >= TARGET_RSS:
        held.append("RSS")
    held += row.get("missed") or []
    targets = "held" if not held else "MISSED: " + ", ".join(held)
    notes = f"; node CPU {row['cpu']:.1f} s" + (
        f"; {row['tracebacks']} tracebacks logged" if row["tracebacks"] else ""
    )
    return [
        f"{row['rss_before'] / MB:.0f} → {peak}",
        others,
        targets,
        row["outcome"] + notes,
        ms(row["refused"])
        if isinstance(row["refused"], (int, float))
        else (row["refused"] or "not refused"),
    ]


def print_table(rows):
    print(
        "\n| item | tree | node RSS MB before → peak | others p50 / p99 ms | targets "
        "| abuse's outcome | refused after |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        c = cells(row)
        if len(c) == 6:  # item 7: no node
            c = ["-", "-", "-", row["outcome"], c[4]]
        print(
            f"| {row['item']} {ITEMS[row['item']][0]} | {row['tree']} | " + " | ".join(c) + " |",
            flush=True,
        )


@contextlib.contextmanager
def baseline_tree(revision):
    """The revision checked out into a temporary worktree; removed afterwards."""
    folder = tempfile.mkdtemp(prefix="xruntime-baseline-")
    path = os.path.join(folder, "tree")
    subprocess.run(
        ["git", "-C", ROOT, "worktree", "add", "--detach", "--quiet", path, revision], check=True
    )
    try:
        short = subprocess.run(
            ["git", "-C", path, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        shim = os.path.join(folder, "shim")
        os.makedirs(shim)
        os.symlink(os.path.join(path, "services"), os.path.join(shim, "xruntime_services"))
        yield Tree(path, f"baseline {short}", shim)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], check=False)
        subprocess.run(["git", "-C", ROOT, "worktree", "prune"], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--items",
        default=",".join(ITEMS),
        help="comma-separated: 1 (= 1a,1b,1c), 3b, t (= t1..t7), t4, ... (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, shorter caps")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL server (a scratch database per node); "
        "default: SQLite in a temporary folder",
    )
    parser.add_argument(
        "--baseline", default="a2d2c9d", help="revision to compare with (default: a2d2c9d)"
    )
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    wanted = [i.strip() for i in args.items.split(",") if i.strip()]
    items = [
        item
        for item in ITEMS
        if any(item == w or (item[:-1] == w and (item[-1].isalpha() or w == "t")) for w in wanted)
    ]
    unknown = [w for w in wanted if not any(item == w or item[:-1] == w for item in ITEMS)]
    if unknown:
        parser.error(f"unknown items {unknown}; known: {', '.join(ITEMS)}")
    began = time.monotonic()
    current = Tree(
        ROOT,
        "current "
        + subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    )
    rows, nodes = [], []
    database = "SQLite" if args.database_url is None else "PostgreSQL"
    print(
        f"{database}, node of the shipped config, {NOFILE} open files; items {', '.join(items)}"
        + (" (quick)" if args.quick else ""),
        flush=True,
    )
    try:
        with (
            tempfile.TemporaryDirectory(prefix="xruntime-abuse-") as folder,
            (
                contextlib.nullcontext(None) if args.no_baseline else baseline_tree(args.baseline)
            ) as base,
        ):
            for item in items:
                for tree in [current] + ([base] if base else []):
                    t0 = time.monotonic()
                    row = run_item(item, tree, folder, args, nodes)
                    rows.append(row)
                    print(
                        f"{item} on {tree.label}: {time.monotonic() - t0:.0f} s: {row['outcome']}",
                        flush=True,
                    )
    finally:
        for node in nodes:  # whatever happened
            if node.proc is not None and node.proc.poll() is None:
                node.kill()
    print_table(rows)
    print(
        f"\ntargets: others' p99 < {TARGET_P99_MS} ms and no error, node RSS < 1 GB; "
        f"run took {time.monotonic() - began:.0f} s"
    )


if __name__ == "__main__":
    main()

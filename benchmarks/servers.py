"""Compares candidate HTTP servers for xruntime on one minimal long-poll application.

The application (the same logic for every server, nothing else in it):

- ``POST /hold``    reads its small JSON body, then waits (up to 50 s, like ``watchJob``)
                    on a shared event and answers ``{"status":"SUCCEEDED"}``
                    (``{"status":"RUNNING"}`` if the 50 s run out);
- ``POST /release`` sets that event, puts a fresh one in its place for the next round,
                    and answers at once;
- ``POST /echo``    reads the small JSON body, ``json.loads`` it and answers
                    ``json.dumps`` of it: a no-op request;
- ``POST /count``   answers how many ``/hold`` requests are waiting (used by the driver
                    to know when all the long polls are held).

Candidates, each as ONE server process (the figures are per-process costs; a
supervisor process, as granian's, is counted with its worker):

- ``uvicorn``   ASGI app, ``http=httptools``, ``loop=uvloop``, waits on an asyncio.Event
- ``granian``   ASGI interface, ``--loop uvloop``, 1 worker, asyncio.Event
- ``hypercorn`` ASGI app served by ``hypercorn.asyncio.serve`` under uvloop, asyncio.Event
- ``gevent``    WSGI app under ``gevent.pywsgi.WSGIServer`` (after ``monkey.patch_all()``,
                listener with TCP_NODELAY as gunicorn sets it), waits on a gevent.event.Event
- ``waitress``  WSGI app (the current server, configured as xruntime does:
                ``asyncore_use_poll``, ``connection_limit = 2 * threads``), waits on a
                threading.Event: the baseline

Measured, each time on a freshly started server:

1. no-op throughput: ``/echo`` requests per second from 8 client processes, each with one
   keep-alive connection (minimal raw HTTP/1.1 on blocking sockets), for 5 s; and the
   server's CPU time (utime + stime from /proc/PID/stat, summed over its process tree)
   per request. The clients share the 2 cores with the server, so requests per second
   is bounded by the machine; 1 s / (CPU per request) is what one server core could do.
2. held long polls, N = 2000 and 10000: 2 client processes (asyncio, RLIMIT_NOFILE
   raised) open N connections and each POSTs ``/hold``. While they are held: p50/p99 of
   100 sequential ``/echo`` calls on one keep-alive connection; the server's VmRSS minus
   its idle VmRSS, per held request (for waitress, which starts all its threads at
   once, minus the idle VmRSS of a waitress with 8 threads, so that the thread each held
   request needs is counted). Then ``/release``, and the p50/p99/max time from
   sending the release (on an open connection) to each held answer (the clients' part,
   parsing up to 5000 answers per process, is included; the release's own answer is
   not the reference because some servers send it after the held answers).
   waitress holds one thread per long poll: it is run with threads = N + 8 for N = 2000
   (8 spare threads for /echo, /count and /release), and, as it is configured today,
   with threads = 200 for N = 2000 to show what happens then (all bounded by timeouts);
   N = 10000 is not run for waitress (10000 threads).

Everything listens on 127.0.0.1 only, every wait is bounded, and the script stops its
servers (their process group) when done or interrupted.

Run (the packages are not xruntime dependencies; a candidate whose packages are not
installed is skipped, saying so)::

    python3.11 -m venv .venv-servers
    .venv-servers/bin/pip install uvicorn httptools uvloop granian hypercorn gevent waitress
    .venv-servers/bin/python benchmarks/servers.py [candidate ...] [--seconds 5] [--held 2000,10000]

It takes a few minutes and prints a table.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.processes import descendants  # noqa: E402

HOLD_TIMEOUT = 50.0
SUCCEEDED = b'{"status":"SUCCEEDED"}'
RUNNING = b'{"status":"RUNNING"}'
ECHO_BODY = b'{"jobId":"790da86f-5726-4ef1-b782-d1f3c8a5d1ce","maximumPollingPeriod":50}'


# ---------------------------------------------------------------- the applications


class _State:
    event = None  # the current event (asyncio / gevent / threading)
    make_event = None  # its constructor (WSGI flavours)
    waiting = set()  # tokens of the /hold requests waiting (set.add/discard: atomic)


def _answer(path, body):
    """The answer for the paths that do not wait."""
    if path == "/echo":
        return 200, json.dumps(json.loads(body)).encode()
    if path == "/count":
        return 200, json.dumps({"waiting": len(_State.waiting)}).encode()
    return 404, b'{"fault":"no such path"}'


async def asgi_app(scope, receive, send):
    import asyncio

    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if _State.event is None:
        _State.event = asyncio.Event()
    if path == "/hold":
        json.loads(body)
        event, token = _State.event, object()
        _State.waiting.add(token)
        try:
            async with asyncio.timeout(HOLD_TIMEOUT):
                await event.wait()
            status, out = 200, SUCCEEDED
        except TimeoutError:
            status, out = 200, RUNNING
        finally:
            _State.waiting.discard(token)
    elif path == "/release":
        event, _State.event = _State.event, asyncio.Event()
        event.set()
        status, out = 200, b'{"released":true}'
    else:
        status, out = _answer(path, body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(out)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": out})


def wsgi_app(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    path = environ["PATH_INFO"]
    if path == "/hold":
        json.loads(body)
        event, token = _State.event, object()
        _State.waiting.add(token)
        try:
            out = SUCCEEDED if event.wait(HOLD_TIMEOUT) else RUNNING
        finally:
            _State.waiting.discard(token)
        status = 200
    elif path == "/release":
        event, _State.event = _State.event, _State.make_event()
        event.set()
        status, out = 200, b'{"released":true}'
    else:
        status, out = _answer(path, body)
    start_response(
        "200 OK" if status == 200 else "404 Not Found",
        [("Content-Type", "application/json"), ("Content-Length", str(len(out)))],
    )
    return [out]


# ---------------------------------------------------------------- the servers


def _raise_nofile():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(kind, port, threads):
    """Runs in the server process: serves the app on 127.0.0.1:port until killed."""
    _raise_nofile()
    if kind == "gevent":
        from gevent import monkey

        monkey.patch_all()
        import gevent.event
        from gevent.pywsgi import WSGIServer

        _State.make_event = gevent.event.Event
        _State.event = _State.make_event()
        import socket

        # pywsgi sends the headers and the body in two writes: without TCP_NODELAY (which
        # gunicorn sets on its listeners, and uvloop and waitress on their sockets) each
        # keep-alive answer waits ~40 ms for the client's delayed ACK
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )  # accepted sockets inherit it
        listener.bind(("127.0.0.1", port))
        listener.listen(4096)
        WSGIServer(listener, wsgi_app, log=None).serve_forever()
    elif kind == "waitress":
        import logging
        import threading

        import waitress

        logging.getLogger("waitress.queue").setLevel(logging.ERROR)
        _State.make_event = threading.Event
        _State.event = _State.make_event()
        waitress.serve(
            wsgi_app,
            host="127.0.0.1",
            port=port,
            threads=threads,
            asyncore_use_poll=True,
            connection_limit=max(100, 2 * threads),
            backlog=4096,
            channel_timeout=300,
            _quiet=True,
        )
    elif kind == "uvicorn":
        import uvicorn

        uvicorn.run(
            asgi_app,
            host="127.0.0.1",
            port=port,
            http="httptools",
            loop="uvloop",
            lifespan="on",
            log_level="warning",
            access_log=False,
            backlog=4096,
            timeout_keep_alive=75,
        )
    elif kind == "hypercorn":
        import uvloop
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.backlog = 4096
        config.keep_alive_timeout = 75
        config.keep_alive_max_requests = 10**9  # default 1000: closes busy connections
        config.accesslog = None
        config.loglevel = "WARNING"
        uvloop.run(hypercorn_serve(asgi_app, config))
    else:
        raise SystemExit(f"unknown server {kind}")


CANDIDATES = {  # name: (modules it needs, server kind, threads)
    "uvicorn": (["uvicorn", "httptools", "uvloop"], "uvicorn", None),
    "granian": (["granian", "uvloop"], "granian", None),
    "hypercorn": (["hypercorn", "uvloop"], "hypercorn", None),
    "gevent": (["gevent"], "gevent", None),
    "waitress": (["waitress"], "waitress", None),  # threads: 200, or N + 8 when holding
}


class Server:
    """One server process (own process group) on a free port of 127.0.0.1."""

    def __init__(self, kind, threads=200):
        import subprocess
        import tempfile

        self.kind, self.port = kind, _free_port()
        here = os.path.dirname(os.path.abspath(__file__))
        if kind == "granian":
            cmd = [
                sys.executable,
                "-m",
                "granian",
                "--interface",
                "asgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--loop",
                "uvloop",
                "--backlog",
                "4096",
                "--backpressure",
                "20000",
                "--no-ws",
                "--log-level",
                "warning",
                "--working-dir",
                here,
                "servers:asgi_app",
            ]
        else:
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--serve",
                kind,
                str(self.port),
                str(threads),
            ]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            cmd,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            cwd=here,
            start_new_session=True,
            preexec_fn=_raise_nofile,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{kind} exited ({self.proc.returncode}): {self.tail()}")
            try:
                Client(self.port, timeout=2).post("/echo", ECHO_BODY)
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"{kind} did not answer within 30 s: {self.tail()}"
                    ) from None
                time.sleep(0.1)

    def tail(self):
        self.log.seek(0)
        return self.log.read()[-2000:].decode(errors="replace")

    def pids(self):
        """The server process and its descendants."""
        return [self.proc.pid] + descendants(self.proc.pid)

    def cpu_seconds(self):
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError):
                pass
        return total / ticks

    def rss_kb(self):
        total = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
            except OSError:
                pass
        return total

    def stop(self):
        import signal
        import subprocess

        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                pass
        try:  # anything left in its group (e.g. granian's worker)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the clients


class Client:
    """A minimal HTTP/1.1 keep-alive client on a blocking socket."""

    def __init__(self, port, timeout=10.0):
        self.port, self.timeout, self.sock = port, timeout, None

    def _connect(self):
        import socket

        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def post(self, path, body):
        if self.sock is None:
            self._connect()
        self.sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nContent-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
        )
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = dict(line.lower().split(b":", 1) for line in lines[1:])
        length = int(headers[b"content-length"])
        while len(self.buf) < length:
            self._more()
        answer, self.buf = self.buf[:length], self.buf[length:]
        if headers.get(b"connection", b"").strip() == b"close":
            self.close()
        return status, answer

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            self.close()
            raise ConnectionError("closed by the server")
        self.buf += data

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _echo_loop(port, start_at, seconds, results):
    client = Client(port)
    client.post("/echo", ECHO_BODY)
    while time.time() < start_at:
        time.sleep(0.001)
    done, end = 0, start_at + seconds
    try:
        while time.time() < end:
            client.post("/echo", ECHO_BODY)
            done += 1
        results.put((done, None))
    except Exception as exc:  # reported, not raised: the parent bounds its wait
        results.put((done, repr(exc)))


def _hold_clients(port, n, ready, results, answer_wait):
    """A client process: n connections, each POSTs /hold and waits for its answer."""
    _raise_nofile()
    import asyncio

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    request = (
        b"POST /hold HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(ECHO_BODY), ECHO_BODY)
    )

    async def main():
        connecting = asyncio.Semaphore(100)
        sent, errors, times, statuses = [0], {}, [], {}

        async def one():
            try:
                async with connecting:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection("127.0.0.1", port), 30
                    )
                    writer.write(request)
                    await writer.drain()
                sent[0] += 1
            except Exception as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                return None
            return reader, writer

        async def answer(reader, writer):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                times.append(time.monotonic())
                key = body.decode(errors="replace")
                statuses[key] = statuses.get(key, 0) + 1
            except Exception as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            finally:
                writer.close()

        conns = [c for c in await asyncio.gather(*(one() for _ in range(n))) if c]
        ready.put((sent[0], dict(errors)))
        tasks = [asyncio.ensure_future(answer(r, w)) for r, w in conns]
        done, pending = await asyncio.wait(tasks, timeout=answer_wait)
        for t in pending:
            t.cancel()
        if pending:
            errors["no answer in time"] = len(pending)
        results.put((times, statuses, errors))

    runner(main())


def _percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def throughput(kind, clients, seconds, threads=200):
    import multiprocessing

    server = Server(kind, threads)
    try:
        for _ in range(200):
            Client(server.port).post("/echo", ECHO_BODY)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        start_at = time.time() + 2.0
        procs = [
            ctx.Process(target=_echo_loop, args=(server.port, start_at, seconds, results))
            for _ in range(clients)
        ]
        for p in procs:
            p.start()
        while time.time() < start_at:
            time.sleep(0.001)
        cpu0 = server.cpu_seconds()
        got = [results.get(timeout=seconds + 30) for _ in procs]
        cpu1 = server.cpu_seconds()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
        done = sum(g[0] for g in got)
        errors = [g[1] for g in got if g[1]]
        return {
            "rps": done / seconds,
            "cpu_us": (cpu1 - cpu0) / max(done, 1) * 1e6,
            "errors": errors,
        }
    finally:
        server.stop()


def held(kind, n, threads=None, answer_wait=HOLD_TIMEOUT + 10):
    """Holds n long polls on a fresh server; the figures of stage 2."""
    import multiprocessing

    server = Server(kind, threads or 200)
    procs = []
    out = {"n": n}
    try:
        for _ in range(200):
            Client(server.port).post("/echo", ECHO_BODY)
        time.sleep(0.5)
        idle = server.rss_kb()
        if kind == "waitress":  # it starts its threads at once: count them as held
            small = Server(kind, 8)
            try:
                for _ in range(200):
                    Client(small.port).post("/echo", ECHO_BODY)
                time.sleep(0.5)
                idle = small.rss_kb()
            finally:
                small.stop()
        ctx = multiprocessing.get_context("spawn")
        ready, results = ctx.Queue(), ctx.Queue()
        shares = [n // 2, n - n // 2]
        procs = [
            ctx.Process(target=_hold_clients, args=(server.port, k, ready, results, answer_wait))
            for k in shares
        ]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        sent, errors = 0, {}
        for _ in procs:
            s, e = ready.get(timeout=120)
            sent += s
            for k, v in e.items():
                errors[k] = errors.get(k, 0) + v
        # how many does the server hold? (/count needs a free thread under waitress)
        waiting, last, still = None, -1, time.monotonic()
        counter = Client(server.port, timeout=3)
        while time.monotonic() - t0 < 40:
            try:
                waiting = json.loads(counter.post("/count", b"{}")[1])["waiting"]
            except OSError:
                waiting = None
                break
            if waiting >= sent:
                break
            if waiting != last:
                last, still = waiting, time.monotonic()
            elif time.monotonic() - still > 3:
                break
            time.sleep(0.2)
        out["ramp_s"] = time.monotonic() - t0
        out["sent"], out["held"], out["connect_errors"] = sent, waiting, errors
        # no-op latency while they are held
        lat, echo = [], Client(server.port, timeout=5)
        for _ in range(100):
            start = time.perf_counter()
            try:
                echo.post("/echo", ECHO_BODY)
            except OSError:
                out["echo_blocked"] = True
                break
            lat.append(time.perf_counter() - start)
        out["echo_p50_ms"] = _percentile(lat, 50) * 1e3
        out["echo_p99_ms"] = _percentile(lat, 99) * 1e3
        out["echo_n"] = len(lat)
        rss = server.rss_kb()
        out["rss_idle_mb"], out["rss_held_mb"] = idle / 1024, rss / 1024
        out["kb_per_held"] = (rss - idle) / waiting if waiting else float("nan")
        # release and time the answers
        try:
            releaser = Client(server.port, timeout=10)
            releaser._connect()
            released = time.monotonic()  # some servers answer the held ones first
            releaser.post("/release", b"{}")
        except OSError:
            released = None
            out["release_blocked"] = True
        times, statuses, errors = [], {}, {}
        for _ in procs:
            t, s, e = results.get(timeout=answer_wait + 60)
            times += t
            for k, v in s.items():
                statuses[k] = statuses.get(k, 0) + v
            for k, v in e.items():
                errors[k] = errors.get(k, 0) + v
        if released is not None:
            delays = [t - released for t in times]
            out["rel_p50_ms"] = _percentile(delays, 50) * 1e3
            out["rel_p99_ms"] = _percentile(delays, 99) * 1e3
            out["rel_max_ms"] = max(delays) * 1e3 if delays else float("nan")
        out["answered"] = statuses.get(SUCCEEDED.decode(), 0)
        out["statuses"], out["answer_errors"] = statuses, errors
        return out
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
        server.stop()


# ---------------------------------------------------------------- the driver


def _fmt(value, spec):
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, spec)


def main(argv):
    import argparse
    import importlib.util

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("candidates", nargs="*", default=list(CANDIDATES))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--held", default="2000,10000")
    parser.add_argument(
        "--waitress-max-threads",
        type=int,
        default=2000,
        help="waitress holds with threads = N + 8 only up to this N",
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.held.split(",") if x]
    _raise_nofile()
    rows, notes = [], []
    for name in args.candidates:
        modules, kind, _ = CANDIDATES[name]
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            print(f"skipping {name}: not installed: {', '.join(missing)}", flush=True)
            continue
        print(f"{name}: throughput ...", flush=True)
        try:
            tp = throughput(kind, args.clients, args.seconds)
        except Exception as exc:
            print(f"  {name} throughput failed: {exc!r}", flush=True)
            tp = {}
        if tp.get("errors"):
            notes.append(f"{name} throughput client errors: {tp['errors']}")
        runs = []
        for n in sizes:
            if kind == "waitress":
                if n <= args.waitress_max_threads:
                    runs.append((f"{name} (threads={n + 8})", n, n + 8))
                    runs.append((f"{name} (threads=200)", n, 200))
                else:
                    notes.append(f"{name}: N={n} not run (would need {n + 8} threads)")
            else:
                runs.append((name, n, None))
        for label, n, threads in runs:
            print(f"{label}: holding {n} ...", flush=True)
            try:
                h = held(kind, n, threads)
            except Exception as exc:
                print(f"  {label} N={n} failed: {exc!r}", flush=True)
                h = {"n": n, "failed": repr(exc)}
            print(f"  {h}", flush=True)
            rows.append((label, tp, h))
            tp = {"shown": True, **tp}
            if h.get("echo_blocked"):
                notes.append(f"{label} N={n}: /echo got no answer within 5 s while held")
            if h.get("release_blocked"):
                notes.append(f"{label} N={n}: /release got no answer within 10 s")
            if h.get("connect_errors") or h.get("answer_errors") or h.get("answered") != h["n"]:
                notes.append(
                    f"{label} N={n}: connect errors {h.get('connect_errors')}, "
                    f"answer errors {h.get('answer_errors')}, statuses {h.get('statuses')}"
                )
    header = (
        "server",
        "req/s",
        "cpu us/req",
        "req/s/core",
        "N",
        "held",
        "echo p50 ms",
        "echo p99 ms",
        "idle MB",
        "KB/held",
        "rel p50 ms",
        "rel p99 ms",
        "rel max ms",
        "answered",
    )
    table = [header]
    for label, tp, h in rows:
        first = "shown" not in tp
        table.append(
            (
                label,
                _fmt(tp.get("rps"), ".0f") if first else "",
                _fmt(tp.get("cpu_us"), ".0f") if first else "",
                _fmt(1e6 / tp["cpu_us"], ".0f") if first and tp.get("cpu_us") else "",
                str(h["n"]),
                _fmt(h.get("held"), "d"),
                _fmt(h.get("echo_p50_ms"), ".2f")
                + ("" if not h.get("echo_blocked") else " (blocked)"),
                _fmt(h.get("echo_p99_ms"), ".2f"),
                _fmt(h.get("rss_idle_mb"), ".1f"),
                _fmt(h.get("kb_per_held"), ".1f"),
                _fmt(h.get("rel_p50_ms"), ".0f"),
                _fmt(h.get("rel_p99_ms"), ".0f"),
                _fmt(h.get("rel_max_ms"), ".0f"),
                _fmt(h.get("answered"), "d"),
            )
        )
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    print()
    print(
        f"one server process each; {os.cpu_count()} cores shared with the clients; "
        f"throughput: {args.clients} keep-alive clients for {args.seconds:g} s"
    )
    for r in table:
        print(
            "  ".join(
                str(c).rjust(w) if i else str(c).ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    for note in notes:
        print("note:", note)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main(sys.argv[1:])

"""The floor: a durable no-op job cycle done with the least work it needs, on xruntime's parts.

What an xruntime cycle (startSimulate → watchJob until SUCCEEDED → fetchSimulateResponse)
cannot do without, and nothing more, so that its cost is the bar xruntime is measured
against (issue 36; ``benchmarks/cycle.py`` drives both in one run):

- uvicorn with httptools and uvloop in 2 HTTP processes sharing one listening socket (the
  parent opens it, each process runs ``uvicorn.Server`` on it), a bare ASGI app;
- every job a row of one SQLite file in WAL mode with ``synchronous=NORMAL``, every
  statement its own transaction: exactly 4 commits a cycle — insert (HTTP process, at
  start), claim (worker, one ``UPDATE … RETURNING`` guarded on the status), finish
  (worker), mark fetched (HTTP process, at fetch);
- 2 worker processes blocked on one Unix datagram socket: the HTTP process that inserted
  a job sends it one datagram after the commit, which wakes one worker; a datagram is
  sent only after its job's insert commits, so a claim never finds the queue empty;
- each HTTP process binds its own datagram socket; after its finish commit a worker sends
  "ID STATUS ELAPSED" to each of them; a held watchJob is an asyncio future that a reader
  of that socket (``loop.add_reader``) resolves.  A watch reads the row first and is held
  only if the job is not done; the reader runs in the same event loop, so a notice sent
  after a commit the read did not see always finds the future.  No polling anywhere.

The URLs and JSON shapes are those of xruntime's JSON binding, so one client drives both:

    POST /services/rs/XDemo/startSimulate {"durationMs": 0}  → {"id", "status": "QUEUING", …}
    POST /services/rs/XRuntime/watchJob {"id", "progressUpdatePeriod"?, "maximumPollingPeriod"?}
         → {"id", "status", "elapsedTime"}, at once if the job is done, else when it is
           (or after maximumPollingPeriod ms, default 60 000)
    POST /services/rs/XDemo/fetchSimulateResponse {"id"} → {"stepsDone": 1, "payload": ""}

Job ids are UUID4 strings; the job itself is a no-op.  There is no framework, no thread
pool, no log line, no lease, no history: what it lacks is what the cycle does not need.
The SQL runs in the event loop (a commit in WAL mode without fsync is tens of µs).

    python benchmarks/floor.py [--host 127.0.0.1] [--port 50100] [--folder DIR]

prints one line ("floor: serving on …") once both HTTP processes serve, and stops on
SIGTERM or SIGINT, or when one of its processes ends.  The database lives in ``--folder``
(default: a temporary folder, removed at the end).
"""

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid

import uvicorn
import uvloop

HTTP_PROCESSES = 2
WORKERS = 2
SCHEMA = """
CREATE TABLE IF NOT EXISTS job (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, request TEXT NOT NULL, result TEXT,
    queued REAL NOT NULL, finished REAL, fetched REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS queued_jobs ON job (queued) WHERE status = 'QUEUING';
"""
CLAIM = """
UPDATE job SET status = 'RUNNING'
WHERE id = (SELECT id FROM job WHERE status = 'QUEUING' ORDER BY queued LIMIT 1)
  AND status = 'QUEUING'
RETURNING id, request, queued
"""
FINISH = "UPDATE job SET status = ?, result = ?, finished = ? WHERE id = ? AND status = 'RUNNING'"


def connect(folder):
    """A connection in autocommit mode: each statement is a transaction and its commit."""
    db = sqlite3.connect(os.path.join(folder, "floor.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA busy_timeout = 5000")
    return db


def wake_path(folder):
    return os.path.join(folder, "workers.sock")


def notice_path(folder, index):
    return os.path.join(folder, f"http{index}.sock")


# ------------------------------------------------------------------ the HTTP processes


class Fault(Exception):
    pass


class JsonApp:
    """A bare ASGI application answering POSTed JSON at its ``routes`` (path → async
    handler of the request's data); a fault is a 400 in the JSON binding's form.  The
    floors' applications (this one's ``App``, ``longpoll_floor.App``) are these."""

    routes: dict

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        handler = self.routes.get(scope["path"])
        try:
            if scope["method"] != "POST" or handler is None:
                raise Fault(f"no operation at {scope['method']} {scope['path']}")
            status, answer = 200, await handler(json.loads(body or b"{}"))
        except (Fault, ValueError, KeyError, TypeError, AttributeError) as e:
            status, answer = 400, {"faultInfo": {"$type": "InvalidRequestFault", "message": str(e)}}
        data = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


class App(JsonApp):
    """The bare ASGI application of one HTTP process."""

    def __init__(self, folder, notices):
        self.db = connect(folder)
        self.wake_address = wake_path(folder)
        self.wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notices = notices
        self.held = {}  # job id → the futures of the watches held on it
        self.routes = {
            "/services/rs/XDemo/startSimulate": self.start,
            "/services/rs/XRuntime/watchJob": self.watch,
            "/services/rs/XDemo/fetchSimulateResponse": self.fetch,
        }

    def listen_for_notices(self):
        self.notices.setblocking(False)
        asyncio.get_running_loop().add_reader(self.notices.fileno(), self.on_notices)

    def on_notices(self):
        while True:
            try:
                job_id, status, elapsed = self.notices.recv(128).decode().split()
            except BlockingIOError:
                return
            job = {"id": job_id, "status": status, "elapsedTime": int(elapsed)}
            for future in self.held.pop(job_id, ()):
                if not future.done():
                    future.set_result(job)

    async def start(self, request):
        if not isinstance(request.get("durationMs", 0), int):
            raise Fault("durationMs: an integer")
        job_id = str(uuid.uuid4())
        self.db.execute(
            "INSERT INTO job (id, status, request, queued) VALUES (?, 'QUEUING', ?, ?)",
            (job_id, json.dumps(request), time.time()),
        )
        self.wake.sendto(job_id.encode(), self.wake_address)
        return {"id": job_id, "status": "QUEUING", "elapsedTime": 0}

    def read(self, job_id):
        rows = self.db.execute(
            "SELECT status, queued, finished FROM job WHERE id = ?", (job_id,)
        ).fetchall()
        if not rows:
            return {"id": job_id, "status": "UNKNOWN"}
        status, queued, finished = rows[0]
        return {
            "id": job_id,
            "status": status,
            "elapsedTime": _ms((finished or time.time()) - queued),
        }

    async def watch(self, request):
        job_id = str(request["id"])
        job = self.read(job_id)
        if job["status"] not in ("QUEUING", "RUNNING"):
            return job
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.held.setdefault(job_id, []).append(future)
        timer = loop.call_later(request.get("maximumPollingPeriod", 60000) / 1000, _expire, future)
        try:
            job = await future
        finally:
            timer.cancel()
        if job is None:  # maximumPollingPeriod passed first
            futures = self.held.get(job_id, [])
            if future in futures:
                futures.remove(future)
                if not futures:
                    del self.held[job_id]
            job = self.read(job_id)
        return job

    async def fetch(self, request):
        job_id = str(request["id"])
        rows = self.db.execute(
            "UPDATE job SET fetched = ? WHERE id = ? AND status = 'SUCCEEDED' RETURNING result",
            (time.time(), job_id),
        ).fetchall()
        if not rows:
            raise Fault(f"job {job_id} has no result: {self.read(job_id)['status']}")
        return json.loads(rows[0][0])


def _expire(future):
    if not future.done():
        future.set_result(None)


def _ms(seconds):
    return max(0, round(seconds * 1000))


class Server(uvicorn.Server):
    """uvicorn's server, saying "up" on a pipe once it accepts connections."""

    def __init__(self, config, up):
        super().__init__(config)
        self.up = up

    async def startup(self, sockets=None):
        await super().startup(sockets=sockets)
        if self.started:
            self.up.send("up")


def http_main(listener, index, folder, up, app_class=None):
    """One HTTP process: ``app_class(folder, notices)`` (default ``App``), its notices
    read on this process's datagram socket, served by uvicorn as the node's are."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it (SIGTERM)
    notices = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notices.bind(notice_path(folder, index))
    app = (app_class or App)(folder, notices)
    config = uvicorn.Config(
        app,
        http="httptools",
        loop="uvloop",
        lifespan="off",
        log_config=None,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=1,
        server_header=False,
        proxy_headers=False,
    )
    server = Server(config, up)

    async def serve():
        app.listen_for_notices()
        await server.serve(sockets=[listener])

    uvloop.run(serve())


# ------------------------------------------------------------------ the workers


def worker_main(wake, folder):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it (SIGTERM)
    db = connect(folder)
    out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    out.settimeout(1)
    addresses = [notice_path(folder, index) for index in range(HTTP_PROCESSES)]
    while True:
        wake.recv(64)  # blocks until an HTTP process has queued a job
        rows = db.execute(CLAIM).fetchall()
        if not rows:
            continue
        job_id, request, queued = rows[0]
        json.loads(request)  # the job: a no-op on its request
        status, result = "SUCCEEDED", json.dumps({"stepsDone": 1, "payload": ""})
        finished = time.time()
        db.execute(FINISH, (status, result, finished, job_id))
        notice = f"{job_id} {status} {_ms(finished - queued)}".encode()
        for address in addresses:
            try:
                out.sendto(notice, address)
            except OSError:
                pass  # that HTTP process is not (or no longer) there: it holds no watch


# ------------------------------------------------------------------ the parent


def run(title, args, app_class=None, backlog=2048, prepare=None):
    """Serve ``app_class`` (``http_main``) in HTTP_PROCESSES processes on one listening
    socket of ``args.host``/``args.port``, with the processes ``prepare(ctx, folder)``
    answers (and the sockets it opened, closed once the HTTP processes serve); print
    "``title``: serving on …" then, and stop on SIGTERM or SIGINT, or when a process ends.
    The folder (``args.folder``, else a temporary one, removed at the end) holds the
    datagram sockets."""
    folder = args.folder or tempfile.mkdtemp(prefix=title.replace(" ", "-") + "-")
    os.makedirs(folder, exist_ok=True)
    for index in range(HTTP_PROCESSES):
        if os.path.exists(notice_path(folder, index)):
            os.unlink(notice_path(folder, index))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(backlog)
    ctx = multiprocessing.get_context("spawn")
    procs, ups, senders = [], [], []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        others, opened = prepare(ctx, folder) if prepare is not None else ([], [])
        for index in range(HTTP_PROCESSES):
            receiver, sender = ctx.Pipe(duplex=False)
            procs.append(
                ctx.Process(
                    target=http_main,
                    args=(listener, index, folder, sender, app_class),
                    name="http",
                )
            )
            ups.append(receiver)
            senders.append(sender)
        procs += others
        for proc in procs:
            proc.start()
        for sender in senders:
            sender.close()  # so that an HTTP process ending before it serves is an EOFError
        for receiver in ups:
            receiver.recv()
        listener.close()  # only the HTTP processes hold it now
        for opened_socket in opened:
            opened_socket.close()
        print(f"{title}: serving on http://{args.host}:{args.port}/services/rs", flush=True)
        multiprocessing.connection.wait([proc.sentinel for proc in procs])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one stop is enough
        for proc in procs:
            if proc.pid is not None:
                proc.terminate()
        for proc in procs:
            if proc.pid is not None:
                proc.join(5)
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)


def arguments(description, folder_help):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50100)
    parser.add_argument("--folder", help=folder_help)
    return parser.parse_args()


def _database_and_workers(ctx, folder):
    """This floor's own part: the database made, the workers' wake-up socket bound, the
    worker processes."""
    if os.path.exists(wake_path(folder)):
        os.unlink(wake_path(folder))
    db = connect(folder)
    db.executescript(SCHEMA)
    db.close()
    wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    wake.bind(wake_path(folder))
    workers = [
        ctx.Process(target=worker_main, args=(wake, folder), name="worker") for _ in range(WORKERS)
    ]
    return workers, [wake]


class FloorProcess:
    """A floor script in a subprocess, started and stopped as a node is (its process
    tree measured the same way): ``banner`` is the start of the line it prints once both
    HTTP processes serve."""

    def __init__(self, script, banner, folder, port):
        self.script, self.banner, self.folder, self.port = script, banner, folder, port
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, self.script, "--port", str(self.port), "--folder", self.folder],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.startswith(self.banner):
            self.stop()
            raise RuntimeError(f"{self.script} did not start: {line!r}")
        return self

    def stop(self):
        if self.proc is not None:
            end(self.proc)
            self.proc.stdout.close()
            self.proc = None


def end(proc):
    """Stop a server's process: SIGTERM, and SIGKILL if it has not ended 20 s later."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def main():
    args = arguments(__doc__.splitlines()[0], "for the database and sockets (default: temporary)")
    run("floor", args, prepare=_database_and_workers)


if __name__ == "__main__":
    main()

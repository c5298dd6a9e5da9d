"""The floor of held long polls: a bare uvicorn app of the node's shape, for longpoll.py.

What ``benchmarks/longpoll.py`` measures on a node (thousands of ``watchJob`` long polls
held on one job, answered when ``stopJob`` ends it), done with the least work the HTTP
and long-poll part needs, so that the node is measured against it in the same run (issue
36: held long polls answered at most 1.2× this floor's p99):

- the process shape of the node's default configuration: 2 HTTP processes sharing one
  listening socket (the parent opens it, with the node's backlog, and each process runs
  ``uvicorn.Server`` on it with ``http="httptools"``, ``loop="uvloop"``), a bare ASGI
  app, no framework, no thread pool, no log line;
- each HTTP process binds its own Unix datagram socket and reads it with
  ``loop.add_reader``.  A job's start and end are datagrams sent to every HTTP process
  (the sender's own included), since a watch or a stopJob may reach either process:
  ``start ID QUEUED`` when a job starts, ``end ID STATUS ELAPSED`` when it ends.  An end
  resolves the asyncio futures of every watch held on the job in that process, at one
  moment in both.  No polling anywhere.

Job state lives in the memory of the HTTP processes only: the process that started a
job keeps it and times its end (``durationMs``), the other learns of it by the start
datagram.  There is no database, no worker, no lease, no history: this is the floor of
the HTTP/long-poll part, not of storage (``benchmarks/floor.py`` is the floor of the
durable cycle).  Jobs are kept until the process ends (a benchmark starts a few hundred).

The URLs and JSON shapes are those of xruntime's JSON binding, so one client drives both:

    POST /services/rs/XDemo/startSimulate {"durationMs"?}
         → {"id": UUID4, "status": "QUEUING", "elapsedTime": 0}; the job runs at once
           and ends SUCCEEDED after durationMs (default 0: at once)
    POST /services/rs/XRuntime/watchJob {"id", "progressUpdatePeriod"?, "maximumPollingPeriod"?}
         → {"id", "status", "elapsedTime"}: at once if the job has ended, else when it
           ends (or after maximumPollingPeriod ms, default 60 000, with its status then);
           elapsedTime is the ms from its start to its end
    POST /services/rs/XRuntime/stopJob {"id"} → {"id", "status": "STOPPING", "elapsedTime"}:
           a running job ends FAILED (as a one-step job stopped early does on a node)
    POST /services/rs/XDemo/fetchSimulateResponse {"id"} → {"stepsDone": 1, "payload": ""}
    POST /services/rs/XRuntime/getRuntimeInformation {} → small fixed JSON

    python benchmarks/longpoll_floor.py [--host 127.0.0.1] [--port 50100] [--folder DIR]

prints one line ("longpoll floor: serving on …") once both HTTP processes serve, and
stops on SIGTERM or SIGINT, or when one of its processes ends.  The datagram sockets live
in ``--folder`` (default: a temporary folder, removed at the end).
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
import sys
import tempfile
import time
import uuid

import uvicorn
import uvloop

HTTP_PROCESSES = 2
BACKLOG = 4096  # the node's (xruntime.serving.node.BACKLOG)
RUNTIME = {"name": "longpoll floor", "version": "0", "processes": HTTP_PROCESSES}
RESULT = {"stepsDone": 1, "payload": ""}


def notice_path(folder, index):
    return os.path.join(folder, f"http{index}.sock")


class Fault(Exception):
    pass


class Job:
    __slots__ = ("status", "queued", "elapsed", "timer")

    def __init__(self, queued):
        self.status, self.queued, self.elapsed, self.timer = "RUNNING", queued, None, None

    def answer(self, job_id):
        elapsed = self.elapsed if self.elapsed is not None else _ms(time.time() - self.queued)
        return {"id": job_id, "status": self.status, "elapsedTime": elapsed}


class App:
    """The bare ASGI application of one HTTP process."""

    def __init__(self, folder, notices):
        self.notices = notices
        self.out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addresses = [notice_path(folder, i) for i in range(HTTP_PROCESSES)]
        self.jobs = {}  # job id → Job
        self.held = {}  # job id → the futures of the watches held on it
        self.routes = {
            "/services/rs/XDemo/startSimulate": self.start,
            "/services/rs/XRuntime/watchJob": self.watch,
            "/services/rs/XRuntime/stopJob": self.stop,
            "/services/rs/XDemo/fetchSimulateResponse": self.fetch,
            "/services/rs/XRuntime/getRuntimeInformation": self.information,
        }

    # ---------------------------------------------------------- between the processes

    def listen_for_notices(self):
        self.notices.setblocking(False)
        asyncio.get_running_loop().add_reader(self.notices.fileno(), self.on_notices)

    def tell_all(self, notice):
        for address in self.addresses:
            try:
                self.out.sendto(notice.encode(), address)
            except OSError:
                pass  # that process is not (or no longer) there: it holds no watch

    def on_notices(self):
        while True:
            try:
                kind, job_id, *rest = self.notices.recv(128).decode().split()
            except BlockingIOError:
                return
            if kind == "start":
                self.jobs.setdefault(job_id, Job(float(rest[0])))
                continue
            job = self.jobs.get(job_id)
            if job is None:
                job = self.jobs[job_id] = Job(time.time())
            if job.elapsed is not None:
                continue  # ended already (its end was told twice: stopJob and its timer)
            job.status, job.elapsed = rest[0], int(rest[1])
            if job.timer is not None:
                job.timer.cancel()
                job.timer = None
            answer = job.answer(job_id)
            for future in self.held.pop(job_id, ()):
                if not future.done():
                    future.set_result(answer)

    def end(self, job_id, status):
        """Tells every process (this one too) that the job has ended."""
        job = self.jobs[job_id]
        if job.elapsed is None:
            self.tell_all(f"end {job_id} {status} {_ms(time.time() - job.queued)}")

    def job(self, job_id):
        job = self.jobs.get(job_id)
        if job is None:  # its start datagram may be waiting behind this request
            self.on_notices()
            job = self.jobs.get(job_id)
        return job

    # ---------------------------------------------------------- HTTP

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

    async def start(self, request):
        duration = request.get("durationMs", 0)
        if not isinstance(duration, int) or duration < 0:
            raise Fault("durationMs: a non-negative integer")
        job_id, queued = str(uuid.uuid4()), time.time()
        self.jobs[job_id] = job = Job(queued)
        self.tell_all(f"start {job_id} {queued!r}")  # before the answer: see ``job``
        if duration == 0:
            self.end(job_id, "SUCCEEDED")
        else:
            job.timer = asyncio.get_running_loop().call_later(
                duration / 1000, self.end, job_id, "SUCCEEDED"
            )
        return {"id": job_id, "status": "QUEUING", "elapsedTime": 0}

    async def watch(self, request):
        job_id = str(request["id"])
        job = self.job(job_id)
        if job is None:
            return {"id": job_id, "status": "UNKNOWN"}
        if job.elapsed is not None:
            return job.answer(job_id)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.held.setdefault(job_id, []).append(future)
        timer = loop.call_later(request.get("maximumPollingPeriod", 60000) / 1000, _expire, future)
        try:
            answer = await future
        finally:
            timer.cancel()
        if answer is None:  # maximumPollingPeriod passed first
            futures = self.held.get(job_id, [])
            if future in futures:
                futures.remove(future)
                if not futures:
                    del self.held[job_id]
            answer = job.answer(job_id)
        return answer

    async def stop(self, request):
        job_id = str(request["id"])
        job = self.job(job_id)
        if job is None:
            raise Fault(f"no job {job_id}")
        if job.elapsed is not None:
            return job.answer(job_id)
        self.end(job_id, "FAILED")
        return {"id": job_id, "status": "STOPPING", "elapsedTime": _ms(time.time() - job.queued)}

    async def fetch(self, request):
        job = self.job(str(request["id"]))
        if job is None or job.status != "SUCCEEDED":
            raise Fault(f"job {request['id']} has no result")
        return RESULT

    async def information(self, request):
        return RUNTIME


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


def http_main(listener, index, folder, up):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops it (SIGTERM)
    notices = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notices.bind(notice_path(folder, index))
    app = App(folder, notices)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50100)
    parser.add_argument("--folder", help="for the datagram sockets (default: temporary)")
    args = parser.parse_args()
    folder = args.folder or tempfile.mkdtemp(prefix="longpoll-floor-")
    os.makedirs(folder, exist_ok=True)
    for index in range(HTTP_PROCESSES):
        if os.path.exists(notice_path(folder, index)):
            os.unlink(notice_path(folder, index))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    listener.listen(BACKLOG)
    ctx = multiprocessing.get_context("spawn")
    procs, ups, senders = [], [], []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        for index in range(HTTP_PROCESSES):
            receiver, sender = ctx.Pipe(duplex=False)
            procs.append(
                ctx.Process(target=http_main, args=(listener, index, folder, sender), name="http")
            )
            ups.append(receiver)
            senders.append(sender)
        for proc in procs:
            proc.start()
        for sender in senders:
            sender.close()  # so that an HTTP process ending before it serves is an EOFError
        for receiver in ups:
            receiver.recv()
        listener.close()  # only the HTTP processes hold it now
        print(f"longpoll floor: serving on http://{args.host}:{args.port}/services/rs", flush=True)
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


if __name__ == "__main__":
    main()

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

import asyncio
import os
import socket
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.floor import (  # noqa: E402
    HTTP_PROCESSES,
    Fault,
    JsonApp,
    _expire,
    _ms,
    arguments,
    notice_path,
    run,
)

BACKLOG = 4096  # the node's (xruntime.serving.node.BACKLOG)
RUNTIME = {"name": "longpoll floor", "version": "0", "processes": HTTP_PROCESSES}
RESULT = {"stepsDone": 1, "payload": ""}


class Job:
    __slots__ = ("status", "queued", "elapsed", "timer")

    def __init__(self, queued):
        self.status, self.queued, self.elapsed, self.timer = "RUNNING", queued, None, None

    def answer(self, job_id):
        elapsed = self.elapsed if self.elapsed is not None else _ms(time.time() - self.queued)
        return {"id": job_id, "status": self.status, "elapsedTime": elapsed}


class App(JsonApp):
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


def main():
    args = arguments(__doc__.splitlines()[0], "for the datagram sockets (default: temporary)")
    run("longpoll floor", args, app_class=App, backlog=BACKLOG)


if __name__ == "__main__":
    main()

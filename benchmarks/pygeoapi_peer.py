"""pygeoapi, the peer of issue 36: its asynchronous job cycle, served as its docs say for
production, for ``benchmarks/cycle.py --pygeoapi`` to measure beside xruntime in one run.

What a user might pick instead of xruntime for durable jobs behind HTTP is an OGC API –
Processes server; pygeoapi is the Python one.  Its setup here:

- pygeoapi from PyPI (``PINS``) in a virtual environment of its OWN, never the project's:
  ``--pygeoapi-venv`` (default ``~/.cache/xruntime-benchmarks/pygeoapi-venv``), made on
  first use with this interpreter's ``-m venv`` and ``pip install``; by hand the same is
  ``python3.11 -m venv DIR && DIR/bin/pip install pygeoapi==0.21.0 gunicorn==27.0.1
  starlette==1.10.0 uvicorn==0.54.0``;
- served under gunicorn with ``-w 2`` worker processes, to match xruntime's 2 HTTP
  processes on this 2-core machine, in one of the two ways its docs' "Running in
  production" gives (``APPS``): ``starlette``, the default, is "Gunicorn and Starlette"
  (``gunicorn pygeoapi.starlette_app:APP -k uvicorn.workers.UvicornWorker``; plain
  ``uvicorn`` as the docs install it, without httptools or uvloop; keep-alive
  connections; the API runs in the event loop's thread pool); ``flask`` is "Gunicorn and
  Flask" (``gunicorn pygeoapi.flask_app:APP``: gunicorn's ``sync`` workers, one request
  at a time a process and ``Connection: close`` on every answer, so the client reconnects
  each request).  Starlette is the default as the faster of the two here (dev runs of 4 s
  at 8 clients: 33–37 cycles/s against Flask's 23–26): the peer at its best.
  ``PYGEOAPI_CONFIG`` is a configuration written into the run's folder (``CONFIG``) and
  ``PYGEOAPI_OPENAPI`` the document ``pygeoapi openapi generate`` makes from it;
- ``server.manager`` the TinyDB manager (pygeoapi has no SQLite one), so that jobs are
  durable: one JSON file that every job operation reads whole and writes back whole
  under a ``filelock.FileLock``, and ``output_dir`` beside it, where each job's result is
  written as a file (the results GET reads it).  The file grows by one job a cycle, so a
  cycle costs more the more jobs it holds (8 clients, 12 s: 26–33 ms of server CPU a
  cycle on the file the 1-client measure left, ~200 jobs, against 19–23 from an empty
  one; 4 s from an empty file: 33–37 cycles/s against 24–27 over 12 s): ``cycle.py``
  starts it anew for each measure.  Logging at ERROR, pygeoapi's shipped default;
- the process is pygeoapi's own ``hello-world`` (``{"name": "x"}`` → ``Hello x!``), a
  no-op.  pygeoapi runs an asynchronous job in a thread of the HTTP worker process that
  took the POST (``multiprocessing.dummy.Process``): there are no worker processes.

A cycle (``cycle_step``):  POST /processes/hello-world/execution with ``Prefer:
respond-async`` (201, the job's URL in ``Location``) → GET /jobs/{id} until ``status`` is
``successful`` → GET /jobs/{id}/results, all with ``Accept: application/json``.  pygeoapi
has no long poll (nor any way to be told that a job ended, but a callback URL), so the
client polls, back to back with no pause by default: the lowest latency a client can
get, since a no-op job ends in a few ms.  It costs few polls all the same: a GET that
finds the job file locked (the job's thread writing it) waits in FileLock's own retry,
whose interval is 50 ms — most of pygeoapi's cycle latency at 1 client.  A pause
(``pause`` s, ``--pygeoapi-pause``) changed nothing measurable (dev run, Starlette, 8
clients: 37 cycles/s either way with 5 ms).  The polls a cycle took are counted
(``polls_a_cycle``) and printed beside the figures.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time

from benchmarks.floor import end

PINS = ("pygeoapi==0.21.0", "gunicorn==27.0.1", "starlette==1.10.0", "uvicorn==0.54.0")
HTTP_PROCESSES = 2
PROCESS = "hello-world"
APPS = {
    "flask": ["pygeoapi.flask_app:APP"],
    "starlette": ["-k", "uvicorn.workers.UvicornWorker", "pygeoapi.starlette_app:APP"],
}
DEFAULT_VENV = os.path.join(
    os.path.expanduser("~"), ".cache", "xruntime-benchmarks", "pygeoapi-venv"
)

CONFIG = """\
server:
    bind: {{host: 127.0.0.1, port: {port}}}
    url: http://127.0.0.1:{port}
    mimetype: application/json; charset=UTF-8
    encoding: utf-8
    languages: [en-US]
    limit: 10
    map: {{url: 'https://tile.openstreetmap.org/{{z}}/{{x}}/{{y}}.png', attribution: OSM}}
    manager:
        name: TinyDB
        connection: {folder}/jobs.tinydb
        output_dir: {folder}/results/
logging:
    level: ERROR
metadata:
    identification:
        title: peer
        description: the peer of xruntime's issue 36
        keywords: [benchmark]
        url: http://127.0.0.1:{port}
        terms_of_service: https://creativecommons.org/licenses/by/4.0/
    license: {{name: CC-BY 4.0, url: 'https://creativecommons.org/licenses/by/4.0/'}}
    provider: {{name: benchmark, url: 'http://127.0.0.1:{port}'}}
    contact: {{name: benchmark}}
resources:
    {process}:
        type: process
        processor: {{name: HelloWorld}}
"""


def ensure_venv(venv):
    """The peer's own virtual environment at ``venv``, made with ``PINS`` if missing."""
    gunicorn = os.path.join(venv, "bin", "gunicorn")
    if not os.path.exists(os.path.join(venv, "bin", "pygeoapi")) or not os.path.exists(gunicorn):
        print(f"pygeoapi: installing {' '.join(PINS)} into {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run(
            [os.path.join(venv, "bin", "pip"), "install", "-q", *PINS],
            check=True,
        )
    return venv


def describe(venv, app):
    versions = subprocess.run(
        [
            os.path.join(venv, "bin", "python"),
            "-c",
            "import importlib.metadata as m; print(*(f'{p} {m.version(p)}' for p in"
            " ('pygeoapi', 'gunicorn', 'starlette', 'uvicorn', 'flask', 'tinydb', 'filelock')),"
            " sep=', ')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    command = " ".join(["gunicorn", "-w", str(HTTP_PROCESSES), *APPS[app]])
    return f"{venv}: {versions}; {command}, TinyDB manager"


class Peer:
    """pygeoapi under gunicorn in ``folder`` on ``port``, started and stopped as a node is
    (``proc`` is gunicorn's arbiter, the process tree measured under it)."""

    def __init__(self, venv, folder, port, app="flask"):
        self.venv, self.folder, self.port, self.app = venv, folder, port, app
        self.proc = None

    def start(self):
        config = os.path.join(self.folder, "pygeoapi-config.yml")
        openapi = os.path.join(self.folder, "pygeoapi-openapi.yml")
        os.makedirs(os.path.join(self.folder, "results"), exist_ok=True)
        with open(config, "w") as f:
            f.write(CONFIG.format(port=self.port, folder=self.folder, process=PROCESS))
        env = dict(os.environ, PYGEOAPI_CONFIG=config, PYGEOAPI_OPENAPI=openapi)
        bin_ = os.path.join(self.venv, "bin")
        subprocess.run(
            [
                os.path.join(bin_, "pygeoapi"),
                "openapi",
                "generate",
                config,
                "--output-file",
                openapi,
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.log = open(os.path.join(self.folder, "gunicorn.log"), "w")
        self.proc = subprocess.Popen(
            [
                os.path.join(bin_, "gunicorn"),
                "-w",
                str(HTTP_PROCESSES),
                "-b",
                f"127.0.0.1:{self.port}",
                "--no-control-socket",
                *APPS[self.app],
            ],
            env=env,
            cwd=self.folder,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not self._serving():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pygeoapi did not start; see {self.log.name}")
            time.sleep(0.2)
        time.sleep(1)  # both workers up (each imports pygeoapi): the first answer is one's
        return self

    def _serving(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", f"/processes/{PROCESS}", headers={"Accept": "application/json"})
            return conn.getresponse().status == 200
        except OSError:
            return False

    def stop(self):
        if self.proc is not None:
            end(self.proc)
            self.proc = None
            self.log.close()


#: Polls and cycles done, over all clients (under ``_counted``).
POLLS = {"polls": 0, "cycles": 0}
_counted = threading.Lock()


def polls_a_cycle():
    """{"polls": GET /jobs/{id} a cycle} since the last call, and a fresh count."""
    with _counted:
        polls, cycles = POLLS["polls"], POLLS["cycles"]
        POLLS.update(polls=0, cycles=0)
    return {"polls": polls / cycles if cycles else float("nan")}


def cycle_step(port, pause=0.0):
    """One cycle on this thread's own ``http.client`` connection (reopened by it after
    each ``Connection: close``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=70)
    accept = {"Accept": "application/json"}
    execute = dict(accept, **{"Content-Type": "application/json", "Prefer": "respond-async"})
    body = json.dumps({"inputs": {"name": "x"}})

    def get(path, status=200):
        conn.request("GET", path, headers=accept)
        response = conn.getresponse()
        data = response.read()
        if response.status != status:
            raise RuntimeError(f"GET {path}: {response.status} {data[:200]!r}")
        return json.loads(data)

    def cycle():
        conn.request("POST", f"/processes/{PROCESS}/execution", body, execute)
        response = conn.getresponse()
        data = response.read()
        if response.status != 201:
            raise RuntimeError(f"execute: {response.status} {data[:200]!r}")
        job = "/jobs/" + response.getheader("Location").rstrip("/").rsplit("/", 1)[1]
        polls = 1
        while (status := get(job)["status"]) != "successful":
            if status in ("failed", "dismissed"):
                raise RuntimeError(f"job {job} ended {status}")
            if pause:
                time.sleep(pause)
            polls += 1
        get(job + "/results")
        with _counted:
            POLLS["polls"] += polls
            POLLS["cycles"] += 1

    return cycle

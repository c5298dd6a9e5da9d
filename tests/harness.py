"""Runs a real xruntime node in a subprocess on a free port, and talks JSON to it.

Used by the end-to-end tests and the benchmarks: every call goes through real HTTP
to a real ``python -m xruntime serve`` with real worker processes.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import descendants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: Where ``free_port`` looks: below the kernel's ephemeral range, which Linux gives
#: out by default from 32768.
PORTS_FROM = 10000


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a node to listen on, chosen below the kernel's
    ephemeral range (``ip_local_port_range``).  A port ``bind(0)`` answers is of that
    range, where every outgoing connection of the machine takes its own local port: one
    took a node's port between its choice and the node's bind (CI: "cannot serve on
    127.0.0.1:48253: Address already in use")."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_from = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_from = 32768
    for _ in range(200):
        port = random.randrange(PORTS_FROM, max(PORTS_FROM + 1000, ephemeral_from))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use: another
            return port
    with socket.socket() as s:  # (no free port found there: any the kernel gives)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(
    folder,
    port,
    database_url=None,
    extra="",
    workers=2,
    threads=64,
    server_keys=None,
    database_keys=None,
    worker_keys=None,
):
    """A config file in ``folder`` (data beside it), as an administrator would write it.
    ``server_keys`` go into its [server] table, ``database_keys`` into [database],
    ``worker_keys`` into [workers], ``extra`` (TOML) after the tables."""
    os.makedirs(folder, exist_ok=True)
    # one HTTP process unless a test asks for more: a node of one per core (the default)
    # costs a process start each on a suite that starts a hundred nodes; the tests of
    # several processes (test_serving, test_status_stream, test_metrics) say so
    server = {
        "host": "127.0.0.1",
        "port": port,
        "processes": 1,
        **({"threads": threads} if threads else {}),
        **(server_keys or {}),
    }
    text = "[server]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in server.items())
    text += f'\n[database]\nurl = "{database_url or "sqlite:///data/xruntime.db"}"\n'
    text += "".join(
        f"{key} = {json.dumps(value)}\n" for key, value in (database_keys or {}).items()
    )
    text += f"\n[workers]\ncount = {workers}\n"
    text += "".join(f"{key} = {json.dumps(value)}\n" for key, value in (worker_keys or {}).items())
    path = os.path.join(folder, "xserver.toml")
    with open(path, "w") as f:
        f.write(text + textwrap.dedent(extra))
    return path


def default_config(folder, port, database_url=None, root=ROOT):
    """A copy of the shipped config/xserver.toml (of the checkout at ``root``) in
    ``folder`` with only ``port`` and the database url changed (default: SQLite in
    ``folder``/data); answers its path."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(root, "config", "xserver.toml"), encoding="utf-8") as f:
        original = f.read()
    url = database_url or "sqlite:///data/xruntime.db"
    lines, table = [], None
    for line in original.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped.split("]")[0].strip("[ ")
        elif table == "server" and stripped.split("=")[0].strip() == "port":
            line = f"port = {int(port)}\n"
        elif table == "database" and stripped.split("=")[0].strip() == "url":
            line = f"url = {json.dumps(url)}\n"
        lines.append(line)
    text = "".join(lines)
    expected = tomllib.loads(original)
    expected["server"]["port"], expected["database"]["url"] = int(port), url
    assert tomllib.loads(text) == expected, "config/xserver.toml: port or url not found"
    path = os.path.join(folder, "xserver.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class Server:
    """One node; ``start()`` waits until it answers, ``stop()`` sends SIGTERM.

    With ``config`` (a file, e.g. from ``default_config``) the node runs on that file as
    it is: its port and worker count are read from it and ``database_url``, ``extra``,
    ``workers``, ``threads`` and ``server_keys`` are not used."""

    def __init__(
        self,
        folder,
        port=None,
        database_url=None,
        extra="",
        workers=2,
        threads=64,
        env=None,
        server_keys=None,
        config=None,
        auth=None,
        host="127.0.0.1",
        prefix=(),
        database_keys=None,
        worker_keys=None,
    ):
        self.folder = folder
        self.prefix = list(prefix)  # run the node through these (e.g. ip netns exec NAME)
        if config is None:
            self.port = port or free_port()
            self.config = write_config(
                folder,
                self.port,
                database_url,
                extra,
                workers,
                threads,
                {"host": host, **(server_keys or {})},
                database_keys,
                worker_keys,
            )
        else:
            with open(config, "rb") as f:
                settings = tomllib.load(f)
            self.port = settings.get("server", {}).get("port", 50000)
            if port is not None and port != self.port:
                raise ValueError(f"{config} has port {self.port}, not {port}")
            workers = settings.get("workers", {}).get("count", 2)
            self.config = config
        self.base = f"http://{host}:{self.port}"
        self.log_path = os.path.join(folder, "server.log")
        # ``env`` may override these two as well (e.g. XRUNTIME_SERVICE_MODULES="")
        self.env = {
            **os.environ,
            "PYTHONPATH": ROOT,
            "XRUNTIME_SERVICE_MODULES": "tests.fixtures.crashy",
            **(env or {}),
        }
        self.proc = None
        self.workers = workers
        self.session = requests.Session()
        self.session.auth = auth  # (user, token) for the JSON calls below, with [auth] on

    def start(self, timeout=60):
        self._log = open(self.log_path, "ab")
        self._log_offset = self._log.tell()
        self.proc = subprocess.Popen(
            self.prefix + [sys.executable, "-m", "xruntime", "serve", "--config", self.config],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if (
                    self.session.post(
                        self.url("XRuntime", "getRuntimeInformation"), json={}, timeout=2
                    ).status_code
                    == 200
                    and self._workers_ready()
                ):
                    return self
            except (requests.ConnectionError, requests.Timeout):
                pass  # not listening yet, or its HTTP processes are still starting
            time.sleep(0.1)
        raise RuntimeError(f"server did not start:\n{self.log()}")

    def _workers_ready(self):
        return self.log()[self._log_offset :].count("started (pid") >= self.workers

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        code, self.proc = self.proc.returncode, None
        return code

    def kill(self):
        """SIGKILL the server process and every process it started (workers, HTTP
        processes), as a power loss would."""
        pids = [self.proc.pid] + descendants(self.proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._log.close()
        self.proc = None

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ------------------------------------------------------------------ JSON calls

    def url(self, service, operation):
        return f"{self.base}/services/rs/{service}/{operation}"

    def post(self, service, operation, body=None, **kwargs):
        """The raw response of one JSON call."""
        return self.session.post(
            self.url(service, operation),
            json=body if body is not None else {},
            timeout=kwargs.pop("timeout", 70),
            **kwargs,
        )

    def call(self, service, operation, body=None, expect=200):
        r = self.post(service, operation, body)
        assert r.status_code == expect, (r.status_code, r.text)
        return r.json()

    def start_job(self, **request):
        return self.call("XDemo", "startSimulate", request)

    def watch(self, job_id, **periods):
        return self.call("XRuntime", "watchJob", dict(id=job_id, **periods))

    def wait_done(self, job_id, timeout=60):
        """Watch until the job is terminal; answers the last Job."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.watch(job_id, progressUpdatePeriod=250, maximumPollingPeriod=5000)
            if job["status"] in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"):
                return job
        raise AssertionError(f"job {job_id} did not finish")

    def scrape(self, **kwargs) -> dict:
        """{(sample name, frozenset of labels): value} of one scrape of /metrics, read
        with prometheus_client's parser (``kwargs`` go to ``requests.get``)."""
        r = requests.get(f"{self.base}/metrics", timeout=10, **kwargs)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text)
            for s in family.samples
        }

    def wait_held(self, count, timeout=60):
        """Until the node's /metrics says at least ``count`` watchJob calls are held (their
        requests read by an HTTP process), instead of a guess at how long that takes."""
        deadline = time.monotonic() + timeout
        while True:
            samples = self.scrape(auth=self.session.auth)
            held = samples.get(("xruntime_held_watches", frozenset()), 0)
            if held >= count:
                return
            assert time.monotonic() < deadline, f"{held:.0f} of {count} watches held"
            time.sleep(0.05)

    def wait_status(self, job_id, status, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.watch(job_id, progressUpdatePeriod=250, maximumPollingPeriod=1000)
            if job["status"] == status:
                return job
            assert job["status"] not in ("SUCCEEDED", "FAILED", "DELETED", "UNKNOWN"), (
                f"job {job_id} is {job['status']}, waiting for {status}"
            )
        raise AssertionError(f"job {job_id} never reached {status}")

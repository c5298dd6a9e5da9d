"""A cluster of xruntime hosts on this machine: network namespaces on a bridge, a
PostgreSQL of its own reached over the bridge, HAProxy in front.

    root namespace                       namespaces (one per host)
    xrt-br0 10.77.0.1/24  ── veth ──  xrt-a: eth0 10.77.0.11, hostname xrt-a
      PostgreSQL 10.77.0.1:PORT  ── veth ──  xrt-b: eth0 10.77.0.12, hostname xrt-b
      HAProxy 127.0.0.1:PORT     ── veth ──  xrt-c: eth0 10.77.0.13, hostname xrt-c

Each host runs ``python -m xruntime serve`` inside its namespace (``ip netns exec``) and
its own UTS namespace (``unshare --uts``) with its own hostname, so that the node names
itself ``xrt-a:50000`` as a node on a real host would (no ``node_name`` is set).  All
nodes listen on the same port, each on its own address.  A partition drops every
packet on the host's eth0 (iptables in its namespace), so that both the database and
the clients lose it while TCP keeps retrying, as on a cut cable; calls from inside the
namespace to its own address still reach it.

Everything is made by ``Cluster.up()`` and removed by ``Cluster.down()``; ``up()``
first removes what a crashed run left (the names below, and STATE).  Needs root,
iproute2, iptables, util-linux's unshare, HAProxy, and PostgreSQL's binaries;
``missing()`` says what is not there.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

from tests.harness import ROOT, Server

BRIDGE = "xrt-br0"
PREFIX = "10.77.0"
HOST_ADDRESS = f"{PREFIX}.1"
HOSTS = {"xrt-a": f"{PREFIX}.11", "xrt-b": f"{PREFIX}.12", "xrt-c": f"{PREFIX}.13"}
NODE_PORT = 50000
PG_BIN = os.environ.get("XRUNTIME_TEST_PG_BIN", "/usr/lib/postgresql/15/bin")
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
#: A sitecustomize that keeps time.sleep working under libfaketime (see its docstring).
FAKETIME_SHIM = os.path.join(ROOT, "tests", "faketime_shim")
HAPROXY_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "haproxy.cfg")
#: What a run keeps outside its temporary folders, so that the next run can remove it.
STATE = os.path.join(tempfile.gettempdir(), "xruntime-cluster")
PG_FOLDER = os.path.join(STATE, "pg")
HAPROXY_FOLDER = os.path.join(STATE, "haproxy")


def missing(faketime=False) -> list:
    """What this machine lacks for a cluster (empty: nothing)."""
    lacks = []
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        lacks.append("root on Linux (network namespaces)")
    for tool in ("ip", "iptables", "unshare", "haproxy", "runuser"):
        if shutil.which(tool) is None:
            lacks.append(tool)
    if not os.path.exists(os.path.join(PG_BIN, "initdb")):
        lacks.append(f"PostgreSQL's initdb in {PG_BIN}")
    if faketime and not os.path.exists(FAKETIME):
        lacks.append(f"libfaketime at {FAKETIME} (apt-get install faketime)")
    return lacks


def sh(*args, check=True, timeout=60) -> str:
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def in_namespace(name, *args, **kwargs) -> str:
    return sh("ip", "netns", "exec", name, *args, **kwargs)


def free_port(address) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- network


class Network:
    def __init__(self, hosts=HOSTS):
        self.hosts = dict(hosts)

    def up(self):
        self.down()
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{HOST_ADDRESS}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for name, address in self.hosts.items():
            outside, inside = f"{name}-h", f"{name}-n"
            sh("ip", "netns", "add", name)
            sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
            sh("ip", "link", "set", outside, "master", BRIDGE)
            sh("ip", "link", "set", outside, "up")
            sh("ip", "link", "set", inside, "netns", name)
            in_namespace(name, "ip", "link", "set", inside, "name", "eth0")
            in_namespace(name, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
            in_namespace(name, "ip", "link", "set", "eth0", "up")
            in_namespace(name, "ip", "link", "set", "lo", "up")

    def cut(self, name):
        """Drop every packet to and from the host (its own address stays reachable
        from inside)."""
        in_namespace(name, "iptables", "-I", "INPUT", "-i", "eth0", "-j", "DROP")
        in_namespace(name, "iptables", "-I", "OUTPUT", "-o", "eth0", "-j", "DROP")

    def heal(self, name):
        for chain, direction in (("INPUT", "-i"), ("OUTPUT", "-o")):
            in_namespace(
                name, "iptables", "-D", chain, direction, "eth0", "-j", "DROP", check=False
            )

    def down(self):
        """Remove the namespaces (ending what still runs in them), their veths and the
        bridge: this run's, or a crashed run's."""
        existing = sh("ip", "netns", "list", check=False).split()
        for name in self.hosts:
            if name in existing:
                for pid in sh("ip", "netns", "pids", name, check=False).split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                sh("ip", "netns", "del", name, check=False)
            sh("ip", "link", "del", f"{name}-h", check=False)
        sh("ip", "link", "del", BRIDGE, check=False)


# --------------------------------------------------------------------------- PostgreSQL


class Postgres:
    """A PostgreSQL cluster of the test's own (initdb'd as the user postgres), listening
    on the bridge's address only, trusting the hosts' /24."""

    def __init__(self, folder=PG_FOLDER, address=HOST_ADDRESS):
        self.folder, self.address = folder, address
        self.data = os.path.join(folder, "data")
        self.port = None

    @property
    def url(self):
        return f"postgresql+psycopg://postgres@{self.address}:{self.port}/xruntime"

    def _ctl(self, *args, check=True, timeout=60):
        return sh(
            "runuser",
            "-u",
            "postgres",
            "--",
            os.path.join(PG_BIN, "pg_ctl"),
            "-D",
            self.data,
            *args,
            check=check,
            timeout=timeout,
        )

    def start(self, settings=None):
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
        os.makedirs(self.folder)
        shutil.chown(self.folder, "postgres", "postgres")
        sh(
            "runuser",
            "-u",
            "postgres",
            "--",
            os.path.join(PG_BIN, "initdb"),
            "-D",
            self.data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self.port = free_port(self.address)
        conf = {
            "listen_addresses": f"'{self.address}'",
            "port": self.port,
            "unix_socket_directories": f"'{self.folder}'",
            "max_connections": 400,
            "shared_buffers": "'64MB'",
            **(settings or {}),
        }
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("".join(f"{key} = {value}\n" for key, value in conf.items()))
        with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
            f.write(f"host all all {PREFIX}.0/24 trust\n")
        self._ctl("-l", os.path.join(self.folder, "postgresql.log"), "-w", "start")
        sh(
            "runuser",
            "-u",
            "postgres",
            "--",
            os.path.join(PG_BIN, "createdb"),
            "-h",
            self.address,
            "-p",
            self.port,
            "-U",
            "postgres",
            "xruntime",
        )
        return self

    def stop(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._ctl("-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.folder, ignore_errors=True)

    def engine(self):
        from sqlalchemy import create_engine

        return create_engine(self.url, pool_size=2)


# --------------------------------------------------------------------------- HAProxy


class HAProxy:
    """Debian's HAProxy on 127.0.0.1 with HAPROXY_TEMPLATE and one ``server`` line per
    node; its stats page tells which servers it sees up."""

    def __init__(self, folder=HAPROXY_FOLDER):
        self.folder = folder
        self.proc = None
        self.port = self.stats_port = None

    def start(self, servers: dict):
        """``servers``: name → address:port."""
        self.stop()
        os.makedirs(self.folder, exist_ok=True)
        with open(HAPROXY_TEMPLATE) as f:
            text = f.read()
        text += "".join(f"    server {name} {target}\n" for name, target in servers.items())
        self.config = os.path.join(self.folder, "haproxy.cfg")
        with open(self.config, "w") as f:
            f.write(text)
        self.port, self.stats_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        env = {
            **os.environ,
            "XRUNTIME_LISTEN": f"127.0.0.1:{self.port}",
            "XRUNTIME_STATS": f"127.0.0.1:{self.stats_port}",
        }
        subprocess.run(["haproxy", "-c", "-q", "-f", self.config], env=env, check=True, timeout=30)
        self._log = open(os.path.join(self.folder, "haproxy.log"), "ab")
        self.proc = subprocess.Popen(
            ["haproxy", "-db", "-f", self.config],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        with open(os.path.join(self.folder, "pid"), "w") as f:
            f.write(str(self.proc.pid))
        return self

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def servers(self) -> dict:
        """name → status ("UP", "DOWN", "MAINT", …) of the backend's servers."""
        r = requests.get(f"http://127.0.0.1:{self.stats_port}/;csv", timeout=5)
        rows = [line.split(",") for line in r.text.splitlines()]
        header = rows[0]
        name, svname, status = (
            header.index("# pxname"),
            header.index("svname"),
            header.index("status"),
        )
        return {
            row[svname]: row[status]
            for row in rows[1:]
            if len(row) > status
            and row[name] == "xruntime"
            and row[svname] not in ("FRONTEND", "BACKEND")
        }

    def wait_servers(self, expected: dict, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                seen = self.servers()
            except requests.RequestException:
                seen = None
            if seen is not None and all(seen.get(k) == v for k, v in expected.items()):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"HAProxy sees {seen}, not {expected}")
            time.sleep(0.2)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self._log.close()
        else:  # a crashed run's, if its pid is still HAProxy
            try:
                with open(os.path.join(self.folder, "pid")) as f:
                    pid = int(f.read())
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "haproxy":
                        os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass


# --------------------------------------------------------------------------- nodes


def node_env(offset=None) -> dict:
    """A node's environment: its wall clock ``offset`` off (e.g. "+10m") with Debian's
    libfaketime, the monotonic clock left alone."""
    if not offset:
        return {"PYTHONPATH": ROOT}
    return {
        "LD_PRELOAD": FAKETIME,
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
        "PYTHONPATH": f"{FAKETIME_SHIM}:{ROOT}",
    }


def host_node(
    folder, host, database_url, extra="", workers=2, offset=None, processes=None
) -> Server:
    """The node of ``host``, in its namespace, with the host's name as its hostname."""
    keys = {"processes": processes} if processes else {}
    return Server(
        os.path.join(folder, host),
        port=NODE_PORT,
        host=HOSTS[host],
        database_url=database_url,
        extra=extra,
        workers=workers,
        env=node_env(offset),
        server_keys=keys,
        prefix=[
            "ip",
            "netns",
            "exec",
            host,
            "unshare",
            "--uts",
            "sh",
            "-c",
            f'hostname {host} && exec "$@"',
            host,
        ],
    )


class Cluster:
    """Network, PostgreSQL, nodes (``offsets``: host → clock offset or None) and HAProxy."""

    def __init__(self, folder, offsets=None, extra="", workers=2, processes=None, pg_settings=None):
        self.folder = folder
        self.offsets = offsets or {host: None for host in HOSTS}
        self.extra, self.workers, self.processes = extra, workers, processes
        self.pg_settings = pg_settings
        self.network = Network()
        self.pg = Postgres()
        self.haproxy = HAProxy()
        self.nodes = {}

    def up(self):
        self.down()
        self.network.up()
        self.pg.start(self.pg_settings)
        from xruntime.store.sql import JobStore

        JobStore(self.pg.url).close()  # the schema, once, before the nodes start together
        self.nodes = {
            host: host_node(
                self.folder, host, self.pg.url, self.extra, self.workers, offset, self.processes
            )
            for host, offset in self.offsets.items()
        }
        start_all(self.nodes.values())
        self.haproxy.start({host: f"{HOSTS[host]}:{NODE_PORT}" for host in self.nodes})
        self.haproxy.wait_servers({host: "UP" for host in self.nodes})
        return self

    def down(self):
        for node in self.nodes.values():
            if node.proc is not None:
                node.kill()
        self.haproxy.stop()
        self.network.down()  # (kills what a crashed run left in the namespaces)
        self.pg.stop()
        shutil.rmtree(STATE, ignore_errors=True)

    def proxy(self) -> Server:
        """A client of the cluster through HAProxy (``Server``'s JSON calls)."""
        client = Server.__new__(Server)
        client.base, client.session = self.haproxy.base, requests.Session()
        return client


def start_all(nodes, timeout=90):
    """Start the nodes together (each waits for its own answer)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(len(list(nodes)) or 1) as pool:
        for future in [pool.submit(node.start, timeout) for node in nodes]:
            future.result()


def fault_type(response):
    try:
        return response.json().get("faultInfo", {}).get("$type")
    except ValueError:
        return None


def call_from_inside(host, url, body, timeout=40):
    """POST ``body`` (JSON) to ``url`` from inside ``host``'s namespace; answers
    (seconds taken, HTTP status or None, body text)."""
    code = (
        "import json,sys,time,urllib.request,urllib.error\n"
        "t=time.monotonic()\n"
        "req=urllib.request.Request(sys.argv[1],data=sys.argv[2].encode(),"
        "headers={'Content-Type':'application/json'})\n"
        "try:\n"
        " r=urllib.request.urlopen(req,timeout=float(sys.argv[3]));s,b=r.status,r.read()\n"
        "except urllib.error.HTTPError as e: s,b=e.code,e.read()\n"
        "except Exception as e: s,b=None,repr(e).encode()\n"
        "print(json.dumps([time.monotonic()-t,s,b.decode('utf-8','replace')]))\n"
    )
    out = in_namespace(
        host, sys.executable, "-c", code, url, json.dumps(body), timeout, timeout=timeout + 20
    )
    return tuple(json.loads(out))

"""The no-op job cycle on xruntime beside the floor (benchmarks/floor.py), in one run.

A cycle is startSimulate(durationMs=0) → watchJob until SUCCEEDED → fetchSimulateResponse
over JSON (``roundtrip.cycle``).  The servers, each started fresh and measured in turn:

- ``floor``: benchmarks/floor.py, the cycle's least work on xruntime's parts (its
  docstring says what it does and leaves out);
- ``xruntime``: a node of this tree on its DEFAULT configuration — config/xserver.toml
  copied with only its port and database url (SQLite in a temporary folder) changed,
  so 2 HTTP processes on 2 cores, 2 workers (``longpoll.start_node``);
- ``baseline`` (``--baseline-tree PATH``): the same of another checkout, e.g.
  ``git worktree add --detach /tmp/base36 COMMIT``, run from that tree with its own
  interpreter (PATH/.venv/bin/python if there is one, or ``--baseline-python``);
- ``pygeoapi`` (``--pygeoapi``): the peer, pygeoapi's asynchronous job cycle (POST
  execution with ``Prefer: respond-async`` → GET the job until successful → GET its
  results) on 2 gunicorn workers with its TinyDB manager, in a virtual environment of
  its own (``--pygeoapi-venv``, made on first use); ``benchmarks/pygeoapi_peer.py`` says
  how it is served and polled (``--pygeoapi-app starlette``, the default, or ``flask``:
  the two ways its docs give for production; ``--pygeoapi-pause MS`` between polls,
  none by default).  pygeoapi is started anew for each client count, since its cycle
  costs more the more jobs its file holds (``pygeoapi_peer``): each measure starts from
  an empty file, the peer at its best.  The summary gives each server's cycles/s ÷
  pygeoapi's (the target of issue 36 is ≥ 10 at 8 clients) and pygeoapi's polls a cycle.

With ``--sync`` the nodes (``xruntime``, ``baseline``) are also measured, in the same
turn on the same node, on the synchronous form and on a small real job, each a table:
``simulate`` (durationMs 0; the node runs it as a job and answers its response), ``matrix
cycle`` (startCreateDistanceMatrix of a 10 × 10 matrix → watchJob → fetch) and
``createDistanceMatrix`` (the same matrix by the synchronous form).  A synchronous form's
ratios are to its job form on the same node and N (``simulate`` ÷ ``cycle``,
``createDistanceMatrix`` ÷ ``matrix cycle``): the target of issue 36 is a CPU ratio ≤ 1.

The client is ONE process with N threads (``--clients``, default 1 and 8), each on its own
keep-alive ``http.client`` connection, running cycles (or calls) back to back:
``--warmup`` seconds first, then ``--seconds`` measured.  A cycle counts if it ended in
the measured window; its latency is from its start to its end.  For each server and N it
prints cycles/s, the server's CPU time per cycle by process kind (user + system of every
process of its tree, /proc/PID/stat, over the measured window: ``http`` holds the
listening socket, ``main`` is the process started, ``worker`` the rest; pygeoapi's
gunicorn arbiter is its ``main`` and its jobs run in its ``http`` processes), cycle
p50/p99, and the ratios to the floor: CPU per cycle ÷ the floor's (the target of issue 36
is ≤ 3) and cycles/s ÷ the floor's.  With ``--rounds R`` the servers are measured R times
in turns (the order alternating), so that the machine's other load hits all of them; the
summary gives the median of the rounds.  The client shares the machine's cores with the
server: at 8 clients the floor is bound by the client (one process, the GIL), which the
ratios understate xruntime's gap by.

With ``--profile SECONDS``, this tree's node is then run once more with
``--profile-clients`` (8) clients on ``--profile-workload`` (``cycle``, or e.g.
``simulate``) and ``py-spy record --gil --format raw`` samples each of its processes for
that long; the top 15 functions by own time (samples holding the GIL whose innermost
frame is the function) are printed per process kind.  py-spy is looked for beside this
interpreter and on PATH (``.venv/bin/pip install py-spy``); without it the profile is
skipped.

    python benchmarks/cycle.py [--seconds 10] [--warmup 2] [--clients 1 8] [--rounds 1]
                               [--baseline-tree PATH [--baseline-python PYTHON]]
                               [--sync] [--pygeoapi [--pygeoapi-venv PATH]
                               [--pygeoapi-app starlette|flask] [--pygeoapi-pause MS]]
                               [--profile SECONDS [--profile-workload NAME]
                               [--profile-clients N]]
"""

import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import pygeoapi_peer  # noqa: E402
from benchmarks.floor import FloorProcess  # noqa: E402
from benchmarks.longpoll import Tree, start_node  # noqa: E402
from benchmarks.roundtrip import Client, cpu_seconds, cycle, cycle_step, process_names  # noqa: E402
from benchmarks.stats import percentile  # noqa: E402
from tests.harness import ROOT, descendants, free_port  # noqa: E402

FLOOR = os.path.join(ROOT, "benchmarks", "floor.py")
KINDS = ("http", "main", "worker")


def Floor(folder):
    """benchmarks/floor.py in a subprocess, started and stopped as a node is."""
    return FloorProcess(FLOOR, "floor: serving", folder, free_port())


def start(tree, folder):
    """The floor (``tree`` None) or a node of ``tree``, started in ``folder``."""
    return Floor(folder).start() if tree is None else start_node(tree, folder, None)


#: A 10 × 10 matrix (the destinations are the starts): XDima's smallest real work.
MATRIX = {"startLocations": [{"longitude": 0.1 * i, "latitude": 45.0} for i in range(10)]}


def simulate_step(port):
    """The synchronous form of the no-op job: ``XDemo/simulate``."""
    client = Client(port)
    return lambda: client.call("XDemo", "simulate", {"durationMs": 0})


def matrix_cycle_step(port):
    """The 10 × 10 matrix as a job: start → watch → fetch."""
    client = Client(port)
    return lambda: cycle(
        client, "XDima", "startCreateDistanceMatrix", "fetchDistanceMatrixResponse", MATRIX
    )


def matrix_step(port):
    """The 10 × 10 matrix by the synchronous form: ``XDima/createDistanceMatrix``."""
    client = Client(port)
    return lambda: client.call("XDima", "createDistanceMatrix", MATRIX)


#: What a client does over and over: name → (a node's step factory, the workload its
#: ratios are to).
#: ``cycle`` is the table of every server, its ratios to the floor's; the synchronous
#: forms (``--sync``) run on the nodes only, their ratios to the job form of the same
#: work on the same node in the same turn.
WORKLOADS = {
    "cycle": (cycle_step, "floor"),
    "simulate": (simulate_step, "cycle"),
    "matrix cycle": (matrix_cycle_step, None),
    "createDistanceMatrix": (matrix_step, "matrix cycle"),
}


class Contender:
    """A server measured in turns: ``start(folder)`` → an object with ``proc``, ``port`` and
    ``stop()``; ``steps`` {workload: step factory} it runs; ``after()`` → more figures of
    the measure just made (and a fresh count for the next); ``fresh``: started anew for
    each measure (else once a turn, all its measures on the same server)."""

    def __init__(self, label, start, description, steps=None, after=dict, fresh=False):
        self.label, self.start, self.description = label, start, description
        self.steps = steps or {"cycle": cycle_step}
        self.after, self.fresh = after, fresh


def node(label, tree, sync):
    names = WORKLOADS if sync else ("cycle",)
    steps = {name: WORKLOADS[name][0] for name in names}
    return Contender(label, lambda folder: start(tree, folder), tree.describe(), steps)


def pygeoapi(venv, app, pause):
    venv = pygeoapi_peer.ensure_venv(venv)
    return Contender(
        "pygeoapi",
        lambda folder: pygeoapi_peer.Peer(venv, folder, free_port(), app).start(),
        pygeoapi_peer.describe(venv, app),
        {"cycle": lambda port: pygeoapi_peer.cycle_step(port, pause)},
        pygeoapi_peer.polls_a_cycle,
        fresh=True,  # its job file empty for each N: its cycle's cost grows with the file
    )


def kinds(server):
    """{pid: kind} of the server's processes (the process started is ``main``)."""
    root = server.proc.pid
    pids = [root] + descendants(root)
    names = process_names(pids, server.port)
    names[root] = "main"
    return names


def load(port, clients, stop, window, latencies, errors, step=cycle_step):
    """``clients`` threads running ``step(port)``'s callable (a cycle) until ``stop``; the
    latency of each cycle that ended inside ``window`` [start, end] goes to its thread's
    list."""

    def run(mine):
        try:
            one = step(port)
            while not stop.is_set():
                began = time.perf_counter()
                one()
                ended = time.perf_counter()
                start, end = window
                if start is not None and start <= ended and (end is None or ended <= end):
                    mine.append(ended - began)
        except Exception as e:  # the figures would be wrong: say it and stop
            errors.append(repr(e))
            stop.set()

    threads = []
    for _ in range(clients):
        latencies.append([])
        threads.append(threading.Thread(target=run, args=(latencies[-1],), daemon=True))
        threads[-1].start()
    return threads


def measure(server, clients, seconds, warmup, step=cycle_step):
    names = kinds(server)
    stop, window, latencies, errors = threading.Event(), [None, None], [], []
    threads = load(server.port, clients, stop, window, latencies, errors, step)
    time.sleep(warmup)
    before, started = cpu_seconds(names), time.perf_counter()
    window[0] = started
    time.sleep(seconds)
    ended = time.perf_counter()
    window[1] = ended
    after = cpu_seconds(names)
    stop.set()
    for thread in threads:
        thread.join(70)
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]}")
    done = sorted(value * 1000 for mine in latencies for value in mine)
    cpu = collections.Counter()
    for pid, kind in names.items():
        if pid in after and pid in before:
            cpu[kind] += after[pid] - before[pid]
    count = max(1, len(done))
    return {
        "rate": len(done) / (ended - started),
        "cpu": sum(cpu.values()) * 1000 / count,
        **{kind: cpu[kind] * 1000 / count for kind in KINDS},
        "p50": percentile(done, 50) if done else float("nan"),
        "p99": percentile(done, 99) if done else float("nan"),
    }


COLUMNS = (
    ("rate", "{}s/s", "{:.0f}"),
    ("cpu", "CPU ms/{}", "{:.2f}"),
    ("http", "http", "{:.2f}"),
    ("main", "main", "{:.2f}"),
    ("worker", "worker", "{:.2f}"),
    ("p50", "p50 ms", "{:.1f}"),
    ("p99", "p99 ms", "{:.1f}"),
)


def table(rows, against, unit):
    """rows: (clients, label, figures, the figures its ratios are to or None); ``against``
    names the latter."""
    head = f"{'clients':>7}  {'server':<9}" + "".join(
        f"{t.format(unit):>13}" for _, t, _ in COLUMNS
    )
    if against:
        head += f"{'CPU ÷ ' + against:>15}{'rate ÷ ' + against:>16}"
    print(head)
    for n, label, figures, base in rows:
        line = f"{n:>7}  {label:<9}" + "".join(f"{f.format(figures[k]):>13}" for k, _, f in COLUMNS)
        if base:
            line += f"{figures['cpu'] / base['cpu']:>15.2f}{figures['rate'] / base['rate']:>16.2f}"
        print(line)
    sys.stdout.flush()


def report(figures, labels, clients):
    """The tables of one round's (or the medians') ``figures`` {(label, workload, n): …}:
    one a workload, and the cycle's rates over pygeoapi's if it ran."""
    for workload, (_, against) in WORKLOADS.items():
        rows = [
            (n, label, figures[label, workload, n], figures.get(reference))
            for n in clients
            for label in labels
            if (label, workload, n) in figures
            for reference in [("floor", workload, n) if against == "floor" else (label, against, n)]
        ]
        if not rows:
            continue
        if workload.endswith("cycle"):
            print(f"-- {workload}")
            table(rows, against, "cycle")
        else:
            print(f"-- {workload}, the synchronous form; ÷ job: to the {against} on the same node")
            table(rows, "job", "call")
    if "pygeoapi" not in labels:
        return
    print("-- cycles/s ÷ pygeoapi's (issue 36's target: ≥ 10 at 8 clients)")
    for n in clients:
        peer = figures["pygeoapi", "cycle", n]
        ratios = ", ".join(
            f"{label} {figures[label, 'cycle', n]['rate'] / peer['rate']:.1f}"
            for label in labels
            if label != "pygeoapi"
        )
        print(f"{n:>7}  {ratios}   (pygeoapi: {peer['polls']:.2f} polls a cycle)")
    sys.stdout.flush()


def profile(tree, seconds, workload="cycle", clients=8):
    spy = shutil.which("py-spy", path=os.path.dirname(sys.executable)) or shutil.which("py-spy")
    if spy is None:
        print("\nprofile: py-spy is missing (.venv/bin/pip install py-spy); skipped")
        return
    with tempfile.TemporaryDirectory() as folder:
        server = start(tree, folder)
        try:
            names = kinds(server)
            stop, window, latencies, errors = threading.Event(), [None, None], [], []
            step = WORKLOADS[workload][0]
            threads = load(server.port, clients, stop, window, latencies, errors, step)
            time.sleep(2)
            spies = {
                pid: subprocess.Popen(
                    [spy, "record", "--gil", "--format", "raw", "--duration", str(seconds)]
                    + ["--output", os.path.join(folder, f"{pid}.txt"), "--pid", str(pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for pid, kind in names.items()
                if kind in KINDS
            }
            failures = {pid: p.communicate(timeout=seconds + 60)[1] for pid, p in spies.items()}
            stop.set()
            for thread in threads:
                thread.join(70)
            own = collections.defaultdict(collections.Counter)
            for pid in spies:
                path = os.path.join(folder, f"{pid}.txt")
                if spies[pid].returncode != 0 or not os.path.exists(path):
                    print(f"profile: py-spy on {names[pid]} {pid} failed: {failures[pid][-300:]}")
                    continue
                with open(path) as f:
                    for line in f:
                        stack, _, count = line.rstrip("\n").rpartition(" ")
                        if stack and count.isdigit():
                            own[names[pid]][_function(stack.split(";")[-1])] += int(count)
        finally:
            server.stop()
    print(f"\n=== profile: {tree.label}, {workload}, {clients} clients, {seconds} s", end="")
    print(", py-spy --gil, own time")
    for kind in KINDS:
        total = sum(own[kind].values())
        if not total:
            continue
        print(f"{kind} processes ({total} samples holding the GIL):")
        for function, count in own[kind].most_common(15):
            print(f"  {100 * count / total:5.1f} %  {function}")


def _function(frame):
    """``name (path:line)`` → ``name (path)`` with the path from its package on."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    name, path = match.groups()
    for marker in ("site-packages/", "/lib/python3", ROOT + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10, help="measured, per client count")
    parser.add_argument("--warmup", type=float, default=2, help="before each measure (s)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline-tree", metavar="PATH")
    parser.add_argument("--baseline-python", metavar="PATH")
    parser.add_argument("--sync", action="store_true", help="the synchronous forms too")
    parser.add_argument("--pygeoapi", action="store_true", help="pygeoapi's cycle too")
    parser.add_argument("--pygeoapi-venv", default=pygeoapi_peer.DEFAULT_VENV, metavar="PATH")
    parser.add_argument("--pygeoapi-app", choices=sorted(pygeoapi_peer.APPS), default="starlette")
    parser.add_argument(
        "--pygeoapi-pause",
        type=float,
        default=0,
        metavar="MS",
        help="between two polls of a job (default: none)",
    )
    parser.add_argument("--profile", type=int, metavar="SECONDS")
    parser.add_argument("--profile-workload", choices=list(WORKLOADS), default="cycle")
    parser.add_argument("--profile-clients", type=int, default=8)
    args = parser.parse_args()
    this = Tree("xruntime", ROOT, sys.executable)
    contenders = [
        Contender("floor", lambda folder: start(None, folder), "benchmarks/floor.py"),
        node("xruntime", this, args.sync),
    ]
    if args.baseline_tree:
        base = os.path.abspath(args.baseline_tree)
        venv_python = os.path.join(base, ".venv", "bin", "python")
        python = args.baseline_python or (
            venv_python if os.path.exists(venv_python) else sys.executable
        )
        contenders.append(node("baseline", Tree("baseline", base, python), args.sync))
    if args.pygeoapi:
        contenders.append(
            pygeoapi(args.pygeoapi_venv, args.pygeoapi_app, args.pygeoapi_pause / 1000)
        )
    for contender in contenders[1:]:
        print(f"{contender.label}: {contender.description}")
    print(f"client: 1 process, threads as clients; the machine has {os.cpu_count()} cores")
    labels = [contender.label for contender in contenders]
    measured = collections.defaultdict(list)  # (label, workload, n) → figures of each round
    for turn in range(args.rounds):
        figures = {}
        for contender in contenders if turn % 2 == 0 else contenders[::-1]:
            measures = [(w, step, n) for w, step in contender.steps.items() for n in args.clients]
            for group in [[one] for one in measures] if contender.fresh else [measures]:
                with tempfile.TemporaryDirectory() as folder:
                    server = contender.start(folder)
                    try:
                        for workload, step, n in group:
                            contender.after()  # counts from here on
                            key = (contender.label, workload, n)
                            figures[key] = measure(server, n, args.seconds, args.warmup, step)
                            figures[key].update(contender.after())
                            measured[key].append(figures[key])
                    finally:
                        server.stop()
        print(f"\n=== round {turn + 1}/{args.rounds}")
        report(figures, labels, args.clients)
    if args.rounds > 1:
        print(f"\n=== median of {args.rounds} rounds")
        report(
            {
                key: {k: statistics.median(f[k] for f in rounds) for k in rounds[0]}
                for key, rounds in measured.items()
            },
            labels,
            args.clients,
        )
    if args.profile:
        profile(this, args.profile, args.profile_workload, args.profile_clients)


if __name__ == "__main__":
    main()

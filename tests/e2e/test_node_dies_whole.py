"""A node dies whole (issue 33), through real processes: its main process killed with
SIGKILL, no process of the node is left and no job's body runs on; Ctrl-C (SIGINT to
the whole process group) or SIGTERM at any moment of its start ends it cleanly, with
no traceback from any process and no process left (``support.parent_death``,
``support.stop_signals``).

Every wait is for a condition, with generous bounds: these tests run beside others on
a loaded 2-core machine.  The issue's target for the first (1 s from the SIGKILL to no
process left) is measured and printed, and asserted with a margin (``GONE``).
"""

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.clients import make_client, start, wait_status
from tests.harness import ROOT, Server
from tests.processes import descendants, http_pids

#: s within which no process of a SIGKILLed node may be left (the target is 1 s).
GONE = 5.0
#: s within which a node stopped while it starts has exited, and its processes too.
STOP_BOUND = 20.0
#: What a clean stop never writes, from any process.
UNCLEAN = ("Traceback", "KeyboardInterrupt", "failed; restarting", "could not start", "ERROR")


def wait_for(condition, timeout, what):
    """Poll ``condition`` until it is true; answers the seconds it took."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.01)
    return time.monotonic() - began


def _stat(pid):
    """(state, process group, start time) of a process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[2]), int(fields[19])


def identities(pids):
    """{pid: start time}: a pid the system gives again later is another process."""
    found = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None:
            found[pid] = stat[2]
    return found


def left(processes):
    """Those of ``processes`` ({pid: start time}) that still run (a zombie does not)."""
    running = []
    for pid, started in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == started and stat[0] not in "ZX":
            running.append(pid)
    return running


def group(pgid):
    """The running processes of process group ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in "ZX":
                found.append(int(entry))
    return found


def cmdlines(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().replace(b"\0", b" ").decode()
            out.append(f"{pid}: {words[:120]}")
        except OSError:
            pass
    return out


# ---------------------------------------------------------------- SIGKILL


def test_a_node_killed_with_sigkill_leaves_no_process_and_no_job_running(fresh_server, tmp_path):
    """Two jobs running (XDemo, reporting progress: its worker would find the pipe
    broken; a body that beats into a file in silence: only its process's end stops it),
    the callbacks process up: SIGKILL to the main process, and within GONE s every
    process the node had is gone (workers, HTTP process, callbacks process, resource
    tracker), the beats stop, and no worker blamed its service."""
    srv = fresh_server(
        env={"XRUNTIME_SERVICE_MODULES": "tests.fixtures.heartbeat"},
        extra='\n[callbacks]\nallowed = ["http://127.0.0.1:9/"]\n',
    ).start()
    client = make_client("json", srv.base)
    beats = tmp_path / "beats"
    beating = client.call("XHeartbeat", "startBeat", {"path": str(beats), "seconds": 300})["id"]
    demo = start(client, durationMs=300_000, steps=1500)["id"]
    for job in (beating, demo):
        wait_status(client, job, "RUNNING")
    wait_for(lambda: beats.exists() and beats.stat().st_size > 0, 30, "the body beats")
    wait_for(lambda: "callbacks process is up" in srv.log(), 30, "the callbacks process is up")
    node = srv.proc.pid
    processes = identities(descendants(node))
    # 2 workers, the HTTP process, the callbacks process, multiprocessing's resource tracker
    assert len(processes) >= 5, cmdlines(processes)

    killed_at, killed = time.time(), time.monotonic()
    os.kill(node, signal.SIGKILL)
    srv.proc.wait()
    try:
        wait_for(lambda: not left(processes), GONE, "the node's processes gone")
        took = time.monotonic() - killed
    finally:
        for pid in left(processes):  # (the assertion above failed: leave nothing behind)
            os.kill(pid, signal.SIGKILL)
    print(f"\nSIGKILL of the main process to no process of the node left: {took:.3f} s")

    size = beats.stat().st_size
    last_beat = beats.stat().st_mtime
    time.sleep(1.0)
    assert beats.stat().st_size == size, "the job's body went on after its node died"
    assert last_beat - killed_at < GONE
    log = srv.log()
    assert "raised" not in log and "Traceback" not in log, log


def test_the_processes_started_in_place_of_dead_ones_die_with_the_node_too(fresh_server):
    """Linux's signal comes when the *thread* that started a child ends: a worker that
    replaces a dead one is started by its slot's thread, an HTTP process that replaces
    a dead one by the main thread, both as long-lived as the node.  Killed with it."""
    srv = fresh_server(workers=1).start()  # (XCrashy: its job's mode "exit" ends its worker)
    client = make_client("json", srv.base)
    job = client.call("XCrashy", "startCrash", {"mode": "exit"})["id"]
    wait_status(client, job, "FAILED")
    wait_for(lambda: srv.log().count("started (pid") >= 2, 60, "a worker in place of the dead one")
    os.kill(http_pids(srv.port, srv.proc.pid)[0], signal.SIGKILL)
    wait_for(lambda: srv.log().count("HTTP process 0 is up") >= 2, 60, "another HTTP process")
    node = srv.proc.pid
    processes = identities(descendants(node))
    assert len(processes) >= 3, cmdlines(processes)  # a worker, an HTTP process, the tracker

    killed = time.monotonic()
    os.kill(node, signal.SIGKILL)
    srv.proc.wait()
    try:
        wait_for(lambda: not left(processes), GONE, "the node's processes gone")
    finally:
        for pid in left(processes):
            os.kill(pid, signal.SIGKILL)
    print(f"\nSIGKILL to no process left, replaced ones too: {time.monotonic() - killed:.3f} s")


# ---------------------------------------------------------------- stopped while it starts


def sigterm_caught(pid):
    """Whether the process has a handler for SIGTERM: the node's first lines have run
    (``support.stop_signals``), Python's own start is over."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next(line for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def serves(srv):
    """The node answers and its workers have started (as ``Server.start`` waits)."""
    try:
        answer = srv.session.post(srv.url("XRuntime", "getRuntimeInformation"), json={}, timeout=2)
    except (requests.ConnectionError, requests.Timeout):
        return False
    return answer.status_code == 200 and srv.log().count("started (pid") >= srv.workers


def stop_while_starting(folder, moment, sig, to_group):
    """Launch a node in a session of its own, send ``sig`` ``moment`` s after the launch
    (or once it serves: ``"serving"``) to its whole process group (as Ctrl-C does) or to
    its main process alone (as systemd's KillMode=mixed does), and check that it ends
    cleanly; answers the seconds from the signal to its exit."""
    srv = Server(str(folder))  # (its configuration, environment and log file)
    with open(srv.log_path, "ab") as out:
        launched = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "xruntime", "serve", "--config", srv.config],
            cwd=ROOT,
            env=srv.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal's job
        )
    try:
        # Not before the node's first line took the signals: in Python's own start
        # (under 0.1 s here, longer on a loaded machine) a Ctrl-C is Python's to print.
        wait_for(lambda: sigterm_caught(proc.pid) or proc.poll() is not None, 60, "started")
        if moment == "serving":
            wait_for(lambda: serves(srv) or proc.poll() is not None, 60, "serving")
        else:
            time.sleep(max(0.0, launched + moment - time.monotonic()))
        assert proc.poll() is None, srv.log()
        signalled = time.monotonic()
        if to_group:
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)
        try:
            code = proc.wait(STOP_BOUND)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"not stopped within {STOP_BOUND} s:\n{srv.log()}") from None
        took = time.monotonic() - signalled
        assert code == 0, srv.log()
        wait_for(lambda: not group(proc.pid), STOP_BOUND, "every process of the node ended")
        log = srv.log()
        for word in UNCLEAN:
            assert word not in log, log
        assert "signal SIG" in log  # (it did see the signal, at whatever step)
        return took
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # (a failed test leaves nothing behind)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.parametrize("moment", [0.1, 0.5, 1.0, 1.5, "serving"])
def test_ctrl_c_at_any_moment_of_the_start_ends_the_node_cleanly(tmp_path, moment):
    took = stop_while_starting(tmp_path / "node", moment, signal.SIGINT, to_group=True)
    print(f"\nCtrl-C at {moment}: exited {took:.2f} s later")


@pytest.mark.parametrize("moment", [0.5, 1.5, "serving"])
def test_sigterm_at_any_moment_of_the_start_ends_the_node_cleanly(tmp_path, moment):
    took = stop_while_starting(tmp_path / "node", moment, signal.SIGTERM, to_group=False)
    print(f"\nSIGTERM at {moment}: exited {took:.2f} s later")


# ---------------------------------------------------------------- one child, its parent


def late_child(marker):
    """A child whose parent is gone before it asks to die with it."""
    from xruntime.support.parent_death import die_with_parent

    parent = multiprocessing.parent_process()
    assert parent is not None
    deadline = time.monotonic() + 60
    while os.getppid() == parent.pid and time.monotonic() < deadline:
        time.sleep(0.01)  # until the parent, which exits at once, is gone
    die_with_parent()
    with open(marker, "w") as f:
        f.write("survived")
    time.sleep(60)


def deaf_child(marker):
    from xruntime.support.parent_death import die_with_parent

    die_with_parent()
    with open(marker, "w") as f:
        f.write("entered")
    time.sleep(60)


def run_parent(code, *args):
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_child_whose_parent_died_before_it_asked_exits_at_once(tmp_path):
    """The race of PR_SET_PDEATHSIG: asked for after the parent died, it never fires;
    the child sees that its parent is not the one that started it, and exits."""
    marker = tmp_path / "survived"
    done = run_parent(
        "import multiprocessing, os, sys\n"
        "from tests.e2e.test_node_dies_whole import late_child\n"
        "spawn = multiprocessing.get_context('spawn')\n"
        "child = spawn.Process(target=late_child, args=(sys.argv[1],))\n"
        "child.start()\n"
        "print(child.pid, flush=True)\n"
        "os._exit(0)\n",
        marker,
    )
    pid = int(done.stdout)
    processes = identities([pid])
    wait_for(lambda: not left(processes), 30, "the orphan exits")
    assert not marker.exists()


def test_a_child_is_deaf_to_ctrl_c_from_its_start_and_dies_with_its_parent(tmp_path):
    """SIGINT every 10 ms from the moment it is started (while Python starts and imports:
    blocked, inherited from the starting thread) and after its entry (ignored): the
    child lives on, without a word; then its parent ends, and so does it."""
    marker = tmp_path / "entered"
    done = run_parent(
        "import multiprocessing, os, signal, sys, time\n"
        "from tests.e2e.test_node_dies_whole import deaf_child\n"
        "from xruntime.support.parent_death import start_child\n"
        "spawn = multiprocessing.get_context('spawn')\n"
        "child = spawn.Process(target=deaf_child, args=(sys.argv[1],))\n"
        "start_child(child)\n"
        "deadline = time.monotonic() + 60\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
        "    os.kill(child.pid, signal.SIGINT)\n"
        "    time.sleep(0.01)\n"
        "for _ in range(20):\n"
        "    os.kill(child.pid, signal.SIGINT)\n"
        "    time.sleep(0.01)\n"
        "time.sleep(0.2)\n"
        "print(child.pid, child.is_alive(), flush=True)\n"
        "os._exit(0)\n",
        marker,
    )
    pid, alive = done.stdout.split()
    assert marker.exists() and alive == "True", done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    processes = identities([int(pid)])
    wait_for(lambda: not left(processes), 30, "the child dies with its parent")


def test_a_worker_whose_node_is_gone_exits_quietly(tmp_path):
    """Its pipe to the node broken, a worker's progress (or outcome) does not raise into
    the service's function (which logged it as the service's error): one line, exit."""
    done = run_parent(
        "import ctypes, multiprocessing\n"
        "from xruntime.engine.worker import WorkerJobContext\n"
        "from xruntime.protocol.types import BulkProgress\n"
        "from xruntime.support.logs import setup_logging\n"
        "setup_logging()\n"
        "mine, theirs = multiprocessing.Pipe()\n"
        "theirs.close()\n"
        "job = WorkerJobContext(mine, 'a-job', multiprocessing.Event(), ctypes.c_int(0))\n"
        "job.report_progress(BulkProgress(remaining=1, successful=0, failed=0))\n"
        "print('went on', flush=True)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "went on" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the node is gone" in lines[0], done.stderr
    assert "WARNING" in lines[0] or "INFO" in lines[0]

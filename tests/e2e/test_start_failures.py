"""A process of a node that cannot start is started a bounded number of times, then
the node stops with its error (issue 31): never an endless restart loop.  One that
crashes after it has served is replaced, as often as that happens."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.harness import ROOT, Server, free_port, write_config
from tests.processes import descendants
from xruntime.engine.process import START_ATTEMPTS

#: s the node gets to give up and exit (it takes a few: START_ATTEMPTS process starts).
BOUND = 60


def serve_failing(folder, fail_in):
    """Run a node whose processes named ``fail_in…`` cannot import a service, until it
    exits (at most BOUND s); answers its exit status, its stderr and the seconds it ran."""
    config = write_config(folder, free_port(), workers=1)
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "XRUNTIME_SERVICE_MODULES": "tests.fixtures.fails_to_start",
        "XRUNTIME_TEST_FAIL_START": fail_in,
    }
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "xruntime", "serve", "--config", config],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # (its stderr ends when the node and every process it started have ended)
        _, stderr = proc.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, stderr = proc.communicate()
        pytest.fail(f"the node did not exit within {BOUND} s:\n{stderr[-5000:]}")
    return proc.returncode, stderr, time.monotonic() - began


@pytest.mark.parametrize(
    ("fail_in", "process"),
    [("xruntime-http", "HTTP process 0"), ("xruntime-worker", "worker 0")],
)
def test_a_process_that_cannot_start_stops_the_node_with_its_error(tmp_path, fail_in, process):
    code, stderr, took = serve_failing(str(tmp_path / "node"), fail_in)
    assert code == 1, stderr[-5000:]
    assert took < BOUND
    gave_up = [line for line in stderr.splitlines() if "times in a row" in line]
    assert len(gave_up) == 1, stderr[-5000:]
    assert f"stopped: {process} could not start, {START_ATTEMPTS} times in a row: " in gave_up[0]
    assert f"ValueError: XFailsToStart cannot start in {fail_in}-0" in gave_up[0]
    # the first start and START_ATTEMPTS - 1 more, each announced
    assert stderr.count("starting another") == START_ATTEMPTS - 1, stderr[-5000:]
    assert "serving on http://" in stderr  # (the main process did start)


def test_processes_that_crash_after_serving_are_replaced_every_time(tmp_path):
    srv = Server(str(tmp_path / "node"), workers=1).start()
    try:
        for crashes in range(1, START_ATTEMPTS + 2):
            pid = int(re.findall(r"HTTP process 0 is up \(pid (\d+)\)", srv.log())[-1])
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while srv.log().count("HTTP process 0 is up") <= crashes:
                assert time.monotonic() < deadline, "no HTTP process replaced the killed one"
                assert srv.proc.poll() is None, srv.log()
                time.sleep(0.1)
            job = srv.call("XCrashy", "startCrash", {"mode": "exit"})
            assert srv.wait_done(job["id"])["status"] == "FAILED"
        assert srv.call("XRuntime", "getRuntimeInformation", {})
        log = srv.log()
        assert log.count("starting another") >= START_ATTEMPTS + 1
        assert "could not start" not in log
    finally:
        assert srv.stop() == 0

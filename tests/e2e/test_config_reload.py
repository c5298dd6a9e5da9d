"""The administrator's file on a running server (docs/protocol.md §5, §8): valid edits in
force within 2 s, invalid ones changing nothing and logged with their lines, restart
keys kept until the next restart, SIGHUP re-reading at once; and the command line
refusing invalid files (``serve``, ``check-config``)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
import requests

from tests.harness import ROOT, Server, free_port, write_config
from tests.processes import _children

IN_FORCE = 2.0  # s: a valid edit is in force this soon after the write (§5)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One node (one worker) whose file the tests edit; each test starts from BASE."""
    srv = Server(str(tmp_path_factory.mktemp("reload")), workers=1).start()
    yield srv
    srv.stop()


def env():
    return dict(os.environ, PYTHONPATH=ROOT, XRUNTIME_SERVICE_MODULES="tests.fixtures.crashy")


# ---------------------------------------------------------------------------- helpers


def config_text(srv, extra="", port=None, workers=None):
    """The file as the harness writes it: [server], [database], [workers], then ``extra``."""
    scratch = os.path.join(srv.folder, "edit")
    path = write_config(scratch, port or srv.port, extra=extra, workers=workers or srv.workers)
    with open(path) as f:
        return f.read()


def rewrite(srv, text):
    """Replace the file as a whole: written aside, then renamed in place."""
    scratch = os.path.join(srv.folder, "edit", "next.toml")
    with open(scratch, "w") as f:
        f.write(text)
    os.replace(scratch, srv.config)


def count(srv, text):
    return srv.log().count(text)


def wait_log(srv, text, seen, timeout=IN_FORCE):
    """Wait until ``text`` occurs in the log more than ``seen`` times."""
    deadline = time.time() + timeout
    while count(srv, text) <= seen:
        assert time.time() < deadline, (
            f"{text!r} not logged within {timeout} s:\n{srv.log()[-3000:]}"
        )
        time.sleep(0.05)


def apply(srv, extra="", **kwargs):
    """Rewrite the file and wait until the server has read it."""
    seen = count(srv, f"{srv.config}: reloaded") + count(srv, f"{srv.config}: re-read")
    rewrite(srv, config_text(srv, extra, **kwargs))
    deadline = time.time() + IN_FORCE
    while count(srv, f"{srv.config}: reloaded") + count(srv, f"{srv.config}: re-read") == seen:
        assert time.time() < deadline, f"the edit was not read:\n{srv.log()[-3000:]}"
        time.sleep(0.05)


def xdemo_served(srv) -> bool:
    """Ask XDemo something that changes nothing: fetch an id that does not exist."""
    r = srv.post("XDemo", "fetchSimulateResponse", {"id": str(uuid.uuid4())})
    if r.status_code == 404:
        assert r.json()["faultInfo"]["$type"] == "UnknownJobFault"
        return True
    assert r.status_code == 503, (r.status_code, r.text)
    assert r.json()["faultInfo"] == {
        "$type": "ServiceNotConfiguredFault",
        "service": "XDemo",
        "hint": r.json()["faultInfo"]["hint"],
    }
    return False


def crashy_served(srv) -> bool:
    r = srv.post("XCrashy", "fetchCrashResponse", {"id": str(uuid.uuid4())})
    assert r.status_code in (404, 503), (r.status_code, r.text)
    return r.status_code == 404


def wsdl_status(srv, service="XDemo"):
    return requests.get(f"{srv.base}/services/ws/{service}?wsdl", timeout=10).status_code


def in_force(predicate) -> bool:
    """Whether ``predicate`` holds within IN_FORCE: the main process logs the reload
    (what ``apply`` waits for) before its HTTP processes, told through their pipes, have
    the new settings (an assert right after ``apply`` failed in a CI run)."""
    return until(predicate, IN_FORCE) is not None


def until(predicate, timeout):
    """Poll ``predicate`` every 50 ms; answers the seconds it took to hold, or None."""
    t0 = time.time()
    while time.time() < t0 + timeout:
        if predicate():
            return time.time() - t0
        time.sleep(0.05)
    return None


def line_of(text, start):
    """The 1-based number of the (only) line of ``text`` that starts with ``start``."""
    found = [n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(start)]
    assert len(found) == 1, (start, found)
    return found[0]


# ---------------------------------------------------------------------------- valid edits


def test_switching_a_service_off_and_on_is_in_force_within_2_s(server):
    srv = server
    apply(srv)
    assert in_force(lambda: xdemo_served(srv) and wsdl_status(srv) == 200)
    rewrite(srv, config_text(srv, "[services.XDemo]\nenabled = false\n"))
    took = until(lambda: not xdemo_served(srv), IN_FORCE + 3)
    assert took is not None and took <= IN_FORCE, f"in force after {took} s"
    # every operation of it, start included, and its WSDL
    r = srv.post("XDemo", "startSimulate", {"durationMs": 0})
    assert r.status_code == 503 and r.json()["faultInfo"]["$type"] == "ServiceNotConfiguredFault"
    assert r.json()["faultInfo"]["service"] == "XDemo"
    r = srv.post("XDemo", "simulate", {})
    assert r.status_code == 503 and r.json()["faultInfo"]["$type"] == "ServiceNotConfiguredFault"
    assert wsdl_status(srv) == 404
    rpc = srv.session.post(
        f"{srv.base}/services/rpc/XDemo",
        timeout=10,
        json={"jsonrpc": "2.0", "method": "startSimulate", "params": {}, "id": 1},
    ).json()
    assert rpc["error"]["data"]["$type"] == "ServiceNotConfiguredFault", rpc
    # the other services are still served
    assert crashy_served(srv) and wsdl_status(srv, "XCrashy") == 200
    assert srv.watch(str(uuid.uuid4()))["status"] == "UNKNOWN"

    rewrite(srv, config_text(srv, "[services.XDemo]\nenabled = true\n"))
    took = until(lambda: xdemo_served(srv), IN_FORCE + 3)
    assert took is not None and took <= IN_FORCE, f"in force after {took} s"
    assert wsdl_status(srv) == 200
    assert srv.wait_done(srv.start_job(durationMs=0)["id"])["status"] == "SUCCEEDED"


def test_lowering_max_queued_is_in_force_within_2_s(server):
    srv = server
    apply(srv)
    blocker = srv.start_job(durationMs=60000, steps=60)
    srv.wait_status(blocker["id"], "RUNNING")
    created = []
    try:
        rewrite(srv, config_text(srv, "[jobs]\nmax_queued = 1\n"))
        t0 = time.time()
        while True:
            r = srv.post("XDemo", "startSimulate", {"durationMs": 0})
            if r.status_code == 503:
                break
            assert r.status_code == 200, r.text
            created.append(r.json()["id"])
            assert time.time() - t0 <= IN_FORCE, "max_queued = 1 was not in force within 2 s"
            time.sleep(0.05)
        assert time.time() - t0 <= IN_FORCE
        assert r.json()["faultInfo"]["$type"] == "QueueOverflowFault", r.text
        # only QUEUING jobs count: one queued, one running → one more is refused
        for job_id in created[1:]:
            srv.call("XRuntime", "deleteJob", {"id": job_id})
        created = created[:1]
        if not created:
            created.append(srv.start_job(durationMs=0)["id"])
        assert srv.post("XDemo", "startSimulate", {"durationMs": 0}).status_code == 503
        # raised again: accepted again
        apply(srv, "[jobs]\nmax_queued = 3\n")
        created.append(srv.start_job(durationMs=0)["id"])
    finally:
        for job_id in created + [blocker["id"]]:
            srv.call("XRuntime", "deleteJob", {"id": job_id})
    apply(srv)


# ---------------------------------------------------------------------------- invalid edits


def test_invalid_edit_changes_nothing_and_names_each_line(server):
    srv = server
    apply(srv, "[services.XCrashy]\nenabled = false\n")
    assert in_force(lambda: xdemo_served(srv) and not crashy_served(srv))

    # wrong type, unknown key, an impossible value; and two changes that would be
    # visible if any of the file were applied: XDemo off, XCrashy back on
    bad = config_text(
        srv,
        textwrap.dedent("""\
        [jobs]
        max_queued = "many"
        unfetched_retention = "48h"
        frobnicate = 1
        fetched_retention = "-5m"

        [services.XDemo]
        enabled = false
        """),
    )
    lines = {key: line_of(bad, key) for key in ("max_queued", "frobnicate", "fetched_retention")}
    refused = count(srv, "the edit is not applied")
    rewrite(srv, bad)
    wait_log(srv, "the edit is not applied", refused)
    log = srv.log()
    for key, n in lines.items():
        assert any(f"line {n}:" in entry and key in entry for entry in log.splitlines()), (
            f"no log line names line {n} ({key}):\n{log[-3000:]}"
        )
    # the previous settings stay in force, now and after another poll or two
    time.sleep(1.0)
    assert xdemo_served(srv), "an invalid edit switched XDemo off"
    assert not crashy_served(srv), "an invalid edit switched XCrashy back on"
    assert wsdl_status(srv) == 200 and wsdl_status(srv, "XCrashy") == 404
    assert srv.proc.poll() is None

    # not TOML at all: the line of the syntax error
    broken = config_text(srv, "[jobs]\nmax_queued = 5\n[services.XDemo\nenabled = false\n")
    n = line_of(broken, "[services.XDemo")
    refused = count(srv, "the edit is not applied")
    rewrite(srv, broken)
    wait_log(srv, "the edit is not applied", refused)
    assert f"line {n}: not valid TOML" in srv.log(), srv.log()[-2000:]
    assert xdemo_served(srv) and not crashy_served(srv)

    # a valid edit afterwards is applied as usual
    apply(srv)
    assert in_force(lambda: xdemo_served(srv) and crashy_served(srv))


def test_restart_key_change_is_logged_and_the_server_keeps_its_port(server):
    srv = server
    apply(srv)
    other = free_port()
    seen = count(srv, "takes effect at the next restart")
    # the port and the worker count need a restart; XDemo off applies at once
    rewrite(srv, config_text(srv, "[services.XDemo]\nenabled = false\n", port=other, workers=2))
    took = until(lambda: not xdemo_served(srv), IN_FORCE + 3)
    assert took is not None and took <= IN_FORCE, "the live part of the edit was not applied"
    wait_log(srv, "takes effect at the next restart", seen + 1)
    log = srv.log()
    assert (
        f"port changed to {other}; it takes effect at the next restart (running with {srv.port})"
        in log
    )
    assert "workers changed to 2; it takes effect at the next restart (running with 1)" in log
    # still serving on its port, nothing on the new one
    assert srv.watch(str(uuid.uuid4()))["status"] == "UNKNOWN"
    with pytest.raises(requests.ConnectionError):
        requests.post(
            f"http://127.0.0.1:{other}/services/rs/XRuntime/getRuntimeInformation",
            json={},
            timeout=2,
        )
    # still one worker: two 1 s jobs run one after the other
    apply(srv, port=other, workers=2)
    assert in_force(lambda: xdemo_served(srv))
    t0 = time.time()
    jobs = [srv.start_job(durationMs=800) for _ in range(2)]
    for job in jobs:
        assert srv.wait_done(job["id"])["status"] == "SUCCEEDED"
    assert time.time() - t0 >= 1.6, "the worker count changed without a restart"
    apply(srv)


# ---------------------------------------------------------------------------- SIGHUP


def test_sighup_rereads_at_once_and_keeps_the_workers(server):
    srv = server
    on = config_text(srv, "[services.XDemo]\nenabled = true \n")
    off = config_text(srv, "[services.XDemo]\nenabled = false\n")
    assert len(on) == len(off)
    apply(srv, "[services.XDemo]\nenabled = true \n")
    job = srv.start_job(durationMs=2500, steps=5)
    srv.wait_status(job["id"], "RUNNING")
    helpers = set(_children(srv.proc.pid))
    assert helpers

    # an edit the file watch cannot see: same size, same inode, same modification time
    st = os.stat(srv.config)
    with open(srv.config, "r+") as f:
        f.write(off)
    os.utime(srv.config, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(srv.config).st_ino == st.st_ino
    time.sleep(1.2)
    assert xdemo_served(srv), "the test's edit was seen without SIGHUP"

    os.kill(srv.proc.pid, signal.SIGHUP)
    took = until(lambda: not xdemo_served(srv), 3)
    assert took is not None and took < 0.5, f"SIGHUP re-read the file after {took} s"
    # nothing was killed: the server, its worker, the job started before
    assert srv.proc.poll() is None
    assert set(_children(srv.proc.pid)) == helpers
    done = srv.wait_done(job["id"])
    assert done["status"] == "SUCCEEDED" and done["progress"]["successful"] == 5, done

    # SIGHUP without a change: re-read, nothing changes, nothing dies
    with open(srv.config, "r+") as f:
        f.write(on)
    os.utime(srv.config, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.kill(srv.proc.pid, signal.SIGHUP)
    assert until(lambda: xdemo_served(srv), 3) is not None
    seen = count(srv, "nothing that applies live has changed")
    os.kill(srv.proc.pid, signal.SIGHUP)
    wait_log(srv, "nothing that applies live has changed", seen, timeout=1.0)
    assert srv.proc.poll() is None and set(_children(srv.proc.pid)) == helpers
    r = srv.post("XDemo", "fetchSimulateResponse", {"id": job["id"]})
    assert r.status_code == 200 and r.json()["stepsDone"] == 5, r.text
    after = srv.start_job(durationMs=0)
    assert srv.wait_done(after["id"])["status"] == "SUCCEEDED"


# ---------------------------------------------------------------------------- command line


def run_cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "xruntime", *args],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_serve_refuses_to_start_on_an_invalid_file(tmp_path):
    port = free_port()
    path = write_config(
        str(tmp_path), port, extra='[jobs]\nfetched_retention = "soon"\nmax_queued = -1\n'
    )
    with open(path) as f:
        text = f.read()
    done = run_cli("serve", "--config", path)
    assert done.returncode != 0, done
    for key in ("fetched_retention", "max_queued"):
        n = line_of(text, key)
        assert any(f"line {n}:" in entry and key in entry for entry in done.stderr.splitlines()), (
            n,
            done.stderr,
        )
    with pytest.raises(requests.ConnectionError):
        requests.post(
            f"http://127.0.0.1:{port}/services/rs/XRuntime/getRuntimeInformation",
            json={},
            timeout=2,
        )


BROKEN = {
    # kind: (file text, [(line, what the error names)] in line order)
    "unknown key": (
        """\
        # a comment first
        [jobs]
        unfetched_retention = "1h"
        retention = "1h"
        """,
        [(4, "retention")],
    ),
    "wrong type": (
        """\
        [server]
        port = 8080

        [workers]
        count = "two"
        """,
        [(5, "count")],
    ),
    "negative duration": (
        """\
        [jobs]
        max_queued = 5
        queueing_timeout = "-5s"
        computation_timeout = -1
        """,
        [(3, "queueing_timeout"), (4, "computation_timeout")],
    ),
    "not a duration": (
        """\
        [jobs]

        fetched_retention = "soon"
        """,
        [(3, "fetched_retention")],
    ),
    "not TOML": (
        """\
        [server]
        port = 8080
        host = "127.0.0.1
        """,
        [(3, "not valid TOML")],
    ),
    "unknown table": (
        """\
        [jobs]
        max_queued = 5

        [logging]
        level = "debug"
        """,
        [(4, "logging")],
    ),
    "database url": (
        """\
        [database]
        url = "sqlit:///data/xruntime.db"
        """,
        [(2, "url")],
    ),
    "duration without a unit": (
        """\
        [jobs]
        queueing_timeout = 5000
        """,
        [(2, "queueing_timeout")],
    ),
    "unknown service": (
        """\
        [services.XDemo]
        enabled = true

        [services.XNope]
        enabled = false
        """,
        [(4, "XNope")],
    ),
    "out of range": (
        """\
        [server]
        host = "127.0.0.1"
        port = 70000
        threads = 0
        """,
        [(3, "port"), (4, "threads")],
    ),
    "not a boolean": (
        """\
        [services.XDemo]
        max_queued = 3
        enabled = "yes"
        """,
        [(3, "enabled")],
    ),
    "zero cleanup interval": (
        """\
        [jobs]
        cleanup_interval = "0"
        """,
        [(2, "cleanup_interval")],
    ),
}


def test_check_config_names_the_line_of_each_error(tmp_path):
    procs = {}
    for kind, (text, _) in BROKEN.items():
        path = tmp_path / (kind.replace(" ", "_") + ".toml")
        path.write_text(textwrap.dedent(text))
        procs[kind] = (
            str(path),
            subprocess.Popen(
                [sys.executable, "-m", "xruntime", "check-config", str(path)],
                cwd=ROOT,
                env=env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
    for kind, (path, proc) in procs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0, (kind, out, err)
        expected = BROKEN[kind][1]
        errors = [entry for entry in (out + err).splitlines() if "line " in entry]
        assert len(errors) == len(expected), (kind, out, err)
        for entry, (n, name) in zip(errors, expected, strict=True):
            assert f"line {n}:" in entry and name in entry, (kind, n, entry)
            assert path in entry, (kind, entry)


@pytest.mark.parametrize(
    "url, cause",
    [
        ("sqlite:////proc/xruntime/data/xruntime.db", "cannot open the SQLite file"),
        (
            "postgresql+psycopg://postgres@127.0.0.1:5432/xruntime_no_such_database",
            "does not exist",
        ),
    ],
)
def test_a_database_the_node_cannot_use_is_one_line_naming_the_key(tmp_path, url, cause):
    """``serve`` exits 2 with one line that names ``[database] url`` and the database's
    own reason, no traceback, nothing listening; ``check-config --connect`` says the
    same (exit 1), and plain ``check-config`` (no connection) passes."""
    if url.startswith("postgresql") and not os.environ.get("XRUNTIME_TEST_DATABASE_URL"):
        pytest.skip("XRUNTIME_TEST_DATABASE_URL is not set")
    port = free_port()
    path = write_config(str(tmp_path), port, database_url=url)
    done = run_cli("serve", "--config", path)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [entry for entry in done.stderr.splitlines() if "ERROR" in entry]
    assert "[database] url: " in line and cause in line, line
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
    checked = run_cli("check-config", path, "--connect")
    assert checked.returncode == 1, checked
    assert "[database] url: " in checked.stdout and cause in checked.stdout, checked.stdout
    assert run_cli("check-config", path).returncode == 0


def test_check_config_connects_to_a_database_it_can_use(tmp_path):
    path = write_config(str(tmp_path), free_port())
    done = run_cli("check-config", path, "--connect")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "[database] url: SQLite file " in done.stdout, done.stdout
    assert "no xruntime tables yet" in done.stdout, done.stdout


def test_check_config_accepts_the_shipped_file():
    done = run_cli("check-config", os.path.join("config", "xserver.toml"))
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "OK" in done.stdout


# ---------------------------------------------------------------------------- emptied or gone


@pytest.mark.parametrize("damage", ["truncated", "comments only", "removed"])
def test_an_emptied_or_vanished_file_keeps_the_settings_in_force(server, damage):
    srv = server
    apply(srv, "[services.XDemo]\nenabled = false\n")
    assert in_force(lambda: not xdemo_served(srv))
    try:
        seen = count(srv, f"{srv.config}: the file is empty") + count(
            srv, f"{srv.config}: cannot be read"
        )
        if damage == "removed":
            os.remove(srv.config)
        else:
            with open(srv.config, "w") as f:  # as an editor that truncates first
                f.write("" if damage == "truncated" else "# being edited\n")
        os.kill(srv.proc.pid, signal.SIGHUP)  # seen at once, whatever the stamp says
        deadline = time.time() + IN_FORCE
        while (
            count(srv, f"{srv.config}: the file is empty")
            + count(srv, f"{srv.config}: cannot be read")
            == seen
        ):
            assert time.time() < deadline, f"not logged:\n{srv.log()[-2000:]}"
            time.sleep(0.05)
        time.sleep(0.3)
        assert not xdemo_served(srv), "the settings in force must stay, not all defaults"
    finally:
        # One valid write after the damage, and only one: writing the old text back
        # first let its "re-read" answer apply() before the base file was read.
        apply(srv)
    assert in_force(lambda: xdemo_served(srv)), "a valid file written after the damage is in force"

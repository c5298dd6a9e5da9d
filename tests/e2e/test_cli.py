"""The command-line client (``xruntime start/watch/fetch/stop/delete/jobs``) against a
real node: run as a person runs it, in its own process, on a pseudo-terminal (a rich
progress bar) or piped (plain lines), with the exit codes a script reads."""

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from tests.e2e.test_accounts import accounts_toml, creds
from tests.harness import ROOT, Server, free_port

ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cli_env(server=None, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XRUNTIME_")}
    env.update(PYTHONPATH=ROOT, **extra)
    if server is not None:
        env["XRUNTIME_URL"] = server.base
    return env


def run(server, *args, env=None, input=None, timeout=60):
    """The command piped: (exit code, stdout, stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "xruntime", *args],
        cwd=ROOT,
        input=input,
        env=env or cli_env(server),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout, done.stderr


def run_on_terminal(server, *args, timeout=60):
    """The command on a pseudo-terminal (stdout and stderr both), as in a shell:
    (exit code, everything it wrote, escape sequences included)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "xruntime", *args],
        cwd=ROOT,
        env=cli_env(server, TERM="xterm-256color", COLUMNS="100"),
        stdin=follower,
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    output = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=10), output.decode("utf-8", "replace")


def start(server, **request):
    code, out, err = run(server, "start", "XDemo", "startSimulate", "--json", json.dumps(request))
    assert code == 0, err
    return out.strip()


def test_start_wait_on_a_terminal_draws_a_bar_then_prints_the_result(server):
    code, output = run_on_terminal(
        server,
        "start",
        "XDemo",
        "simulate",
        "--wait",
        "--json",
        '{"durationMs": 2000, "steps": 5, "resultSize": 7}',
    )
    assert code == 0, output
    assert "━" in output, "a progress bar is drawn"
    assert "\r" in output and "\x1b[2K" in output, "the bar is redrawn in place"
    text = ESCAPE.sub("", output)
    assert "RUNNING" in text and "SUCCEEDED" in text
    moved = {int(n) for n in re.findall(r"\b([1-4])/5\b", text)}
    assert len(moved) >= 2, f"the bar moves through the steps: {sorted(moved)}"
    result = json.loads(text[text.index("{") :].replace("\r\n", "\n"))
    assert result["stepsDone"] == 5 and len(result["payload"]) == 7


def test_start_wait_piped_prints_plain_lines_and_only_the_result_on_stdout(server):
    code, out, err = run(
        server,
        "start",
        "XDemo",
        "startSimulate",
        "--wait",
        "--json",
        '{"durationMs": 1200, "steps": 4, "resultSize": 3}',
    )
    assert code == 0, err
    assert json.loads(out) == {"stepsDone": 4, "payload": json.loads(out)["payload"]}
    assert len(json.loads(out)["payload"]) == 3
    assert "\x1b" not in err and "━" not in err, "no terminal drawing when piped"
    lines = err.splitlines()
    assert lines[0].startswith("QUEUING") or lines[0].startswith("RUNNING")
    assert any(re.match(r"RUNNING [1-3]/4 \(\d+\.\d s\)$", line) for line in lines), lines
    assert re.match(r"SUCCEEDED 4/4 \(\d+\.\d s\)$", lines[-1]), lines
    assert len(lines) == len(set(lines)), "a line only for a change"


def test_start_prints_the_id_and_watch_fetch_delete_follow_it(server, tmp_path):
    job_id = start(server, durationMs=600, steps=2, resultSize=5)
    assert re.fullmatch(r"[0-9a-f-]{36}", job_id)
    code, out, err = run(server, "watch", job_id)
    assert code == 0, err
    assert re.fullmatch(rf"{job_id} SUCCEEDED \d+\.\d s\n", out)
    assert server.watch(job_id)["status"] == "SUCCEEDED"
    assert not server.call("XRuntime", "listJobs", {})["jobs"][0]["fetched"], (
        "watching is not fetching"
    )
    code, out, err = run(server, "fetch", job_id, "-o", str(tmp_path / "result.json"))
    assert code == 0 and out == "", err
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["stepsDone"] == 2 and len(result["payload"]) == 5
    code, out, _ = run(server, "fetch", job_id)
    assert code == 0 and json.loads(out) == result
    code, out, _ = run(server, "delete", job_id)
    assert (code, out) == (0, f"{job_id} DELETED\n")
    code, out, err = run(server, "fetch", job_id)
    assert code == 1 and out == ""
    assert err.startswith("UnknownJobFault: ") and job_id in err


def test_fetch_finds_the_fetch_operation_of_another_service(server):
    job = server.call(
        "XDima",
        "startCreateDistanceMatrix",
        {
            "startLocations": [
                {"longitude": 8.4, "latitude": 49.0},
                {"longitude": 8.5, "latitude": 49.1},
            ]
        },
    )
    server.wait_done(job["id"])
    code, out, err = run(server, "fetch", job["id"])
    assert code == 0, err
    assert json.loads(out) == server.call("XDima", "fetchDistanceMatrixResponse", {"id": job["id"]})


def test_stop_keeps_the_intermediate_result(server):
    # a minute's job: the stop, a process started on a loaded machine, comes well before
    # its end (it ends the job at once)
    job_id = start(server, durationMs=60000, steps=60)
    server.wait_status(job_id, "RUNNING")
    while (
        server.watch(job_id, progressUpdatePeriod=250).get("progress", {}).get("successful", 0) < 1
    ):
        pass
    code, out, err = run(server, "stop", job_id)
    assert (code, out) == (0, f"{job_id} STOPPING\n"), err
    code, out, err = run(server, "watch", job_id)
    assert code == 0 and " SUCCEEDED " in out
    code, out, _ = run(server, "fetch", job_id)
    result = json.loads(out)
    assert 1 <= result["stepsDone"] < 60
    assert result["resultLimitations"][0]["reason"] == "REQUEST_STOPPED"


def test_a_failed_job_exits_1_with_its_fault_on_stderr(server):
    code, out, err = run(
        server,
        "start",
        "XDemo",
        "simulate",
        "--wait",
        "--json",
        '{"durationMs": 300, "steps": 3, "failAtStep": 2}',
    )
    assert code == 1 and out == ""
    assert err.splitlines()[-1].startswith("ProcessingFault: ")
    job_id = server.call("XRuntime", "listJobs", {"limit": 1})["jobs"][0]["id"]
    code, out, err = run(server, "watch", job_id)
    assert code == 1 and out.startswith(f"{job_id} FAILED ")


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["start", "XDemo", "simulate", "--json", '{"durationMs": "soon"}'],
            1,
            "InvalidValueFault: ",
        ),
        (
            ["start", "XDemo", "simulate", "--json", '{"durationMs": '],
            2,
            "xruntime: the request in --json is not JSON",
        ),
        (
            ["start", "XDemo", "simulate", "--json", "[1]"],
            2,
            "xruntime: the request in --json must be a JSON object",
        ),
        (
            ["start", "XDemo", "simulate", "no-such-file.json"],
            2,
            "xruntime: cannot read no-such-file.json",
        ),
        (["start", "XDemo", "noSuchOperation"], 1, "InvalidRequestFault: "),
        (["stop", "0bd3b5e4-2c4e-4d31-9fb3-2f1e3a0c0a11"], 1, "UnknownJobFault: "),
        (["watch", "0bd3b5e4-2c4e-4d31-9fb3-2f1e3a0c0a11"], 1, ""),
        (["jobs", "--status", "DONE"], 1, "InvalidValueFault: "),
        (["fetch"], 2, "usage: "),
    ],
)
def test_exit_codes_and_one_line_on_stderr(server, args, code, message):
    before = server.call("XRuntime", "getRuntimeInformation", {})["jobs"]
    got, out, err = run(server, *args)
    assert got == code, err
    assert err.startswith(message), err
    assert "Traceback" not in err
    if code == 1 and message:
        assert len(err.splitlines()) == 1
    assert server.call("XRuntime", "getRuntimeInformation", {})["jobs"] == before, (
        "nothing was stored"
    )


def test_no_server_exits_3(server):
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run(server, "jobs", "--url", url)
    assert code == 3 and out == ""
    assert err.startswith(f"xruntime: cannot reach {url}: ") and "Traceback" not in err
    code, _, err = run(None, "start", "XDemo", "simulate", env=cli_env(XRUNTIME_URL=url))
    assert code == 3, err


def test_the_request_from_a_file_and_from_stdin(server, tmp_path):
    (tmp_path / "request.json").write_text('{"durationMs": 100, "steps": 1, "resultSize": 4}')
    code, out, err = run(
        server, "start", "XDemo", "simulate", str(tmp_path / "request.json"), "--wait"
    )
    assert code == 0 and len(json.loads(out)["payload"]) == 4, err
    code, out, err = run(
        server,
        "start",
        "XDemo",
        "simulate",
        "-",
        "--wait",
        input='{"durationMs": 100, "steps": 1, "resultSize": 6}',
    )
    assert code == 0 and len(json.loads(out)["payload"]) == 6, err


def test_jobs_lists_newest_first_tab_separated_when_piped(server):
    ids = [start(server, durationMs=100, steps=2) for _ in range(3)]
    for job_id in ids:
        server.wait_done(job_id)
    code, out, err = run(server, "jobs", "--limit", "3")
    assert code == 0, err
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert header == [
        "id",
        "service",
        "operation",
        "status",
        "user",
        "queuedAt",
        "progress",
        "attempts",
        "fetched",
    ]
    assert [row[0] for row in rows] == ids[::-1]
    assert all(
        row[1:5] == ["XDemo", "simulate", "SUCCEEDED", "-"] and row[6] == "2/2" for row in rows
    )
    code, out, err = run(server, "jobs", "--limit", "3", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [job["id"] for job in listed] == ids[::-1]
    assert {job["status"] for job in listed} == {"SUCCEEDED"}
    # long enough to outlast the command's start on a loaded machine (deleted below)
    running = start(server, durationMs=120_000, steps=120)
    server.wait_status(running, "RUNNING")
    code, out, _ = run(server, "jobs", "--status", "running,queuing")
    assert [line.split("\t")[0] for line in out.splitlines()[1:]] == [running]
    run(server, "delete", running)
    code, out, _ = run(server, "jobs", "--limit", "0")
    assert len(out.splitlines()) - 1 == len(
        server.call("XRuntime", "listJobs", {"limit": 1000})["jobs"]
    )


def test_jobs_on_a_terminal_is_a_table_with_whole_ids(server):
    job_id = start(server, durationMs=100, steps=1)
    server.wait_done(job_id)
    code, output = run_on_terminal(server, "jobs", "--limit", "1")
    assert code == 0
    text = ESCAPE.sub("", output)
    assert "\t" not in text and job_id in text and "SUCCEEDED" in text
    assert re.search(r"\bqueued\b.*\n.*\b\d\d:\d\d:\d\d\b", text), text


@pytest.fixture(scope="module")
def accounts_server(tmp_path_factory):
    users = {"alice": {}, "bob": {}}
    srv = Server(
        str(tmp_path_factory.mktemp("accounts")), extra=accounts_toml(users), auth=creds("alice")
    ).start()
    yield srv
    srv.stop()


def test_credentials_from_options_and_the_environment(accounts_server):
    srv = accounts_server
    alice, token = creds("alice")
    code, out, err = run(srv, "jobs")
    assert code == 1 and err.startswith("AccessDeniedFault: ")
    code, out, err = run(
        srv,
        "start",
        "XDemo",
        "simulate",
        "--user",
        alice,
        "--token",
        token,
        "--json",
        '{"durationMs": 100}',
    )
    assert code == 0, err
    job_id = out.strip()
    as_alice = cli_env(srv, XRUNTIME_TOKEN=token)  # Bearer
    code, out, err = run(srv, "watch", job_id, env=as_alice)
    assert code == 0 and " SUCCEEDED " in out, err
    code, out, _ = run(srv, "jobs", env=as_alice)
    assert out.splitlines()[1].split("\t")[:5] == [
        job_id,
        "XDemo",
        "simulate",
        "SUCCEEDED",
        "alice",
    ]
    as_bob = cli_env(srv, XRUNTIME_USER="bob", XRUNTIME_TOKEN=creds("bob")[1])
    code, out, err = run(srv, "fetch", job_id, env=as_bob)
    assert code == 1 and err.startswith("UnknownJobFault: "), "another user's job is not there"
    code, out, _ = run(srv, "jobs", env=as_bob)
    assert out.splitlines()[1:] == []
    code, out, err = run(srv, "fetch", job_id, "--token", "wrong", env=as_alice)
    assert code == 1 and err.startswith("AccessDeniedFault: ")


# ------------------------------------------------------------------ credentials stay home


def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else(tmp_path):
    """benchmarks/abuse.py, item 7: urllib followed a redirect with the Authorization
    header, printed what the other host answered and exited 0. A redirect is now refused
    (exit 3), and the host it names never hears from the client."""
    import http.server
    import threading

    heard = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            heard.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"jobs": []}')

        do_GET = do_POST

        def log_message(self, *args):
            pass

    elsewhere = http.server.HTTPServer(("127.0.0.1", 0), Elsewhere)

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_port}{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args):
            pass

    redirecting = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    for s in (elsewhere, redirecting):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        env = cli_env(
            None,
            XRUNTIME_URL=f"http://127.0.0.1:{redirecting.server_port}",
            XRUNTIME_TOKEN="s3cret-token",
        )
        code, out, err = run(None, "jobs", env=env)
        assert code == 3, (code, out, err)
        assert "redirect" in err and "not followed" in err and out == ""
        assert heard == []
    finally:
        for s in (elsewhere, redirecting):
            s.shutdown()
            s.server_close()


def test_the_token_from_a_file(accounts_server, tmp_path):
    """--token-file (or $XRUNTIME_TOKEN_FILE) keeps the token out of the process list."""
    srv = accounts_server
    alice, token = creds("alice")
    path = tmp_path / "token"
    path.write_text(token + "\n")
    code, out, err = run(
        srv,
        "start",
        "XDemo",
        "simulate",
        "--user",
        alice,
        "--token-file",
        str(path),
        "--json",
        '{"durationMs": 0}',
    )
    assert code == 0, err
    code, out, err = run(srv, "watch", out.strip(), env=cli_env(srv, XRUNTIME_TOKEN_FILE=str(path)))
    assert code == 0 and " SUCCEEDED " in out, err
    code, out, err = run(srv, "jobs", "--token-file", str(tmp_path / "missing"))
    assert code == 2 and "cannot read the token file" in err


def test_a_token_over_plain_http_to_another_host_is_warned_about():
    from xruntime.client.json_client import plain_http_warning

    assert "plain HTTP" in plain_http_warning("http://jobs.example.org:50000", "t")
    for url in (
        "https://jobs.example.org",
        "http://127.0.0.1:50000",
        "http://localhost:1",
        "http://[::1]:5",
    ):
        assert plain_http_warning(url, "t") is None, url
    assert plain_http_warning("http://jobs.example.org", None) is None


def watch_calls(server) -> dict:
    """How many watchJob and watchJobs requests the node has answered, per operation."""
    return {
        operation: sum(
            value
            for (name, labels), value in server.scrape().items()
            if name == "xruntime_requests_total" and dict(labels).get("operation") == operation
        )
        for operation in ("watchJob", "watchJobs")
    }


def test_watch_of_several_jobs_holds_one_watchjobs_and_prints_each_end(server):
    """The slow job runs until the command has printed its progress, then is stopped
    (it ends SUCCEEDED with the steps done): no race with the command's start-up."""
    done = start(server, durationMs=0)
    failing = start(server, failAtStep=1)
    slow = start(server, durationMs=120_000, steps=120)
    before = watch_calls(server)
    proc = subprocess.Popen(
        [sys.executable, "-m", "xruntime", "watch", done, failing, slow, done],
        cwd=ROOT,
        env=cli_env(server),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        progress = re.compile(rf"{slow} RUNNING (\d+)/120 \(\d+\.\d s\)$")
        err_lines = []
        for line in proc.stderr:  # until the slow job's progress is printed
            err_lines.append(line.rstrip("\n"))
            if progress.match(err_lines[-1]):
                break
        assert err_lines and progress.match(err_lines[-1]), err_lines
        assert server.call("XRuntime", "stopJob", {"id": slow})["status"] in (
            "STOPPING",
            "SUCCEEDED",
        )
        out, rest = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    err = "\n".join(err_lines) + "\n" + rest
    after = watch_calls(server)
    assert proc.returncode == 1, "one of them FAILED"
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        [done, "SUCCEEDED"],
        [failing, "FAILED"],
        [slow, "SUCCEEDED"],
    ], "each job once, in the order given"
    assert after["watchJob"] == before["watchJob"], "no watchJob per job"
    assert after["watchJobs"] > before["watchJobs"]
    assert "\x1b" not in err
    assert int(progress.match(err_lines[-1]).group(1)) < 120, "progress before the end"
    assert err.splitlines()[-1].startswith(f"{slow} SUCCEEDED "), err


def test_watch_of_several_jobs_on_a_terminal_draws_a_bar_each(server):
    first, second = start(server, durationMs=800, steps=2), start(server, durationMs=0)
    code, output = run_on_terminal(server, "watch", first, second)
    assert code == 0, output
    text = ESCAPE.sub("", output)
    assert "━" in output
    assert first in text and second in text, "each bar names its job"
    assert re.search(rf"{first} SUCCEEDED \d+\.\d s", text) and re.search(
        rf"{second} SUCCEEDED \d+\.\d s", text
    )

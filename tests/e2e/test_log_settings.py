"""``[log]`` on a real node (issue 33; docs/operations.md, "The log"): with ``format =
"json"`` every line of the node's log, from every process, is one JSON object with its
fields, a job's lines carrying its id and a traceback apart from the message; ``level``
applied live in the main process, the HTTP process and the worker; ``format`` at the next
restart."""

import json
import os
import re
import time

import requests

from tests.harness import Server, write_config

TIMEOUT = 20.0  # s: the waits are for conditions; a loaded CI machine may take long
FIELDS = {"time", "level", "logger", "process", "message"}
ISO_UTC_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
#: ``time LEVEL logger[pid]: message``
TEXT_LINE = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+)\[(\d+)\]: (.*)$")


class QuietServer(Server):
    """A node whose log may hold no INFO line: ready once ``/readyz`` says its workers
    are up (the harness counts their "worker N started" lines otherwise)."""

    def _workers_ready(self):
        try:
            return requests.get(self.base + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


def wait_for(srv, predicate, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s:\n{srv.log()[-4000:]}"
        time.sleep(0.05)


def json_lines(text):
    """Each line of ``text`` as the object it holds (an assertion names a line that is
    not one)."""
    entries = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON object: {line!r}") from None
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


def text_lines(text):
    """(level, logger, pid, message) of each line of ``text`` (traceback lines apart)."""
    return [
        (found.group(1), found.group(2), int(found.group(3)), found.group(4))
        for found in map(TEXT_LINE.match, text.splitlines())
        if found
    ]


def test_a_json_node_writes_one_object_a_line_from_every_process(tmp_path):
    srv = Server(
        str(tmp_path / "node"), workers=1, extra='[log]\nformat = "json"\nlevel = "debug"\n'
    ).start()
    try:
        main_pid = srv.proc.pid
        job = srv.start_job(durationMs=50)["id"]
        assert srv.wait_done(job)["status"] == "SUCCEEDED"
        crash = srv.call("XCrashy", "startCrash", {"mode": "raise"})["id"]
        assert srv.wait_done(crash)["status"] == "FAILED"
        wait_for(
            srv,
            lambda: f'"job": "{crash}"' in srv.log() and "ZeroDivisionError" in srv.log(),
            "the crash's traceback",
        )
    finally:
        srv.stop()
    entries = json_lines(srv.log())
    assert len(entries) > 8
    for entry in entries:
        assert FIELDS <= set(entry) <= FIELDS | {"job", "exc", "stack"}, entry
        assert ISO_UTC_MS.match(entry["time"]), entry
        assert entry["level"] in ("debug", "info", "warning", "error", "critical"), entry
        assert isinstance(entry["process"], int) and isinstance(entry["message"], str)
        if entry.get("job") is not None:
            assert entry["job"] in entry["message"], entry  # (no job given explicitly here)
    # a job's lines carry its id, whichever process wrote them
    own = [entry for entry in entries if entry.get("job") == job]
    assert [entry for entry in entries if job in entry["message"]] == own
    queued = [entry for entry in own if entry["message"].endswith("XDemo.simulate QUEUING")]
    ended = [entry for entry in own if entry["message"].endswith("XDemo.simulate SUCCEEDED")]
    assert len(queued) == 1 and len(ended) == 1, own
    http_pid = queued[0]["process"]
    assert ended[0]["process"] == main_pid != http_pid
    assert queued[0]["logger"] == "xruntime.operations.jobs"
    # the service's exception: the worker's line, its traceback in exc
    (raised,) = [entry for entry in entries if "exc" in entry]
    assert raised["job"] == crash and raised["level"] == "error"
    assert raised["message"] == f"job {crash}: XCrashy.crash raised"
    assert "Traceback" in raised["exc"] and "ZeroDivisionError" in raised["exc"]
    assert raised["process"] not in (main_pid, http_pid)
    assert {main_pid, http_pid, raised["process"]} <= {entry["process"] for entry in entries}
    assert entries[0]["logger"] == "xruntime.cli"  # the first line already: the file is read


def test_the_level_is_applied_live_in_every_process_and_the_format_at_a_restart(tmp_path):
    folder = str(tmp_path / "node")
    srv = QuietServer(folder, workers=1, extra='[log]\nlevel = "warning"\n').start()
    try:
        main_pid = srv.proc.pid
        job = srv.start_job(durationMs=0)["id"]
        assert srv.wait_done(job)["status"] == "SUCCEEDED"
        quiet = text_lines(srv.log())
        assert not [line for line in quiet if line[0] in ("DEBUG", "INFO")], quiet

        # the edit: written aside, then renamed in place (as an editor does)
        scratch = write_config(
            os.path.join(folder, "edit"),
            srv.port,
            extra='[log]\nlevel = "debug"\nformat = "json"\n',
            workers=1,
        )
        os.replace(scratch, srv.config)

        def said(level, message):
            """The pid of the line at ``level`` whose message is ``message`` (None: none)."""
            found = [
                pid
                for lvl, _, pid, text in text_lines(srv.log())
                if (lvl, text) == (level, message)
            ]
            return found[0] if found else None

        wait_for(srv, lambda: said("INFO", "main process: log level debug (was warning)"), "main")
        assert said("INFO", "main process: log level debug (was warning)") == main_pid
        http_said = "HTTP process 0: log level debug (was warning)"
        wait_for(srv, lambda: said("INFO", http_said), "the HTTP process")
        http_pid = said("INFO", http_said)
        assert http_pid != main_pid
        debug = "HTTP process 0: the settings of a reload are in force"
        wait_for(srv, lambda: said("DEBUG", debug), "the HTTP process's debug line")
        assert said("DEBUG", debug) == http_pid
        # the main process says it reloaded (INFO: the new level first), and that the
        # format waits for a restart
        reloaded = f"{srv.config}: reloaded; log_level changed"
        assert said("INFO", reloaded) == main_pid, srv.log()[-3000:]
        waits = (
            f"{srv.config}: log_format changed to 'json'; it takes effect at the next "
            "restart (running with 'text')"
        )
        assert said("WARNING", waits) == main_pid

        # a job now: its lines (DEBUG: every job's) are written again, by the HTTP
        # process and the main process; the worker applies the level with the job
        job = srv.start_job(durationMs=0)["id"]
        assert srv.wait_done(job)["status"] == "SUCCEEDED"
        wait_for(srv, lambda: said("DEBUG", f"job {job} XDemo.simulate SUCCEEDED"), "the job")
        assert said("DEBUG", f"job {job} XDemo.simulate QUEUING") == http_pid
        assert said("DEBUG", f"job {job} XDemo.simulate RUNNING on worker 0 (attempt 1)") == (
            main_pid
        )
        worker_said = "worker process: log level debug (was warning)"
        wait_for(srv, lambda: said("INFO", worker_said), "the worker")
        assert said("INFO", worker_said) not in (main_pid, http_pid)
        assert not [line for line in srv.log().splitlines() if line.startswith("{")]
    finally:
        srv.stop()

    # the next start takes the format, and the level it left off with
    offset = len(srv.log())
    srv.start()
    try:
        job = srv.start_job(durationMs=0)["id"]
        assert srv.wait_done(job)["status"] == "SUCCEEDED"
        wait_for(srv, lambda: f"job {job} XDemo.simulate SUCCEEDED" in srv.log(), "the job")
    finally:
        srv.stop()
    entries = json_lines(srv.log()[offset:])
    assert all(FIELDS <= set(entry) for entry in entries)
    assert [entry["job"] for entry in entries if entry["message"].endswith("QUEUING")] == [job]

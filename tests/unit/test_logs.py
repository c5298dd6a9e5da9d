"""The log's forms (xruntime/support/logs.py): the JSON formatter's fields, the job id it
finds, exceptions apart from the message, one line per record whatever the message
holds; the text form as before; ``[log]`` in the file; the level applied live."""

import calendar
import io
import json
import logging
import os
import re
import sys
import time
import warnings

import pytest

from xruntime.settings import config
from xruntime.settings.schema import keys_of
from xruntime.support import logs
from xruntime.support.logs import JsonFormatter, OneLineFormatter

JOB = "070d351f-ab32-4873-a9d6-373f0cd0d5ba"
OTHER = "468cce32-0d4b-4bd1-8a4e-4ad1b7b0a7c1"
ISO_UTC_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture
def logger():
    """A logger of its own writing through a JSON formatter into a buffer: (logger,
    function answering the lines written)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("xruntime.tests.logs")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    yield log, lambda: stream.getvalue().splitlines()
    log.removeHandler(handler)
    log.propagate = True


def one(lines) -> dict:
    (line,) = lines()
    return json.loads(line)


@pytest.fixture
def root_logging(monkeypatch):
    """The root logger, the module's handler and the environment as they were, after a
    test that calls ``setup_logging`` or ``set_level``."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    monkeypatch.setattr(logs, "_handler", None)
    monkeypatch.setattr(logs, "_exported", False)
    # (set first, so that its absence is what is put back, whatever the test sets)
    monkeypatch.setenv(logs.ENVIRONMENT, "")
    monkeypatch.delenv(logs.ENVIRONMENT)
    yield root
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


# ------------------------------------------------------------------------ JSON: the fields


def test_a_line_holds_time_level_logger_process_and_the_formatted_message(logger):
    log, lines = logger
    before = time.time()
    log.warning("%d of %s", 3, "them")
    entry = one(lines)
    assert list(entry) == ["time", "level", "logger", "process", "message"]
    assert ISO_UTC_MS.match(entry["time"]), entry["time"]
    written = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(before)))
    assert entry["time"][:19] >= written  # UTC, not local time
    assert entry["level"] == "warning"
    assert entry["logger"] == "xruntime.tests.logs"
    assert entry["process"] == os.getpid()
    assert entry["message"] == "3 of them"


def test_the_time_is_utc_to_the_millisecond():
    record = logging.makeLogRecord({"msg": "m", "levelno": logging.INFO, "levelname": "INFO"})
    record.created = calendar.timegm((2026, 11, 23, 1, 43, 6)) + 0.3079
    record.msecs = 307.0  # (as logging computes it: whole milliseconds)
    assert json.loads(JsonFormatter().format(record))["time"] == "2026-11-23T01:43:06.307Z"


@pytest.mark.parametrize(
    "level, name",
    [(logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.ERROR, "error")],
)
def test_the_level_is_written_in_lower_case_as_the_file_writes_it(logger, level, name):
    log, lines = logger
    log.log(level, "x")
    assert one(lines)["level"] == name


# ------------------------------------------------------------------------ JSON: the job


@pytest.mark.parametrize(
    "message",
    [
        f"job {JOB} XDemo.simulate QUEUING",
        f"job {JOB}: its result goes through the pipe: full",
        f"worker 0 died (exit code None) while running job {JOB}",
        f"job {JOB} waits for 3 child jobs (stage 1), holding no worker",
    ],
)
def test_the_job_id_is_taken_from_the_message(logger, message):
    log, lines = logger
    log.info("%s", message)
    entry = one(lines)
    assert entry["job"] == JOB and entry["message"] == message


def test_the_first_job_named_is_the_lines_job(logger):
    log, lines = logger
    log.info("job %s: parent of job %s", JOB, OTHER)
    assert one(lines)["job"] == JOB


def test_a_job_given_with_the_record_wins_over_the_message(logger):
    log, lines = logger
    log.info("child job %s started", OTHER, extra={"job": JOB})
    assert one(lines)["job"] == JOB


@pytest.mark.parametrize(
    "message",
    [
        "retention: erased 3 expired job(s)",
        "job 42 is no uuid",
        f"jobs {JOB} (no job word)",
        f"xjob {JOB}",
        "worker 0 started (pid 22912)",
    ],
)
def test_no_job_field_without_a_job(logger, message):
    log, lines = logger
    log.info("%s", message)
    assert "job" not in one(lines)


# ------------------------------------------------------------------------ JSON: exceptions


def test_the_traceback_goes_into_exc_not_into_the_message(logger):
    log, lines = logger
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        log.exception("job %s: XCrashy.crash raised", JOB)
    entry = one(lines)
    assert entry["message"] == f"job {JOB}: XCrashy.crash raised"
    assert entry["level"] == "error" and entry["job"] == JOB
    assert entry["exc"].startswith("Traceback (most recent call last):\n")
    assert entry["exc"].rstrip().endswith("ZeroDivisionError: division by zero")
    assert list(entry)[-1] == "exc"


def test_exc_info_given_as_a_tuple_and_a_stack(logger):
    log, lines = logger
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        info = sys.exc_info()
    log.warning("w", exc_info=info, stack_info=True)
    entry = one(lines)
    assert "ValueError: bad\nvalue" in entry["exc"]
    assert entry["stack"].startswith("Stack (most recent call last):")
    assert entry["message"] == "w"


def test_no_exc_field_without_an_exception(logger):
    log, lines = logger
    log.error("plain")
    assert "exc" not in one(lines) and "stack" not in one(lines)


# ------------------------------------------------------------------------ JSON: one line


@pytest.mark.parametrize(
    "message",
    [
        "a\nb",
        "a\r\nINFO forged: line",
        "tab\tand\x00nul\x1b[31m",
        "line\u2028separator\u2029paragraph",
        "next line\x85and \x1c\x1d\x1e",
        "été ✓ 東京",
        '"quotes" and \\ backslash',
    ],
)
def test_every_record_is_one_line_whatever_its_message_holds(logger, message):
    log, lines = logger
    try:
        raise RuntimeError(message)
    except RuntimeError:
        log.exception("path %s", message)
    (line,) = lines()  # str.splitlines splits at \u2028, \x85, \x1c… too
    assert line.isascii()
    entry = json.loads(line)
    assert entry["message"] == f"path {message}"
    assert message in entry["exc"]


def test_a_message_that_is_no_string(logger):
    log, lines = logger
    log.info({"a": 1})
    assert one(lines)["message"] == "{'a': 1}"


# ------------------------------------------------------------------------ the text form


def test_the_text_form_is_as_before():
    record = logging.makeLogRecord(
        {
            "name": "xruntime.engine",
            "msg": "job %s\nforged",
            "args": (JOB,),
            "levelno": logging.INFO,
            "levelname": "INFO",
        }
    )
    text = OneLineFormatter(logs.TEXT).format(record)
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO xruntime.engine\[{os.getpid()}\]: "
        rf"job {JOB}\\nforged",
        text,
    ), text


# ------------------------------------------------------------------------ setting it up


def test_setup_logging_installs_the_form_and_level_asked(root_logging, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging(form="json", level="warning")
    log = logging.getLogger("xruntime.tests.setup")
    log.info("not written")
    log.warning("job %s: written", JOB)
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["job"] == JOB
    assert root_logging.level == logging.WARNING
    logs.setup_logging(form="text", level="debug")  # again: replaces its handler
    log.debug("debug now")
    assert stream.getvalue().splitlines()[-1].endswith(": debug now")
    assert sum(1 for handler in root_logging.handlers if handler is logs._handler) == 1
    assert os.environ.get(logs.ENVIRONMENT) is None  # not exported


def test_a_logger_with_its_own_level_obeys_the_files_level(root_logging, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging(form="json", level="error")
    logging.getLogger("uvicorn.error").warning("uvicorn's own warning")  # (it is at WARNING)
    assert stream.getvalue() == ""


def test_the_main_process_hands_form_and_level_on(root_logging, monkeypatch):
    """A worker process starts with no settings: it reads the environment the main
    process left, and follows the live level the main process applies."""
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    logs.setup_logging(form="json", level="warning", export=True)
    assert os.environ[logs.ENVIRONMENT] == "json warning"
    logs.set_level("debug", "main process")
    assert os.environ[logs.ENVIRONMENT] == "json debug"
    monkeypatch.setattr(logs, "_exported", False)  # now as a worker started from it
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging(inherit=True)
    logging.getLogger("xruntime.tests.worker").debug("from a worker")
    assert json.loads(stream.getvalue().splitlines()[-1])["message"] == "from a worker"


def test_without_environment_a_process_starts_as_text_and_info(root_logging, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging()
    logging.getLogger("xruntime.tests.plain").debug("dropped")
    logging.getLogger("xruntime.tests.plain").info("kept")
    (line,) = stream.getvalue().splitlines()
    assert " INFO xruntime.tests.plain[" in line and line.endswith("]: kept")


def test_set_level_applies_a_change_and_says_so_once(root_logging, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging(form="json", level="warning")
    logs.set_level("warning", "HTTP process 0")  # no change: no line
    assert stream.getvalue() == ""
    logs.set_level("debug", "HTTP process 0")
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["message"] == "HTTP process 0: log level debug (was warning)"
    assert entry["level"] == "info" and entry["logger"] == "xruntime.support.logs"
    assert root_logging.level == logging.DEBUG and logs._handler.level == logging.DEBUG
    logs.set_level("error", "HTTP process 0")  # its own line is below the new level
    assert len(stream.getvalue().splitlines()) == 1
    assert root_logging.level == logging.ERROR


def test_python_warnings_are_records_in_json(root_logging, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging(form="json", level="info")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("old API\nsecond line", UserWarning, stacklevel=1)
    (line,) = stream.getvalue().splitlines()
    entry = json.loads(line)
    assert entry["logger"] == "py.warnings" and "old API" in entry["message"]


# ------------------------------------------------------------------------ [log] in the file


def test_the_files_choices_are_the_logs():
    keys = keys_of("log")
    for level in logs.LEVELS:
        assert keys["level"].kind.check(level) == level
    for form in logs.FORMATS:
        assert keys["format"].kind.check(form) == form
    assert keys["level"].live and not keys["format"].live
    assert "log_format" in config.RESTART_KEYS and "log_level" in config.LIVE_FIELDS


def test_log_table_read_and_checked():
    settings = config.parse('[log]\nlevel = "debug"\nformat = "json"\n', "x.toml")
    assert (settings.log_level, settings.log_format) == ("debug", "json")
    assert (config.Settings().log_level, config.Settings().log_format) == ("info", "text")
    with pytest.raises(config.ConfigError) as caught:
        config.parse('[log]\nlevel = "verbose"\nformat = "JSON"\n', "x.toml")
    assert caught.value.errors == [
        'line 2: [log] level: expected "debug", "info", "warning" or "error", got \'verbose\'',
        'line 3: [log] format: expected "text" or "json", got \'JSON\'',
    ]


def test_logging_is_no_table():
    """``[log]`` is the table; ``[logging]`` stays unknown (tests/e2e/test_config_reload)."""
    with pytest.raises(config.ConfigError) as caught:
        config.parse('[logging]\nlevel = "debug"\n', "x.toml")
    assert "unknown table or key 'logging'" in caught.value.errors[0]


def test_a_worker_is_sent_the_level():
    settings = config.parse('[log]\nlevel = "debug"\nformat = "json"\n', "x.toml")
    assert settings.services_own().log_level == "debug"


def test_only_a_worker_takes_the_form_and_level_from_the_environment(root_logging, monkeypatch):
    """A node started from a shell (or a test) that has the variable set is not bound by
    it: only worker processes, which start with no settings, read it."""
    monkeypatch.setenv(logs.ENVIRONMENT, "json debug")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.setup_logging()
    logging.getLogger("xruntime.tests.plain").debug("dropped")
    logging.getLogger("xruntime.tests.plain").info("kept")
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("]: kept") and not line.startswith("{")

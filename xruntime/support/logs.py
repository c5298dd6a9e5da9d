"""One log for a node: every process writes its lines to the same stream, one format.

The form is the administrator's ``[log] format``: ``"text"``, one line per record
(``TEXT``), or ``"json"``, one JSON object per line (``JsonFormatter``) for journald, Loki
or ELK; the level is ``[log] level``, applied live (``set_level``).  The main process
reads the file and starts the others: it hands both on in the environment
(``ENVIRONMENT``), which a worker process, told no settings before its first job, starts
with; the HTTP and callbacks processes start with the settings they are given, and each
process applies a new level when the main process sends new settings (a worker: with
each job it runs).  This module knows no settings (its layer's neighbour): it takes the
keys' values as strings.
"""

import json
import logging
import os
import re
import sys
import time
from typing import Any

#: The text form of a line, the same in every process: ``time LEVEL logger[pid]: message``.
TEXT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
#: ``[log] level`` → the logging level.
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
#: ``[log] format``'s values.
FORMATS = ("text", "json")
#: Where the main process leaves ``"FORMAT LEVEL"`` (``"json info"``) for the processes
#: it starts: what a worker process starts with.
ENVIRONMENT = "XRUNTIME_LOG"

log = logging.getLogger(__name__)


class OneLineFormatter(logging.Formatter):
    """Each message on one line: a line break or another control character in it (a
    request's path, say) is written escaped, so no client can forge a log line.  A
    traceback, written after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


_CONTROLS = {c: f"\\x{c:02x}" for c in range(32) if c != 9}
_CONTROLS.update({10: "\\n", 13: "\\r", 127: "\\x7f"})


def escape_controls(text: str) -> str:
    return text.translate(_CONTROLS)


def one_line(exc: BaseException) -> str:
    """``exc`` as one line, its type's name first: ``ValueError: …`` (what a process
    that could not start tells the main process: ``support.lifeline``, ``engine.worker``)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_JOB_ID = re.compile(r"\b[Jj]ob ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b")


def job_of(record: logging.LogRecord, message: str) -> str | None:
    """The id of the job a record is about: its own ``job`` attribute when it carries
    one (``log.info(..., extra={"job": job_id})``), else the first ``job <uuid>`` of its
    formatted message, as the engine's and the operations' lines write it
    (``"job %s RUNNING …"``, ``"worker 0 died … while running job %s"``); None when
    neither says one."""
    given = getattr(record, "job", None)
    if given:
        return str(given)
    found = _JOB_ID.search(message)
    return found.group(1) if found else None


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line: ``time`` (ISO 8601, UTC, to the
    millisecond), ``level`` (``"info"``…), ``logger``, ``process`` (the pid),
    ``job`` (the job's id, where there is one: ``job_of``), ``message`` (formatted), and
    ``exc`` (the traceback of the exception logged with it) and ``stack`` when there is
    one; never a traceback in ``message``.  JSON escapes every line break and control
    character (and, ASCII only, any other character that splits a line somewhere), so a
    message or a traceback of many lines is still one line of the log."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "process": record.process if record.process is not None else os.getpid(),
        }
        job = job_of(record, message)
        if job is not None:
            line["job"] = job
        line["message"] = message
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=True, default=str)


_handler: logging.Handler | None = None  # this module's handler on the root logger
_exported = False  # this process hands its form and level on (``setup_logging(export=)``)


def setup_logging(
    fmt: str = TEXT,
    form: str | None = None,
    level: str | None = None,
    export: bool = False,
    inherit: bool = False,
) -> None:
    """Write this process's log to stderr: in ``form`` (``"text"``, each line ``fmt``;
    ``"json"``), the lines of ``level`` and above.  None: with ``inherit`` (a worker
    process, which starts with no settings) as the environment says (``ENVIRONMENT``,
    what the node's main process set), else text and info.  With ``export``, the
    processes this one starts get them (the main process, once it has read the file).
    Called again, it replaces the handler it installed."""
    global _handler, _exported
    inherited = os.environ.get(ENVIRONMENT, "").split() if inherit else []
    form = form or next((word for word in inherited if word in FORMATS), "text")
    level = level or next((word for word in inherited if word in LEVELS), "info")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else OneLineFormatter(fmt))
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    _handler = handler
    _level(LEVELS[level])
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # JSON: Python's warnings (a library's DeprecationWarning…) become records as well
    # (logger ``py.warnings``) instead of lines of text on the same stream
    logging.captureWarnings(form == "json")
    if export:
        _exported = True
        os.environ[ENVIRONMENT] = f"{form} {level}"


def set_level(level: str, who: str) -> None:
    """Apply ``[log] level`` (a new setting) in this process, when it is not the level
    in force; ``who`` (``"HTTP process 0"``) says which process in the one line that
    tells the change, written at INFO: seen unless the new level is above it."""
    new = LEVELS[level]
    old = logging.getLogger().level
    if new == old:
        return
    _level(new)
    if _exported:  # the processes started from now on (a worker replaced) start with it
        form = os.environ.get(ENVIRONMENT, "text").split()[0]
        os.environ[ENVIRONMENT] = f"{form} {level}"
    log.info("%s: log level %s (was %s)", who, level, logging.getLevelName(old).lower())


def _level(level: int) -> None:
    """Lines below ``level`` are dropped: at the root, and at the handler, which a
    logger with a level of its own (``uvicorn.error``) passes its records to as well."""
    logging.getLogger().setLevel(level)
    if _handler is not None:
        _handler.setLevel(level)


class OncePerPeriod(logging.LoggerAdapter):
    """A logger that writes at most one line per ``period`` s: an outage of the store
    fails every request and every write for its length, and a line every few seconds
    says it all."""

    def __init__(self, logger: logging.Logger, period: float) -> None:
        super().__init__(logger, {})
        self.period = period
        self._next = 0.0
        self._held = 0

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return
        if self._held:
            msg = f"{msg} ({self._held} more like it since the last such line)"
        self._next, self._held = now + self.period, 0
        super().log(level, msg, *args, **kwargs)

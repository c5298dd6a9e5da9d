"""One log for a node: every process writes its lines to the same stream, one format."""

import logging
import os
import sys
import time
from typing import Any


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


def setup_logging(
    fmt: str = f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s",
) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(fmt))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


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

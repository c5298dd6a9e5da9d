"""One log for a node: every process writes its lines to the same stream, one format."""
import logging
import os
import sys
import time


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


class OncePerPeriod(logging.LoggerAdapter):
    """A logger that writes at most one line per ``period`` s: an outage of the store
    fails every request and every write for its length, and a line every few seconds
    says it all."""

    def __init__(self, logger, period: float):
        super().__init__(logger, {})
        self.period = period
        self._next = 0.0
        self._held = 0

    def log(self, level, msg, *args, **kwargs):
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return
        if self._held:
            msg = f"{msg} ({self._held} more like it since the last such line)"
        self._next, self._held = now + self.period, 0
        super().log(level, msg, *args, **kwargs)

"""What a node's HTTP process or callbacks process tells its main process, on the
control pipe the main process sends it the settings and "stop" on.

Two messages go back: ``UP`` once the process serves, and ``("error", "ValueError:
…")`` when its entry raises, just before the process exits.  The main process reads
them when the process has died (``serving.node.NodeProcesses.watch``): a process that never
said ``UP`` failed to start, and the error, if any, is what the main process logs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection

from ..support.logs import one_line

#: The process serves (what comes after counts as a crash, not as a failed start).
UP = ("up",)
#: ``(ERROR, "ValueError: …")``: the exception the process's entry ended with.
ERROR = "error"


def say_up(control: Connection) -> None:
    try:
        control.send(UP)
    except OSError:
        pass  # the main process is gone; the process notices on its next read


@contextmanager
def reporting(control: Connection) -> Iterator[None]:
    """Send the main process the exception that ends the body, then let it go on (the
    process prints its traceback and exits with 1, as before)."""
    try:
        yield
    except BaseException as exc:
        try:
            control.send((ERROR, one_line(exc)))
        except OSError:
            pass
        raise


def last_words(control: Connection) -> tuple[bool, str | None]:
    """What a process that has ended sent on ``control``: whether it said ``UP``, and
    the error it ended with (None: none was sent, e.g. it was killed)."""
    up, error = False, None
    try:
        while control.poll():
            message = control.recv()
            if message == UP:
                up = True
            elif message[0] == ERROR:
                error = message[1]
    except (EOFError, OSError):
        pass  # all read
    return up, error

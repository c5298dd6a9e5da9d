"""SIGINT and SIGTERM, taken from the first moment of ``xruntime serve``: a node stopped
while it starts ends as cleanly as one stopped while it serves.

Python turns SIGINT into a KeyboardInterrupt wherever the main thread is, and SIGTERM
ends the process on the spot.  A node takes a second or two to start (its imports, the
configuration, the database, its processes): a Ctrl-C then printed a traceback from the
middle of an import or of a half-made node, and let multiprocessing's exit hooks kill
the worker processes that were starting (issue 33).  ``catch()`` makes both signals
only record that the node is to stop: ``python -m xruntime serve`` calls it before it
imports anything else (``xruntime.__main__``), ``xruntime serve`` first thing in the
command (``cli.cmd_serve``).  ``serving.node.serve`` then looks (``received``) before it
makes the node, and once it has made it installs its own handler and acts on a signal
that came before, skipping what is left of the start-up.

Light on purpose (``signal`` alone): it is imported before the rest of the program.
"""

from __future__ import annotations

import signal
from types import FrameType

#: The signals that stop a node.
STOPS = (signal.SIGINT, signal.SIGTERM)

_received: list[signal.Signals] = []


def catch() -> None:
    """From now on SIGINT and SIGTERM only record that the node is to stop (call it in
    the main thread; again is harmless)."""
    for sig in STOPS:
        signal.signal(sig, _record)


def received() -> signal.Signals | None:
    """The first of them that came since ``catch()`` (None: none)."""
    return _received[0] if _received else None


def _record(signum: int, _frame: FrameType | None) -> None:
    _received.append(signal.Signals(signum))

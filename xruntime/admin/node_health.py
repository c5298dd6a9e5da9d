"""What the main process tells its HTTP processes of the node (``/readyz``'s
``workers`` and ``node`` checks), in a module of its own: the main process sends it
without importing the HTTP side that answers ``/readyz`` (``admin.readiness`` and, with
it, the ASGI layer and the bindings)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeHealth:
    """What the main process tells its HTTP processes of the node (on their pipe)."""

    workers_up: int = 0
    workers: int = 0
    closing: bool = False

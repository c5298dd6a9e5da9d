"""The callbacks process's entry (the target ``node`` spawns it with), in a module of its
own as ``http_entry`` is the HTTP processes': a spawned process imports the module of its
target, and the main process imports it too to name it.  Here, the main process does not
import the delivery (the sending, the signing, standardwebhooks) of a callbacks process it
may never start (``[callbacks] allowed`` empty, the default); the callbacks process
imports it as before, before it runs.
"""

from typing import Any


def delivery_main(*args: Any) -> None:
    """``args`` are ``callbacks.process.delivery_main``'s, as ``NodeProcesses._start``
    gives them."""
    from ..callbacks.process import delivery_main as run

    run(*args)

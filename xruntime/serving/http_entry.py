"""An HTTP process's entry (the target ``node`` spawns it with), in a module of its own.

A spawned process imports the module of its target before running it.  Here, that is
this module alone: a target in ``node`` would make every HTTP process import the main
process's side too (the supervisor, worker slots, cleaner, reload); and ``node`` does
not import ``http_process`` either, so the main process never loads the HTTP side
(uvicorn, the bindings).
"""

from typing import Any


def http_main(*args: Any) -> None:
    """``args`` are ``http_process.http_main``'s, as ``NodeProcesses._start`` gives them;
    the exception it ends with goes to the main process too (``support.lifeline``).
    First of all, the process ignores Ctrl-C and ends with the main process
    (``support.parent_death``)."""
    from ..support.parent_death import die_with_parent

    die_with_parent()
    from ..support.lifeline import reporting

    with reporting(args[4]):  # (the control pipe)
        from .http_process import http_main as run

        run(*args)

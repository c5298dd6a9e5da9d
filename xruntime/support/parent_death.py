"""A node dies whole: each of its child processes dies with its main process, however
that one died (SIGKILL, the OOM killer, a crash), and is deaf to the terminal's Ctrl-C.

A node is a main process and its children, all started with ``spawn``: the worker
processes (``engine.process``), the HTTP processes and the callbacks process
(``serving.node``).  A main process killed with SIGKILL cannot stop them: its worker
went on computing its job for as long as the job ran, then blamed the service for the
broken pipe, and on PostgreSQL another node ran the same job meanwhile, so that its
body ran twice at once (issue 33).  So each child, first thing in its entry
(``die_with_parent``), asks Linux to send it SIGKILL when its parent dies
(``prctl(PR_SET_PDEATHSIG)``): no process of the node outlives its main process by
more than the kernel's delivery of a signal, and no job's body runs on.  SIGKILL and
not SIGTERM: a node without its main process has nothing to finish (its HTTP processes
would answer for a node that runs no job, a worker would run a job that another node
takes over); its processes end as at a power loss, which clients already survive.

Two rules of PR_SET_PDEATHSIG shape its use:

* The child asks for it once it runs, not at its start: if its parent died before
  (while the child was importing its entry's modules, a second or so), no signal ever
  comes.  So right after asking, the child compares its parent's pid with the pid of
  the process that started it, and exits at once when they differ (it was re-parented:
  the parent is gone).
* The signal comes when the *thread* that started the child ends, not its process.
  Each child is started by a thread that lives as long as the node: a worker process,
  and each one that replaces it, by its worker slot's thread (``engine.slot``: the
  slot's loop starts them, and the thread ends only after it ended its worker); the
  HTTP processes, the callbacks process and their replacements by the main thread
  (``serving.node.serve``, whose loop restarts them).  A child started from a
  short-lived thread would be killed when that thread ends: start none that way.

Ctrl-C sends SIGINT to every process of the terminal's process group: to the node's
children too.  They must not end on it with a KeyboardInterrupt traceback each: the
main process decides when they end (it tells them, or ends them, as it shuts down).  A
child ignores SIGINT from its entry on, and SIGHUP too, which asks the main process
alone to read its configuration again.  Before its entry, while Python starts and
imports the modules the entry needs (up to a second), both are blocked: the child is
started with them blocked in the starting thread (``start_child``), and a signal mask
is inherited across fork and exec (multiprocessing starts its resource tracker the same
way); a signal that came meanwhile waits, and is dropped when the entry ignores it.

multiprocessing's resource tracker, the node's last process, needs none of this: it
ignores SIGINT and SIGTERM itself and exits when the last process holding its pipe
(the main process and each child) has ended, as they all do when the main one dies.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
from multiprocessing import resource_tracker
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

#: What a node's children ignore (the main process decides when they end; SIGHUP is
#: its own "read the configuration again").
IGNORED = (signal.SIGINT, signal.SIGHUP)

#: ``prctl``'s option: the signal the calling process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def start_child(process: BaseProcess) -> None:
    """``process.start()``, with the signals a child ignores blocked for the start in
    the calling thread (the child inherits that mask: it cannot die on a Ctrl-C before
    its entry ignores it).  The thread must live as long as the child (see above)."""
    # The resource tracker first, if it is not running yet: ``start`` would start it,
    # and starting it unblocks SIGINT in this thread (its own guard against the race).
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def die_with_parent() -> None:
    """Call first thing in a child's entry (before any slow import): ignore SIGINT and
    SIGHUP from now on, let the other signals in, and end when the parent ends.  Exits
    at once if the parent has already ended."""
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, IGNORED)  # (what came meanwhile is dropped)
    parent = multiprocessing.parent_process()  # None when not started by multiprocessing
    parent_pid = parent.pid if parent is not None else os.getppid()
    if not _signal_when_parent_dies(signal.SIGKILL) and parent is not None:
        _watch_parent(parent.sentinel)  # not Linux: its end of the pipe from the parent
    if os.getppid() != parent_pid:  # it died before we asked: no signal will come
        os._exit(0)


def _signal_when_parent_dies(sig: signal.Signals) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)``; whether it was set (False off Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # the C library's
    except (OSError, AttributeError):
        return False
    prctl.restype = ctypes.c_int
    zero = ctypes.c_ulong(0)
    return prctl(ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(sig), zero, zero, zero) == 0


def _watch_parent(sentinel: int | None) -> None:
    """Where prctl is missing: a thread that ends the process when the parent has
    ended, which its sentinel (the child's end of a pipe whose other end only the parent
    holds) says by becoming readable."""
    if sentinel is None:
        return

    def watch() -> None:
        wait([sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()

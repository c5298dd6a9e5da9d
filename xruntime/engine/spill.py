"""A large result crosses from its worker to the node's main process as a file in
memory (tmpfs), not through their pipe.

Through the pipe a result is copied five times: into bytes, into the pickle, through
the pipe, out of it, out of the pickle.  Spilled, the worker writes its stored form
once into a file of the supervisor's folder and sends the file's path; the main
process maps the file and the store writes the mapped bytes (``spilled``), then the
file is removed.

So a result takes one of three routes (``engine.worker``'s ``_result_message`` picks),
and each has its reason:

1. **the file it was made in** (``Spill``): a stored form written uncompressed (a
   table's arrays, the usual large result) is composed straight into a file, a piece
   at a time from the arrays themselves (``pwritev``), never whole in the worker's
   memory, so nothing is copied on the way;
2. **a file written after** (``spill``): a large form that had to be made in memory (a
   compressed one: its length is known only at the end) is written once into a file;
3. **the pipe** (``Result``): a small form (``SPILL_ABOVE`` bytes at most, nearly every
   result), whose copies cost less than a file; and any form when no file can be
   made (``/dev/shm`` full, or a run given no spill folder), so a job never fails for
   the lack of a faster route.  Where the folder is the store's own disk (a SQLite
   store's), no room fails the job instead (``NoRoom``): the store would need the room
   too.

The folder is private (0700: it holds users' results), in
``/dev/shm`` where there is one (or, for a SQLite store, beside its result files:
``store/result_files.py``); the supervisor removes it when it stops, and a node
that starts removes the folders of nodes that died without doing so.
"""

import logging
import mmap
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..protocol.faults import InternalErrorFault
from ..store.result_files import ResultFile
from ..store.unavailable import NO_SPACE

log = logging.getLogger(__name__)

#: posix_fadvise's advice that starts the writing out of a file's dirty pages (Linux)
_WRITE_OUT = getattr(os, "POSIX_FADV_DONTNEED", 4)
#: A stored result larger than this (bytes) is spilled; a smaller one goes through the pipe.
SPILL_ABOVE = 1 << 20
PREFIX = "xruntime-results-"
_FOLDER = re.compile(re.escape(PREFIX) + r"(\d+)-")


def make_spill_folder(base: str | None = None) -> str:
    """A new private folder for this process's spilled results, in ``base`` (by default
    /dev/shm, else the temporary folder); the stale ones there are removed."""
    if base is None:
        shm = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
        base = "/dev/shm" if shm else tempfile.gettempdir()
    _remove_stale(base)
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)


def remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _remove_stale(base: str) -> None:
    """Remove the folders of processes that are gone (a node killed with SIGKILL)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        found = _FOLDER.match(name)
        if found and not _alive(int(found.group(1))):
            remove_folder(os.path.join(base, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def no_room_fault(size: int, cause: str) -> InternalErrorFault:
    """The fault of a job whose result found no room on the job store's disk (in its worker,
    ``NoRoom``, or when the store refuses it: ``engine.outcomes``)."""
    return InternalErrorFault(
        f"the job store's disk has no room for this job's result ({size} bytes): {cause}; "
        "the job is not run again",
        hint="Ask the administrator to free disk space (docs/operations.md, 'A full disk'), "
        "then start the job again.",
    )


class NoRoom(Exception):
    """(In the worker.) The result's file cannot be written for lack of room on the
    disk that keeps it as the job's result (a SQLite store's): the pipe is no way out,
    the store would need the same room.  The job fails (``engine.outcomes.no_room_fault``)."""

    def __init__(self, size: int, cause: OSError) -> None:
        super().__init__(f"{cause.strerror or cause}")
        self.size = size


def _no_room(final: bool, exc: OSError) -> bool:
    """Whether ``exc`` means the job's result has no room at all (``final``: the folder
    is where the store keeps it), rather than the pipe being a way round (/dev/shm)."""
    return final and exc.errno in NO_SPACE


class Spill:
    """(In the worker.) The file of the supervisor's folder that a job's large stored
    form is written into as it is made: the ``payload.form.Output`` that
    ``payload.form.compose_stored`` is given.  Removed (``discard``) unless handed over to the
    main process (``hand_over``)."""

    def __init__(self, folder: str, job_id: str, final: bool = False) -> None:
        # final: the folder is on the disk where the store keeps results (SQLite's)
        self.folder, self.job_id, self.final = folder, job_id, final
        self.path: str | None = None
        self._file: _SpillFile | None = None
        self._started = 0  # bytes whose writing out has been started

    def buffer(self, size: int) -> "bytearray | _SpillFile":
        """Where a form of ``size`` bytes is written: a new file when it is larger than
        SPILL_ABOVE; else, or when no file can be made (``/dev/shm`` full), a bytearray."""
        if size <= SPILL_ABOVE or self.path is not None:
            return bytearray(size)
        try:
            fd, path = tempfile.mkstemp(prefix=f"{self.job_id}-", dir=self.folder)
        except OSError as exc:
            if _no_room(self.final, exc):
                raise NoRoom(size, exc) from exc
            log.warning("job %s: its result goes through the pipe: %s", self.job_id, exc)
            return bytearray(size)
        try:
            # the space now, before any work is spent on a form that finds no room
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            os.close(fd)
            os.unlink(path)
            if _no_room(self.final, exc):
                raise NoRoom(size, exc) from exc
            log.warning("job %s: its result goes through the pipe: %s", self.job_id, exc)
            return bytearray(size)
        self.path, self._file = path, _SpillFile(fd)
        return self._file

    def written(self, upto: int) -> None:
        """Start writing out the bytes written so far (a file on disk: the store keeps
        it, store/result_files.py), so that the disk works while the rest is composed:
        ``hand_over`` then waits for the last piece only."""
        if self._file is not None and upto > self._started:
            # (for a file's dirty pages: their writing out is started, nothing waits)
            os.posix_fadvise(self._file.fd, self._started, upto - self._started, _WRITE_OUT)
            self._started = upto

    def holds(self, stored: object) -> bool:
        """Whether ``stored`` is this file (as ``buffer`` answered it)."""
        return self._file is not None and stored is self._file

    def hand_over(self) -> str:
        """The file's path for the main process (``SpilledResult``), closed here: its
        bytes on disk before its job can say SUCCEEDED (a store that keeps it as a file
        refers to it then); in /dev/shm there is nothing to write."""
        assert self._file is not None and self.path is not None
        os.fdatasync(self._file.fd)
        path = self.path
        self._close()
        self.path = None
        return path

    def discard(self) -> None:
        """Remove the file, if one was made and not handed over."""
        if self.path is not None:
            self._close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None

    def _close(self) -> None:
        if self._file is not None:
            os.close(self._file.fd)
            self._file = None


#: The most buffers one ``pwritev`` takes (Linux: 1 024).
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class _SpillFile:
    """A spill file as ``compose_stored`` writes it (``payload.form.Written``): each
    piece of the form, a few hundred buffers (its blocks' headers and slices of the
    arrays), in one ``pwritev``.  The kernel copies them into the page cache in bulk;
    written through a mapping, each of the file's pages was a page fault, and two workers
    composing at once (a parent's two children) took twice as long each."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, at: int, parts: Sequence[bytes | memoryview]) -> None:
        pending = [view for view in (memoryview(part).cast("B") for part in parts) if view]
        first = 0
        while first < len(pending):
            done = os.pwritev(self.fd, pending[first : first + _IOV_MAX], at)
            if done <= 0:
                raise OSError(f"a write to a spill file wrote {done} bytes")
            at += done
            while done:  # (on from the first byte not written: a write may be short)
                size = len(pending[first])
                if done < size:
                    pending[first] = pending[first][done:]
                    break
                done -= size
                first += 1


def spill(
    folder: str, job_id: str, stored: bytes | bytearray | mmap.mmap, final: bool = False
) -> str | None:
    """(In the worker.) Write ``stored`` to a new file of ``folder``; its path, or None
    when it cannot be written (``/dev/shm`` full: a container's is 64 MB by default), so
    the result goes through the pipe as before.  ``final`` (the folder is on the disk
    where the store keeps results): no room raises ``NoRoom`` instead."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"{job_id}-", dir=folder)
    except OSError as exc:
        if _no_room(final, exc):
            raise NoRoom(len(stored), exc) from exc
        log.warning("job %s: its result goes through the pipe: %s", job_id, exc)
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(stored)
            f.flush()
            os.fsync(f.fileno())  # (as ``Spill.hand_over``)
    except OSError as exc:
        os.unlink(path)
        if _no_room(final, exc):
            raise NoRoom(len(stored), exc) from exc
        log.warning("job %s: its result goes through the pipe: %s", job_id, exc)
        return None
    except BaseException:
        os.unlink(path)
        raise
    return path


@contextmanager
def spilled(path: str, as_file: bool = False) -> Iterator[memoryview | ResultFile]:
    """(In the main process.) The bytes of a spilled result, mapped, not copied (or,
    ``as_file``, the file as a ``ResultFile`` for a store that takes it in by a
    rename); the file is removed afterwards, whatever happens, unless it was taken."""
    try:
        if as_file:
            yield ResultFile(path, os.stat(path).st_size)
            return
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        try:
            yield view
        finally:
            view.release()
            try:
                mapped.close()
            except BufferError:  # a view of it is still held: unmapped when collected
                pass
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:  # (taken by the store)
            pass
